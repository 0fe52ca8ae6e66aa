//! Tools built into the binary: sendmail(1) and mailq, `sluice queue`
//! (the admin socket's client) and `sluice dkim-keygen`. The load
//! generator and sink are the `sluice-bench` crate's.

pub mod address;
pub mod cluster_pki;
pub mod keygen;
pub mod locate;
pub mod queue_cli;
pub mod sendmail;
