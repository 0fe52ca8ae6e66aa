//! The admin socket's messages: one JSON object a line each way. The CLI
//! (`sluice queue`, `mailq`) and the daemon share these types.

use serde::{Deserialize, Serialize};
use sluice_spool::BodyRef;

pub use super::control::{Control, ControlReply};
pub use crate::queue::admin::Op;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    List {
        #[serde(default)]
        filter: Filter,
    },
    Show {
        id: String,
    },
    /// `show` with the whole message (postcat -q).
    ShowMessage {
        id: String,
    },
    Flush {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        domain: Option<String>,
    },
    Delete {
        #[serde(default)]
        ids: Vec<String>,
        #[serde(default)]
        all_deferred: bool,
        #[serde(default)]
        older_than_secs: Option<u64>,
    },
    Hold {
        id: String,
    },
    Release {
        id: String,
    },
    Bounce {
        id: String,
    },
    /// Lift a sender limit's containment of a login or sender and release
    /// the mail it held (`intake/limits.rs`).
    ReleaseLimited {
        kind: crate::intake::limits::Kind,
        who: String,
    },
    /// postsuper: `op` on every message named, or on all of them.
    Apply {
        op: Op,
        #[serde(default)]
        ids: Vec<String>,
        #[serde(default)]
        all: bool,
    },
    /// The daemon itself: reload, stop, status, its configuration.
    Control {
        action: Control,
    },
    /// sendmail(1): queue a message (base64 of its octets, CRLF lines).
    Submit {
        sender: String,
        recipients: Vec<String>,
        message_b64: String,
        /// sendmail's -F: the full name for a From: the intake makes.
        #[serde(default)]
        full_name: Option<String>,
    },
}

/// Which messages a list (or a bulk delete) is about; all given
/// conditions must hold.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    pub sender: Option<String>,
    /// The login that submitted it (SMTP AUTH or a local account).
    pub login: Option<String>,
    pub recipient: Option<String>,
    /// Recipient domain (of any open recipient).
    pub domain: Option<String>,
    /// active | deferred | hold
    pub state: Option<String>,
    pub older_than_secs: Option<u64>,
}

impl Filter {
    pub fn matches(&self, e: &Entry) -> bool {
        let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        let open = || e.recipients.iter().filter(|r| r.state != "done");
        self.sender.as_deref().is_none_or(|s| eq(s, &e.sender))
            && self
                .login
                .as_deref()
                .is_none_or(|l| e.login.as_deref().is_some_and(|x| eq(x, l)))
            && self
                .recipient
                .as_deref()
                .is_none_or(|r| e.recipients.iter().any(|x| eq(&x.address, r)))
            && self.domain.as_deref().is_none_or(|d| {
                open().any(|x| {
                    x.address
                        .rsplit_once('@')
                        .is_some_and(|(_, dom)| eq(dom, d))
                })
            })
            && self.state.as_deref().is_none_or(|s| eq(s, &e.state))
            && self.older_than_secs.is_none_or(|secs| {
                crate::timefmt::now_millis().saturating_sub(e.arrival_ms) >= secs * 1000
            })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub size: u64,
    /// Unix milliseconds.
    pub arrival_ms: u64,
    pub sender: String,
    /// The login that submitted it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// Held by a sender limit (released with its login or sender).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub limited: bool,
    /// active | deferred | hold
    pub state: String,
    pub attempts: u32,
    /// Waiting mail: its last attempt and when the next is due (Unix
    /// milliseconds), when known.
    #[serde(default)]
    pub last_attempt_ms: Option<u64>,
    #[serde(default)]
    pub next_retry_ms: Option<u64>,
    pub recipients: Vec<RcptEntry>,
    #[serde(skip)]
    pub body_ref: Option<BodyRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RcptEntry {
    pub address: String,
    /// done | active | deferred | hold
    pub state: String,
    /// The last deferral reason, when there is one.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub messages: Vec<Entry>,
    /// Messages an operation applied to (changed).
    #[serde(default)]
    pub count: usize,
    /// Messages an operation found already so (a hold of held mail).
    #[serde(default)]
    pub unchanged: usize,
    /// `show`: the message's header section.
    #[serde(default)]
    pub headers: Option<String>,
    /// `show`: the mail log's lines about it.
    #[serde(default)]
    pub history: Vec<String>,
    /// `show_message`: the whole message, header and body (base64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_b64: Option<String>,
    /// `submit`: the new message's queue ID.
    #[serde(default)]
    pub queue_id: Option<String>,
    /// `submit` refused: sendmail(1)'s exit status for it.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// `control`: the main loop's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlReply>,
}

impl Response {
    pub fn error(why: impl std::fmt::Display) -> Response {
        Response {
            error: Some(why.to_string()),
            ..Default::default()
        }
    }

    pub fn list(messages: Vec<Entry>) -> Response {
        Response {
            ok: true,
            count: messages.len(),
            messages,
            ..Default::default()
        }
    }

    pub fn count(count: usize) -> Response {
        Response {
            ok: true,
            count,
            ..Default::default()
        }
    }
}
