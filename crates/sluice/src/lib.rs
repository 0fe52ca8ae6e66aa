//! Sluice, a mail transfer agent.
//!
//! The module tree follows a message, bottom to top (each layer imports
//! only the layers below it; there are no import cycles):
//!
//! - [`message`], [`config`] (with [`log`], [`timefmt`], [`pki`]): shared types,
//!   settings and TLS trust;
//! - [`tables`]: lookup tables (static files, LDAP);
//! - [`routing`]: local domains and mailboxes, next hops, relay policy;
//! - [`bounce`]: building and storing DSNs;
//! - [`cluster`]: what the nodes of a cluster share in Redis (heartbeats,
//!   connection leases);
//! - [`queue`]: the scheduler ("qmgr") and the delivery-agent interface;
//! - [`receive::smtp`] (receive), [`deliver::smtp`] and [`maildir`] (the
//!   delivery agents): the stages that touch the network and mailboxes;
//! - [`daemon`]: wires everything together.
//!
//! The spool itself is the crate `sluice-spool`; [`tools`] holds the load
//! generator and the sink used by the benchmarks and tests.

pub mod accept;
pub mod admin;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod deliver;
pub mod intake;
pub mod log;
pub mod message;
pub mod pki;
pub mod queue;
pub mod receive;
pub mod record;
pub mod routing;
pub mod smtp;
pub mod tables;
pub mod timefmt;
pub mod tools;
