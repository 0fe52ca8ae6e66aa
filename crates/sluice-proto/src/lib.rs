//! SMTP wire protocol for Sluice, with no sockets and no clocks.
//!
//! * [`line`] frames command lines out of a byte buffer and enforces the
//!   RFC 5321 command-line limit, bare-LF and NUL rules.
//! * [`data`] decodes a `DATA` body: only `CRLF.CRLF` ends it, dot-stuffing
//!   is undone exactly, bare CR/LF and over-long lines are detected.
//! * [`command`] turns one framed line into a typed command, strictly
//!   (RFC 5321 §4.1), and [`address`] parses paths into a form that is
//!   safe to write back on the wire; [`dsn`] checks the DSN extension's
//!   parameters (RFC 3461).
//! * [`dotstuff`] re-applies dot-stuffing when a stored body is sent on.
//!
//! Trust: every byte given to this crate comes from the network and may be
//! hostile; nothing here panics on input.

pub mod address;
pub mod command;
pub mod data;
pub mod dotstuff;
pub mod dsn;
pub mod line;

#[cfg(test)]
mod fuzz;
