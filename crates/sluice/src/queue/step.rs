//! What goes into the queue's core and what comes out of it: the core is
//! a state machine, `QueueCore::handle(clock, Input) -> Vec<Action>`; the
//! driver (`queue/scheduler.rs`) turns what happened (an arrival, a job's
//! report, an envelope read back, an administrator's request, time
//! passing) into an [`Input`] and carries out each [`Action`] in order.
//!
//! Trust: inputs come from the driver, which made them from the queue's
//! own channel; IDs in them are the queue's or its spool's.
//!
//! Invariants: the actions of one input are carried out in the order
//! given, before the next input is handled (an outcome is recorded
//! before a later `complete` of the same message, a bounce is handed to
//! the intake before its recipients are recorded); an action that
//! answers (a read-back, a lookup, a stored notice, a job handed to a
//! worker on its way out) comes back as an input, never as a value the
//! core waits for.

use std::sync::Arc;
use std::time::Instant;

use sluice_spool::{BodyRef, Envelope};

use crate::config::hop::NextHop;
use crate::config::Config;
use crate::message::status::Failure;
pub(super) use crate::queue::core::HoldSave;
use crate::queue::job::{Job, JobReport, WorkerId};
use crate::queue::requests::{AdminReply, AdminRequest};
use crate::queue::{DrainReport, QueuedMessage};
use crate::record::bounce::dsn::Notice;
use crate::routing::Router;

/// Why a parked message's envelope could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadBack {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("reading the queue file failed unexpectedly")]
    Panicked,
    #[error("recipient count does not match the spool index")]
    Mismatch,
}

/// The time an input happens at: the monotonic instant (timers, backoff,
/// pacing) and the wall clock in Unix milliseconds (a message's age, the
/// spool's attempt records). The core never reads a clock itself.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub at: Instant,
    pub unix_ms: u64,
}

/// Names an administrator's request until it is answered.
pub type Ticket = u64;

/// A message as a notice quotes it: its envelope, its body if in memory,
/// and where the body is.
pub type Original = (Arc<Envelope>, Option<Arc<Vec<u8>>>, BodyRef);

/// What the core reacts to.
pub enum Input {
    Queued(QueuedMessage),
    /// Messages found in the spool at start-up (envelopes still on disk).
    Recovered(Vec<sluice_spool::Recovered>),
    /// Envelopes read back for parked messages (`Action::ReadBack`).
    Loaded(Vec<(u64, Result<Envelope, ReadBack>)>),
    Report(JobReport),
    Admin {
        ticket: Ticket,
        request: AdminRequest,
    },
    /// A domain's mail hosts were looked up (`Action::Resolve`): its
    /// group's next hop, or `None` to stay on its own.
    Resolved {
        dest: Arc<str>,
        group: Option<Arc<NextHop>>,
    },
    /// The bounce for these recipients of `msg` is safely spooled.
    BounceStored {
        msg: u64,
        recipients: Vec<u16>,
    },
    /// The cluster granted more connections to this destination.
    Leased(Arc<str>),
    /// A reload. `fresh_agents`: the delivery agents were replaced;
    /// `resolves`: MX lookups for rollup are possible.
    Reconfigure {
        config: Arc<Config>,
        router: Router,
        fresh_agents: bool,
        resolves: bool,
    },
    /// Stop dispatching; let deliveries in flight finish until `deadline`.
    Drain {
        deadline: Instant,
    },
    /// A job handed to an idle worker that was already on its way out
    /// (`Action::Hand`): it goes back to the front of its queue.
    Unsent {
        dest: Arc<str>,
        job: Job,
    },
    /// Due retries are moved in line for room (done before waiting).
    Timers,
    /// The end of a round of inputs: due timers, admission, the local
    /// backlog published, idle destinations pruned, a drain's end.
    RoundEnd,
}

/// What the driver carries out for the core.
pub enum Action {
    /// These recipients are final (and, with `complete`, the message).
    Record {
        id: u64,
        rcpts: Vec<u16>,
        complete: bool,
    },
    /// A delivery round ended with mail left: its attempt record.
    Attempt {
        id: u64,
        attempt: sluice_spool::Attempt,
    },
    /// Spool marks (held, released) for a message.
    Marks { id: u64, marks: u32 },
    /// Read these parked messages' envelopes back (`Input::Loaded`).
    ReadBack(Vec<(u64, BodyRef)>),
    /// Start a worker (one connection) for `dest` with its first job.
    Start {
        worker: WorkerId,
        dest: Arc<str>,
        hop: Arc<NextHop>,
        first: Job,
    },
    /// Hand a job to an idle worker (`Input::Unsent` if it is gone).
    Hand {
        dest: Arc<str>,
        worker: WorkerId,
        job: Job,
    },
    /// Let a worker end once it is idle (its job sender is dropped).
    Close(WorkerId),
    /// Store a notice about `list` (recipients of `original`) through the
    /// intake; with `stored_for`, answer `Input::BounceStored`. A delay
    /// warning, once stored, marks the message warned in the spool.
    Notice {
        original: Original,
        kind: Notice,
        list: Vec<(u16, Failure)>,
        stored_for: Option<Vec<u16>>,
    },
    /// Look up the mail hosts of `dest`'s domain (`Input::Resolved`).
    Resolve {
        dest: Arc<str>,
        host: String,
        port: u16,
    },
    /// Save the hold list.
    SaveHolds(HoldSave),
    /// Answer an administrator, after saving the hold list if given.
    Answer {
        ticket: Ticket,
        reply: AdminReply,
        after: Option<HoldSave>,
    },
    /// The administrator flushed the queue: the agents forget their
    /// dead-host marks.
    Flushed,
    /// Jobs waiting for local delivery (in-flow pacing).
    Backlog(usize),
    /// In-flow pacing's settings changed (a reload).
    FlowLimits { limit: usize, delay_ms: u64 },
    /// The drain is over (or its deadline passed): the run ends.
    Drained(DrainReport),
}
