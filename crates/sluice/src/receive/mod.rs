//! The first step of a message's path: the doors mail comes in by. SMTP
//! sessions ([`smtp`]: listeners, PROXY protocol, STARTTLS, AUTH, per-
//! client limits, the transaction) and local submission ([`local`]:
//! sendmail(1) through the submission socket); AUTH may be decided by a
//! Dovecot ([`sasl_dovecot`]). Each door establishes who
//! is sending and reads the message; every message then goes through the
//! one intake (`crate::intake`), never to the spool directly.

pub mod access;
pub mod dnsbl;
pub mod dnscheck;
pub mod local;
pub mod policy;
pub mod restrict;
pub mod sasl_dovecot;
pub mod smtp;
