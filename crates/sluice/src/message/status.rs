//! Delivery outcomes and RFC 3463 enhanced status codes.
//!
//! An [`Outcome`] is one recipient's result of one attempt, as a delivery
//! agent reports it: the [`Relay`] it came from and the [`Reply`] that
//! settled it. A [`Failure`] is what a notice says about a recipient: kept
//! typed (relay, status, reply) so a DSN never takes a log string apart.
//! Which status a notice gives, whether a server is named, whether the
//! diagnostic is an SMTP reply: all decided on these fields, never on text.
//!
//! Trust: reply texts come from remote servers and may hold anything; they
//! are carried as-is here and cleaned where they are written (the DSN).

pub use super::reply::{Enhanced, Relay, Reply, Voice};

/// A recipient's result for one attempt: where it came from and the reply
/// that settled it (a server's, or our own explanation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `notified`: the next hop offered DSN and took the NOTIFY request
    /// over, so no "relayed" notice is due from here.
    Delivered {
        relay: Relay,
        reply: Reply,
        notified: bool,
    },
    Deferred {
        relay: Relay,
        reply: Reply,
    },
    Bounced {
        relay: Relay,
        reply: Reply,
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

    pub fn relay(&self) -> &Relay {
        match self {
            Outcome::Delivered { relay, .. }
            | Outcome::Deferred { relay, .. }
            | Outcome::Bounced { relay, .. } => relay,
        }
    }

    pub fn reply(&self) -> &Reply {
        match self {
            Outcome::Delivered { reply, .. }
            | Outcome::Deferred { reply, .. }
            | Outcome::Bounced { reply, .. } => reply,
        }
    }

    /// The reply's enhanced status, or the class default of the outcome.
    pub fn dsn(&self) -> Enhanced {
        let default = match self {
            Outcome::Delivered { .. } => Enhanced::SENT,
            Outcome::Deferred { .. } => Enhanced::DEFERRED,
            Outcome::Bounced { .. } => Enhanced::BOUNCED,
        };
        self.reply().status_or(default)
    }
}

/// What a notice says about a recipient: why it is returned (or, for
/// delay and success notices, its last reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Where the reply came from (a DSN names a remote one).
    pub relay: Relay,
    /// RFC 3463 status, e.g. `5.1.1`: the reply's, or the class default.
    pub status: Enhanced,
    /// The server's reply (`smtp` diagnostic) or our own explanation.
    pub reply: Reply,
}

impl Failure {
    /// A permanent failure reported by a delivery agent.
    pub fn from_bounce(relay: &Relay, reply: &Reply) -> Failure {
        Failure::from_reply(relay, reply, Enhanced::BOUNCED)
    }

    /// A recipient delivered or relayed (for a success notice).
    pub fn delivered(relay: &Relay, reply: &Reply) -> Failure {
        Failure::from_reply(relay, reply, Enhanced::SENT)
    }

    /// A recipient still deferred (for a delay warning).
    pub fn delayed(relay: &Relay, reply: &Reply) -> Failure {
        Failure::from_reply(relay, reply, Enhanced::DEFERRED)
    }

    fn from_reply(relay: &Relay, reply: &Reply, default: Enhanced) -> Failure {
        Failure {
            relay: relay.clone(),
            status: reply.status_or(default),
            reply: reply.clone(),
        }
    }

    /// A recipient still deferred when the queue lifetime ran out.
    pub fn expired(age_secs: u64, last_relay: &Relay, last_reply: &Reply) -> Failure {
        let text = format!("message expired after {age_secs}s in queue; last error: {last_reply}");
        Failure {
            relay: last_relay.clone(),
            status: EXPIRED,
            reply: Reply::own(550, None, text),
        }
    }

    /// The remote server that answered, if one did (the DSN's Remote-MTA).
    pub fn remote(&self) -> Option<&Relay> {
        self.relay.is_remote().then_some(&self.relay)
    }

    /// True if the diagnostic is a remote server's reply (or our own
    /// explanation, with its status, of what happened with one): a DSN's
    /// `smtp` diagnostic type.
    pub fn remote_reply(&self) -> bool {
        self.relay.is_remote() && (self.reply.voice == Voice::Smtp || self.reply.status.is_some())
    }
}

/// `5.4.7`: the queue lifetime ran out (RFC 3463 "delivery time expired").
const EXPIRED: Enhanced = match Enhanced::new(5, 4, 7) {
    Some(s) => s,
    None => Enhanced::BOUNCED,
};

impl std::fmt::Display for Failure {
    /// `5.1.1 user unknown` for the log: the status, then the text, with
    /// the status once when the reply already shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reply.status == Some(self.status) {
            true => write!(f, "{}", self.reply),
            false => write!(f, "{} {}", self.status, self.reply),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(text: &str) -> Option<Enhanced> {
        Enhanced::parse(text)
    }

    #[test]
    fn outcomes_give_the_reply_status_or_their_class_default() {
        let relay = Relay::None;
        let reply = Reply::smtp(550, None, "User unknown");
        let bounced = Outcome::Bounced { relay, reply };
        assert_eq!(bounced.dsn().to_string(), "5.0.0");
        let reply = Reply::own(451, status("4.4.1"), "connect failed");
        let deferred = Outcome::Deferred {
            relay: Relay::None,
            reply,
        };
        assert_eq!(deferred.dsn().to_string(), "4.4.1");
        let reply = Reply::smtp(250, status("2.0.0"), "Ok");
        let notified = false;
        let sent = Outcome::Delivered {
            relay: Relay::Maildir,
            reply,
            notified,
        };
        assert_eq!(
            (sent.dsn().to_string().as_str(), sent.status_word()),
            ("2.0.0", "sent")
        );
    }

    #[test]
    fn failures_keep_the_relay_apart_from_the_text() {
        let addr = "10.0.0.1:25".parse().expect("an address");
        let mx = Relay::Smtp {
            host: "mx.b".into(),
            addr,
        };
        let unknown = Reply::smtp(550, status("5.1.1"), "User unknown");
        let f = Failure::from_bounce(&mx, &unknown);
        assert_eq!(
            f.remote().map(Relay::to_string).as_deref(),
            Some("mx.b[10.0.0.1]:25")
        );
        assert_eq!(f.status.to_string(), "5.1.1");
        assert!(f.remote_reply());
        assert_eq!(f.to_string(), "550 5.1.1 User unknown", "the status once");
        let own = Reply::own(550, status("5.4.6"), "mail loops back to myself");
        let f = Failure::from_bounce(&Relay::None, &own);
        assert_eq!(f.to_string(), "5.4.6 mail loops back to myself");
        assert!(!f.remote_reply() && f.remote().is_none());
        let full = Reply::own(550, None, "disk quota exceeded");
        let f = Failure::from_bounce(&Relay::Maildir, &full);
        assert_eq!(f.to_string(), "5.0.0 disk quota exceeded");
        let last = Reply::own(451, status("4.4.1"), "connect failed");
        let f = Failure::expired(432000, &Relay::None, &last);
        assert_eq!(f.remote(), None);
        assert_eq!(f.status.to_string(), "5.4.7");
        assert!(f
            .reply
            .to_string()
            .contains("last error: 4.4.1 connect failed"));
        let f = Failure::expired(9, &mx, &unknown);
        assert!(f.remote().is_some() && !f.remote_reply());
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
