//! Sluice, a mail transfer agent.
//!
//! The module tree follows a message, bottom to top (a layer imports only
//! the layers below it; there are no import cycles between them):
//!
//! - [`message`] and [`config`] (the leaves), with [`timefmt`], [`pki`]
//!   (TLS trust), [`log`] (the mail log), [`rates`] (the dashboard's
//!   counts of the last minutes) and [`accept`] (what an accept loop does
//!   when `accept` fails): shared types, settings and services;
//! - [`tables`]: lookup tables (static files, LDAP);
//! - [`routing`]: local domains, virtual mailboxes and aliases, next hops,
//!   MX lookups, relay policy;
//! - [`smtp`]: what both directions of SMTP share (a stream that turns to
//!   TLS, a TCP or Unix socket);
//! - [`intake`]: the one way into the queue (Postfix's cleanup): trace
//!   headers, milters, DKIM signing, SPF/DKIM/DMARC, the spool write;
//! - [`receive`]: the doors mail comes in by: the SMTP server
//!   ([`receive::smtp`]), local submission ([`receive::local`]), and the
//!   policy-service and DNS-blocklist clients;
//! - [`record`]: bounces and other DSNs, which go back in through the intake;
//! - [`cluster`]: what the nodes of a cluster share in Redis (heartbeats,
//!   connection leases, rates, dead hosts) and shadow copies on a peer;
//! - [`queue`]: the scheduler ("qmgr") and the delivery-agent interface;
//! - [`deliver`]: the delivery agents, [`deliver::smtp`] (SMTP and LMTP)
//!   and [`deliver::maildir`];
//! - [`admin`]: the admin and submission sockets, `queue show` history,
//!   the metrics and dashboard server;
//! - [`daemon`]: wires everything together (reload, privileges, ACME);
//! - [`tools`]: the clients built into the binary: sendmail(1) and mailq,
//!   `sluice queue`, `dkim-keygen`, `cluster-ca`/`cluster-cert`.
//!
//! The cluster reaches the intake only through what the intake owns: its
//! storage trait ([`intake::store::Store`], which a node with shadow
//! copies implements as [`cluster::shadow::Mirrored`], chosen by the
//! daemon) and its door for claimed copies (`Intake::adopt`); the intake
//! does not import the cluster.
//!
//! The SMTP grammar is the crate `sluice-proto`, the spool `sluice-spool`;
//! the load generator and sink used by the benchmarks and tests are
//! `sluice-bench`.

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
pub mod rates;
pub mod receive;
pub mod record;
pub mod routing;
pub mod smtp;
pub mod tables;
pub mod timefmt;
pub mod tools;
