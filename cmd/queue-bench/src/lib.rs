//! `queue-bench` will measure the workqueue's throughput (add → get → done cycles and delayed
//! adds) on the same workloads as client-go's peer in `benches/clientgo/`, so the two can be
//! compared in one run.
