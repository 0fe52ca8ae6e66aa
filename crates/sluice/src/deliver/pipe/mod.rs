//! Delivery to a command, Postfix's pipe(8): a `[transports.NAME]` with
//! `service = "pipe"` runs its `argv` per message and group of recipients
//! (at most `max_recipients`), as its `user`, with the message on standard
//! input (flags as pipe(8)'s); the exit status says sent, deferred or
//! bounced, by Postfix's <sysexits.h> table.
//!
//! Parts: the macros (expand.rs), the input (content.rs), running one
//! command (exec.rs, also [`run`] for local(8)'s `|command` targets), and
//! the queue's agent (agent.rs).
//!
//! Trust: the transport is the administrator's; who may route mail to it
//! is the routing tables' business. Addresses reach the command only as
//! whole arguments (never through a shell) and on standard input.
//! Invariant: a command never runs as root (the configuration refuses
//! it, and [`run`] checks again).

mod agent;
pub mod content;
pub mod exec;
pub mod expand;

pub use agent::PipeAgent;

use std::path::PathBuf;
use std::time::Duration;

use crate::message::reply::Reply;

/// One command, ready to run.
#[derive(Debug, Clone)]
pub struct PipeCommand {
    /// The program (an absolute path) and its arguments, expanded.
    pub argv: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    /// Variables beyond `PATH`, `TZ` and `LANG` (pipe(8) sets none;
    /// local(8) sets `SENDER`, `RECIPIENT`, …).
    pub env: Vec<(String, String)>,
    /// The working directory (default `/`).
    pub cwd: Option<PathBuf>,
    /// Killed after this long (Postfix's command_time_limit).
    pub time_limit: Duration,
    /// What the failure texts call the command (default: the program;
    /// local(8): the command line, run through `/bin/sh -c`).
    pub label: Option<String>,
}

/// How one command went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipeOutcome {
    /// Exit 0; its output (cut, printable) for the log.
    Sent { output: String },
    /// A temporary failure (4.x.x): the recipients stay queued.
    Deferred(Reply),
    /// A permanent failure (5.x.x): the recipients bounce.
    Bounced(Reply),
}

/// Runs `command` with `input` on its standard input (see exec.rs).
/// A command for root is refused (deferred: a configuration error).
pub async fn run(command: &PipeCommand, input: &[u8]) -> PipeOutcome {
    if command.uid == 0 || command.gid == 0 {
        let text = "mail system configuration error: a command never runs as root";
        let status = crate::message::reply::Enhanced::new(4, 3, 5);
        return PipeOutcome::Deferred(Reply::own(451, status, text));
    }
    exec::run(command, input).await
}
