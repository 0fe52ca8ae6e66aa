//! Benchmark tools built into the binary: `sluice bench` (load generator)
//! and `sluice sink` (accepts and counts mail as fast as it can).

pub mod bench;
pub mod sink;
