//! CustomResourceDefinitions generated from Rust types.
