//! What an administrator can ask of the queue and what it answers
//! (`sluice queue …`, the dashboard, /metrics): the requests and replies
//! that cross from the admin socket through the driver to the core
//! (`admin.rs` carries them out). A leaf: the core's boundary types
//! (`step.rs`) name these without importing the core's decisions.

use super::view::{QueueStats, Snap};

/// What an administrator asked the queue to do.
#[derive(Debug)]
pub enum AdminRequest {
    Snapshot,
    /// Counts, the busiest destinations and the commonest deferral
    /// reasons (the dashboard and /metrics).
    Stats,
    /// Retry now: these messages, or every waiting one (`None`).
    Flush(Option<Vec<u64>>),
    /// postsuper's operations: on these messages, or all (`None`).
    Apply(Op, Option<Vec<u64>>),
}

/// What postsuper does to a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Remove it, no notice (`postsuper -d`).
    Delete,
    /// Keep it, do not deliver it (`-h`).
    Hold,
    /// Deliver it again (`-H`).
    Release,
    /// Return its open recipients to the sender now.
    Bounce,
    /// Deliver it again from scratch now (`-r`): out of hold, attempts
    /// and backoff forgotten.
    Requeue,
}

pub enum AdminReply {
    Snapshot(Vec<Snap>),
    Stats(QueueStats),
    /// How many messages the request applied to.
    Count(usize),
    Applied(Tally),
}

/// What an [`Op`] did, message by message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub changed: usize,
    /// Found and already so (held mail held again, …).
    pub unchanged: usize,
    /// Not in the queue (delivered, or never queued).
    pub missing: usize,
}
