//! The daemon's own controls on the admin socket: `sluice reload`, `stop`,
//! `status` and `config --running` (Postfix's `postfix reload`, `stop`,
//! `status` and what postconf cannot tell: what the running daemon
//! loaded). The admin session hands each to the process's main loop,
//! which owns the server and its configuration source, and waits for the
//! answer; a reload's answer is what it did (applied, with the sections
//! and those waiting for a restart, or refused and why).
//!
//! Trust: only the admin socket (root and the daemon's group) reaches
//! here; the public socket refuses these requests. A daemon run as a
//! library (tests) may have no main loop to answer: the session then
//! answers "not available" after a deadline instead of waiting forever.

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

/// What the admin socket asks of the main loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Read the configuration again (SIGHUP).
    Reload,
    /// Stop taking mail, drain, exit (SIGTERM).
    Stop,
    /// Process, listeners, queue.
    Status,
    /// The configuration in force, as `sluice config` prints it.
    Config,
}

/// The main loop's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ControlReply {
    Reload(ReloadOutcome),
    Stopping,
    Status(Status),
    Config(RunningConfig),
}

/// What a reload did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReloadOutcome {
    /// `applied`, `refused`, or `tables` (the embedded default: tables
    /// and the certificate re-read).
    pub result: String,
    /// Sections changed and applied now.
    #[serde(default)]
    pub sections: Vec<String>,
    /// Sections changed that take effect at the next restart.
    #[serde(default)]
    pub later: Vec<String>,
    /// Why a reload was refused.
    #[serde(default)]
    pub error: Option<String>,
    /// The log line's text.
    pub text: String,
}

/// `sluice status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub version: String,
    /// Seconds since the daemon started.
    pub uptime_secs: u64,
    /// The configuration file, or "the embedded default".
    pub config: String,
    /// `-o` overrides in force.
    pub overrides: usize,
    /// Addresses listened on for SMTP.
    pub listeners: Vec<String>,
    /// Where /metrics and the dashboard are, if anywhere.
    pub metrics: Option<String>,
}

/// `sluice config --running`: the settings the daemon loaded (secrets
/// hidden), the addresses it listens on and its tables.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunningConfig {
    pub settings: serde_json::Value,
    pub listeners: Vec<String>,
    /// Each table: its name and kind.
    pub tables: Vec<(String, String)>,
}

/// One request to the main loop and where its answer goes.
pub struct ControlCall {
    pub action: Control,
    pub reply: oneshot::Sender<ControlReply>,
}

/// The main loop's end of the channel.
pub type ControlReceiver = mpsc::Receiver<ControlCall>;

/// The admin socket's end.
#[derive(Clone)]
pub struct ControlSender(mpsc::Sender<ControlCall>);

/// A new channel between the admin socket and the main loop.
pub fn channel() -> (ControlSender, ControlReceiver) {
    let (tx, rx) = mpsc::channel(4);
    (ControlSender(tx), rx)
}

/// How long a control may take: a reload builds tables and binds sockets;
/// nothing answering by then means no main loop is listening.
const ANSWER_SECS: u64 = 120;

impl ControlSender {
    /// Asks the main loop; None when nothing answers.
    pub async fn ask(&self, action: Control) -> Option<ControlReply> {
        let (reply, answer) = oneshot::channel();
        let sent = self.0.send(ControlCall { action, reply });
        let asked = async {
            sent.await.ok()?;
            answer.await.ok()
        };
        tokio::time::timeout(std::time::Duration::from_secs(ANSWER_SECS), asked)
            .await
            .ok()
            .flatten()
    }
}
