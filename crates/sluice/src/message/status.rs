//! Delivery outcomes and RFC 3463 enhanced status codes.
//!
//! An [`Outcome`] is one recipient's result of one attempt, as a delivery
//! agent reports it. A [`Failure`] is what a bounce says about a recipient
//! that will not be delivered: kept typed (relay, status, diagnostic) so a
//! DSN never has to take a log string apart again.
//!
//! Trust: reply texts come from remote servers and may hold anything; they
//! are carried as-is here and cleaned where they are written (the DSN).

/// A recipient's result for one attempt. `relay` is `host[ip]:port`, or
/// `none`/`maildir` when no remote server was involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `notified`: the next hop offered DSN and took the NOTIFY request
    /// over, so no "relayed" notice is due from here.
    Delivered {
        relay: String,
        reply: String,
        notified: bool,
    },
    Deferred {
        relay: String,
        reason: String,
    },
    Bounced {
        relay: String,
        reason: String,
    },
}

impl Outcome {
    /// `sent`, `deferred` or `bounced`, as in the mail log.
    pub fn status_word(&self) -> &'static str {
        match self {
            Outcome::Delivered { .. } => "sent",
            Outcome::Deferred { .. } => "deferred",
            Outcome::Bounced { .. } => "bounced",
        }
    }

    pub fn relay(&self) -> &str {
        match self {
            Outcome::Delivered { relay, .. }
            | Outcome::Deferred { relay, .. }
            | Outcome::Bounced { relay, .. } => relay,
        }
    }

    pub fn text(&self) -> &str {
        match self {
            Outcome::Delivered { reply: t, .. }
            | Outcome::Deferred { reason: t, .. }
            | Outcome::Bounced { reason: t, .. } => t,
        }
    }

    /// The enhanced status code in the text, or the class default.
    pub fn dsn(&self) -> &str {
        let default = match self {
            Outcome::Delivered { .. } => "2.0.0",
            Outcome::Deferred { .. } => "4.0.0",
            Outcome::Bounced { .. } => "5.0.0",
        };
        find_status(self.text(), default)
    }
}

/// What a notice says about a recipient: why it is returned (or, for
/// delay and success notices, its last reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The remote server that refused (`host[ip]:port`), if one did.
    pub relay: Option<String>,
    /// RFC 3463 status, e.g. `5.1.1`.
    pub status: String,
    /// The server's reply (`smtp` diagnostic) or our own explanation.
    pub diagnostic: String,
    /// True if `diagnostic` is a remote SMTP reply.
    pub remote_reply: bool,
}

impl Failure {
    /// A permanent failure reported by a delivery agent.
    pub fn from_bounce(relay: &str, reason: &str) -> Failure {
        Failure::from_reply(relay, reason, "5.0.0")
    }

    /// A recipient delivered or relayed (for a success notice).
    pub fn delivered(relay: &str, reply: &str) -> Failure {
        Failure::from_reply(relay, reply, "2.0.0")
    }

    /// A recipient still deferred (for a delay warning).
    pub fn delayed(relay: &str, reason: &str) -> Failure {
        Failure::from_reply(relay, reason, "4.0.0")
    }

    /// What an agent reported, with `default` status if the text has none.
    fn from_reply(relay: &str, text: &str, default: &str) -> Failure {
        let remote = is_remote(relay);
        Failure {
            relay: remote.then(|| relay.to_string()),
            status: find_status(text, default).to_string(),
            diagnostic: text.to_string(),
            remote_reply: remote && text.as_bytes().first().is_some_and(u8::is_ascii_digit),
        }
    }

    /// A recipient still deferred when the queue lifetime ran out.
    pub fn expired(age_secs: u64, last_relay: &str, last_reason: &str) -> Failure {
        Failure {
            relay: is_remote(last_relay).then(|| last_relay.to_string()),
            status: "5.4.7".into(),
            diagnostic: format!(
                "message expired after {age_secs}s in queue; last error: {last_reason}"
            ),
            remote_reply: false,
        }
    }
}

impl std::fmt::Display for Failure {
    /// `5.1.1 user unknown` for the log: the status, then the text, with
    /// the status once when the text already starts with it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match find_status(&self.diagnostic, "") == self.status {
            true => f.write_str(&self.diagnostic),
            false => write!(f, "{} {}", self.status, self.diagnostic),
        }
    }
}

fn is_remote(relay: &str) -> bool {
    !matches!(relay, "" | "none" | "maildir" | "local")
}

/// The enhanced status code among the first two words of a reply text
/// (`550 5.1.1 …` or `4.4.1 …`), or `default`.
pub fn find_status<'a>(text: &'a str, default: &'a str) -> &'a str {
    text.split_ascii_whitespace()
        .take(2)
        .find(|w| is_status(w))
        .unwrap_or(default)
}

/// True for a well-formed RFC 3463 status code such as `5.1.1`.
pub fn is_status(word: &str) -> bool {
    let mut parts = word.split('.');
    let class = parts.next();
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
    };
    matches!(class, Some("2" | "4" | "5"))
        && ok(parts.next())
        && ok(parts.next())
        && parts.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_are_found() {
        assert_eq!(find_status("250 2.0.0 Ok", "x"), "2.0.0");
        assert_eq!(find_status("4.4.1 connect failed", "x"), "4.4.1");
        assert_eq!(find_status("550 User unknown", "5.0.0"), "5.0.0");
        assert_eq!(find_status("550 5.1.1.1 x", "5.0.0"), "5.0.0");
        assert_eq!(find_status("550 3.1.1 x", "5.0.0"), "5.0.0");
    }

    #[test]
    fn failures_keep_the_relay_apart_from_the_text() {
        let f = Failure::from_bounce("mx.b[10.0.0.1]:25", "550 5.1.1 User unknown");
        assert_eq!(f.relay.as_deref(), Some("mx.b[10.0.0.1]:25"));
        assert_eq!(f.status, "5.1.1");
        assert!(f.remote_reply);
        assert_eq!(f.to_string(), "550 5.1.1 User unknown", "the status once");
        let f = Failure::from_bounce("none", "5.4.6 mail loops back to myself");
        assert_eq!(f.to_string(), "5.4.6 mail loops back to myself");
        let f = Failure::from_bounce("maildir", "disk quota exceeded");
        assert_eq!(f.to_string(), "5.0.0 disk quota exceeded");
        let f = Failure::expired(432000, "none", "4.4.1 connect failed");
        assert_eq!(f.relay, None);
        assert_eq!(f.status, "5.4.7");
        assert!(f.diagnostic.contains("last error: 4.4.1 connect failed"));
    }
}

/// A reason as people read it: without the ` (os error N)` Rust's I/O
/// errors append ("Connection refused (os error 111)" is "Connection
/// refused", as Postfix says it). Only that suffix, wherever it occurs,
/// is taken out; the rest is as it was.
pub fn plain_reason(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut rest = reason;
    while let Some(at) = rest.find(" (os error ") {
        let tail = &rest[at + " (os error ".len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail[digits..].starts_with(')') {
            out.push_str(&rest[..at]);
            rest = &tail[digits + 1..];
        } else {
            out.push_str(&rest[..at + 1]);
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod plain_tests {
    use super::plain_reason;

    #[test]
    fn os_error_suffixes_are_taken_out() {
        let r = "4.4.1 connect to a[127.0.0.1]:25: Connection refused (os error 111)";
        assert_eq!(
            plain_reason(r),
            "4.4.1 connect to a[127.0.0.1]:25: Connection refused"
        );
        let two = "x (os error 1); y (os error 22) z (os error) (os error 9x)";
        assert_eq!(plain_reason(two), "x; y z (os error) (os error 9x)");
        assert_eq!(plain_reason("4.2.0 try later"), "4.2.0 try later");
    }
}
