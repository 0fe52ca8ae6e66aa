//! The SMTP client: the delivery agent that relays mail to next hops.

mod agent;
pub mod auth;
mod conn;
pub mod dane;
pub mod dead;
pub mod egress;
mod fit;
#[cfg(test)]
mod fuzz;
pub mod generic;
pub mod guard;
pub mod mta_sts;
mod srs;
pub mod tls;
mod transaction;

pub use agent::probe::{wire_safe, Command, ProbeOutcome, Prober, ProberError};
pub use agent::SmtpAgent;
