//! Tools built into the binary: `sluice bench` (load generator), `sluice
//! sink` (accepts and counts mail as fast as it can) and `sluice
//! dkim-keygen`.

pub mod bench;
pub mod chart;
pub mod keygen;
pub mod queue_cli;
pub mod sendmail;
pub mod sink;
