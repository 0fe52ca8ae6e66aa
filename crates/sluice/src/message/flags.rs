//! Envelope flags: bits persisted with each spooled message
//! (`sluice_spool::Envelope::flags`), and marks: bits recorded for a
//! message after it was stored (`sluice_spool::Spool::record_marks`). The
//! values are part of the spool format: never renumber them.

/// The body was declared `BODY=8BITMIME`.
pub const EIGHTBITMIME: u32 = 1;
/// The client asked for `SMTPUTF8`: addresses or headers may be UTF-8.
pub const SMTPUTF8: u32 = 2;
/// A delivery status notification Sluice generated (sender is `<>`).
pub const BOUNCE: u32 = 4;
/// A content filter asked for it to be quarantined: it is held (not
/// delivered) until an administrator releases it ([`MARK_RELEASED`]).
pub const QUARANTINE: u32 = 8;
/// Held (with [`QUARANTINE`]) because its login or sender was contained
/// by the sender limits (`intake/limits.rs`): `sluice queue release
/// --login`/`--sender` releases it.
pub const LIMITED: u32 = 16;

/// Mark: the sender has had the delay warning for this message
/// (`queue.delay_warning_secs`); never send it again, even after a restart.
pub const MARK_DELAY_WARNED: u32 = 1;
/// Mark: released from hold by an administrator; a [`QUARANTINE`]d message
/// with this mark is not held again after a restart.
pub const MARK_RELEASED: u32 = 2;
/// Mark: put on hold by an administrator (`sluice queue hold`). The node
/// itself keeps its holds in `hold.list`; the mark goes with the shadow
/// copy, so a peer that claims it holds it too (unless [`MARK_RELEASED`]).
pub const MARK_HELD: u32 = 4;
