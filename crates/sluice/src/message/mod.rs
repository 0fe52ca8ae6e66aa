//! What every stage shares about a message: addresses, envelope flags,
//! delivery outcomes with their status codes, and where the body is.
//!
//! This is the bottom of the tree: it imports nothing else of the crate
//! except the date helpers, so every stage may depend on it.
//!
//! Trust: nothing here talks to the network; values come from parsed SMTP
//! input or from the spool, which checked them.

pub mod address;
pub mod body;
pub mod flags;
pub mod mime;
pub mod reply;
pub mod srs;
pub mod status;
