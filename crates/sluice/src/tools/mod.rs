//! Tools built into the binary: sendmail(1) and mailq, `sluice queue`
//! (the admin socket's client), `sluice dkim-keygen`, and the man pages
//! and shell completions of `sluice generate` (manual.rs). The load
//! generator and sink are the `sluice-bench` crate's.

pub mod address;
pub mod import;
/// `sluice cluster-ca` and `cluster-cert` (the cluster owns its PKI).
pub use crate::cluster::shadow::pki as cluster_pki;
pub mod keygen;
pub mod locate;
pub mod manual;
pub mod queue_cli;
pub mod sendmail;
