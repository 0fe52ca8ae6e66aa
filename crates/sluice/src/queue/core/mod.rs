//! The queue's state, one file per data type (as Postfix's qmgr keeps
//! `qmgr_message.c`, `qmgr_queue.c`, …): each sub-state owns its fields
//! privately and keeps its invariants through its methods; the scheduler
//! (`scheduler.rs` and its `impl` files) decides and does the I/O, and
//! changes a counter only by asking the sub-state that owns it.
//!
//! - [`Messages`]: the active messages, the jobs out with workers (in
//!   total and per message) and the bodies cached in memory;
//! - [`Admission`]: the messages waiting on disk, the line for room in the
//!   active queue, envelopes being read back, the retry timers;
//! - [`Destinations`]: one per next hop, their pacing wake-ups, which of
//!   them deliver locally, and the pruning of idle ones;
//! - [`Notices`]: the bounces being stored;
//! - [`AdminState`]: held messages and deletions or bounces waiting for
//!   their round to end.
//!
//! Nothing here spawns, sleeps, reads a clock or touches the spool. Times
//! are `std::time::Instant`s handed in with each input (`queue/step.rs`:
//! what goes into the core and what comes out).
//! Trust: callers hand in IDs the scheduler made or read from its own
//! spool. In debug builds a counter that would go below zero panics: it
//! would be a bug of the scheduler, never repaired by saturating.

mod admin;
mod admission;
mod destination;
mod destinations;
mod messages;
mod notices;
mod rollup;

pub(super) use admin::{AdminState, Doom, HoldSave};
pub(super) use admission::{secs32, Admission, Parked};
pub(super) use destination::Destination;
pub(super) use destinations::Destinations;
pub(super) use messages::{Message, Messages, RcptState};
pub(super) use notices::Notices;
pub(super) use rollup::{Alias, Rollup};
