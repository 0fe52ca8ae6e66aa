//! Benchmark and test tools, kept out of the production binary (issue 20):
//! a load generator ([`bench`], in the spirit of smtp-source and postal),
//! a sink that accepts and counts mail as fast as it can ([`sink`], like
//! Postfix's smtp-sink) and the SVG rate charts they draw ([`chart`]).
//!
//! Trust: they talk to servers the operator points them at, on loopback
//! in the bench scripts and tests; nothing here is part of `sluice serve`.

pub mod bench;
pub mod chart;
pub mod sink;
