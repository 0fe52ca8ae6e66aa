//! Envelope flags: bits persisted with each spooled message
//! (`sluice_spool::Envelope::flags`). The values are part of the spool
//! format: never renumber them.

/// The body was declared `BODY=8BITMIME`.
pub const EIGHTBITMIME: u32 = 1;
/// The client asked for `SMTPUTF8`: addresses or headers may be UTF-8.
pub const SMTPUTF8: u32 = 2;
/// A delivery status notification Sluice generated (sender is `<>`).
pub const BOUNCE: u32 = 4;
