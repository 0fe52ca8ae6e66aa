//! Sluice, a mail transfer agent.
//!
//! Modules follow the data flow:
//! [`receive`] (SMTP sessions) → spool (crate `sluice-spool`) →
//! [`schedule`] (the in-memory queue) → [`deliver`] (SMTP client workers),
//! with [`bounce`] feeding DSNs back into the spool, and [`local`]
//! (virtual mailboxes, aliases, Maildir delivery) on [`lookup`] tables. [`route`] decides next
//! hops and relay permission, [`config`] holds every setting, [`log`] is the
//! mail log, [`server`] wires it all up. [`tools`] holds the load generator
//! and the sink used by the benchmarks and tests.

pub mod bounce;
pub mod config;
pub mod deliver;
pub mod local;
pub mod log;
pub mod lookup;
pub mod receive;
pub mod route;
pub mod schedule;
pub mod server;
pub mod timefmt;
pub mod tools;
