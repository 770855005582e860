//! `informer-trace` will show an informer working live against any cluster: what the reflector
//! does (list pages, watch starts, bookmarks, relists and why), what the DeltaFIFO holds, and
//! the indexer's size and index values.
