//! One SMTP reply, typed: a code, an RFC 3463 enhanced status, a text; and
//! the relay an outcome came from. Everything that decides on a reply
//! (temporary or permanent, which status a DSN gives) decides on these
//! fields, never on the words of a text.
//!
//! A [`Reply`] is either an SMTP reply ([`Voice::Smtp`]: a peer's, or one
//! we send, shown as `550 5.1.1 User unknown`) or our own explanation of an
//! outcome ([`Voice::Own`]: `4.4.1 connect to mx[192.0.2.1]:25: timed
//! out`), which has a code for decisions but shows only its status and
//! text, as the log and DSNs have always said it.
//!
//! Trust: reply texts come from remote servers and may hold anything; they
//! are carried as-is and cleaned where they are written (the DSN).
//! [`Reply::parse`] is for text we wrote ourselves earlier (the spool's
//! attempt records) and for replies given to us as text (a policy
//! service's action): it never fails, whatever it is given.
//!
//! Invariants: `Reply::parse(t, c).to_string() == t` for every text `t`
//! (what was stored is what is shown again), and `Reply::parse(&r.to_string(),
//! c) == r` for every reply made here whose text is not empty after a
//! status and, for [`Voice::Own`], whose code is `c`.

use std::fmt;
use std::net::SocketAddr;

/// An RFC 3463 enhanced status code, `class.subject.detail` (`5.1.1`).
/// Built only from a well-formed status: the class is 2, 4 or 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Enhanced([u8; 3]);

impl Enhanced {
    /// `2.0.0`: the class default of a delivery.
    pub const SENT: Enhanced = Enhanced([2, 0, 0]);
    /// `4.0.0`: the class default of a deferral.
    pub const DEFERRED: Enhanced = Enhanced([4, 0, 0]);
    /// `5.0.0`: the class default of a bounce.
    pub const BOUNCED: Enhanced = Enhanced([5, 0, 0]);

    /// A status; `None` unless the class is 2, 4 or 5.
    pub const fn new(class: u8, subject: u8, detail: u8) -> Option<Enhanced> {
        match class {
            2 | 4 | 5 => Some(Enhanced([class, subject, detail])),
            _ => None,
        }
    }

    /// From smtp-proto's `esc` (`[0, 0, 0]` when the reply had none).
    pub fn from_esc(esc: [u8; 3]) -> Option<Enhanced> {
        Enhanced::new(esc[0], esc[1], esc[2])
    }

    /// A word such as `5.1.1`: one-digit class, subject and detail of one
    /// to three digits (that fit a byte).
    pub fn parse(word: &str) -> Option<Enhanced> {
        let mut parts = word.split('.');
        let mut next = || -> Option<u8> {
            let p = parts.next()?;
            let digits = !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| p.parse().ok()).flatten()
        };
        let (class, subject, detail) = (next()?, next()?, next()?);
        if parts.next().is_some() || word.split('.').next()?.len() != 1 {
            return None;
        }
        Enhanced::new(class, subject, detail)
    }

    pub fn class(self) -> u8 {
        self.0[0]
    }
}

impl fmt::Display for Enhanced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [c, s, d] = self.0;
        write!(f, "{c}.{s}.{d}")
    }
}

/// Who speaks in a [`Reply`]: decides whether its code is part of what it
/// says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Voice {
    /// An SMTP reply (a server's, or one we send): `550 5.1.1 text`.
    Smtp,
    /// Our own explanation of an outcome: `4.4.1 text` or just `text`;
    /// the code is ours, for decisions, and not shown.
    Own,
}

/// An SMTP reply code with its enhanced status and text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reply {
    pub code: u16,
    pub status: Option<Enhanced>,
    /// The text after the code and status (a multi-line reply's lines
    /// joined by spaces).
    pub text: String,
    pub voice: Voice,
}

impl Reply {
    /// An SMTP reply.
    pub fn smtp(code: u16, status: Option<Enhanced>, text: impl Into<String>) -> Reply {
        let text = text.into();
        Reply {
            code,
            status,
            text,
            voice: Voice::Smtp,
        }
    }

    /// Our own explanation, with the code that decides what it means
    /// (451 for a deferral, 550 for a bounce, 250 for a delivery).
    pub fn own(code: u16, status: Option<Enhanced>, text: impl Into<String>) -> Reply {
        let text = text.into();
        Reply {
            code,
            status,
            text,
            voice: Voice::Own,
        }
    }

    /// A reply as smtp-proto parsed it off the wire: line breaks become
    /// spaces and the text is trimmed; an `esc` that is not a status
    /// (`[0, 0, 0]`: none) gives no status.
    pub fn from_response(r: smtp_proto::Response<String>) -> Reply {
        let message = r.message.replace(['\r', '\n'], " ");
        let text = message.trim();
        match (r.esc, Enhanced::from_esc(r.esc)) {
            (_, Some(status)) => Reply::smtp(r.code, Some(status), text),
            ([0, 0, 0], None) => Reply::smtp(r.code, None, text),
            // A status-like word of another class: part of the text.
            ([c, s, d], None) => Reply::smtp(r.code, None, format!("{c}.{s}.{d} {text}")),
        }
    }

    /// Parses a reply we stored or were given as text: `550 5.1.1 text`
    /// or `550 text` (an SMTP reply), `4.4.1 text` or `text` (our own,
    /// with `own_code`). This is the one place a reply's text is taken
    /// apart; it is used only where text comes in (the spool's records, a
    /// policy service's answer), never to decide on a reply made here.
    pub fn parse(text: &str, own_code: u16) -> Reply {
        if let Some((first, rest)) = text.split_once(' ') {
            if let Some(code) = reply_code(first) {
                return match rest.split_once(' ') {
                    Some((word, after)) if Enhanced::parse(word).is_some() => {
                        Reply::smtp(code, Enhanced::parse(word), after)
                    }
                    _ => Reply::smtp(code, None, rest),
                };
            }
            if let Some(status) = Enhanced::parse(first) {
                return Reply::own(own_code, Some(status), rest);
            }
        }
        Reply::own(own_code, None, text)
    }

    /// 2 (success), 4 (temporary) or 5 (permanent), from the code.
    pub fn class(&self) -> u16 {
        self.code / 100
    }

    /// A 4xx: trying again later may work.
    pub fn is_temporary(&self) -> bool {
        self.class() == 4
    }

    /// The enhanced status, or `default` when the reply has none.
    pub fn status_or(&self, default: Enhanced) -> Enhanced {
        self.status.unwrap_or(default)
    }
}

/// A three-digit reply code (`2xx` to `5xx`).
fn reply_code(word: &str) -> Option<u16> {
    let ok = word.len() == 3
        && word.bytes().all(|b| b.is_ascii_digit())
        && matches!(word.as_bytes()[0], b'2'..=b'5');
    ok.then(|| word.parse().ok()).flatten()
}

impl fmt::Display for Reply {
    /// `550 5.1.1 User unknown` (an SMTP reply), `4.4.1 connect to …`
    /// (our own), exactly as logged and put in DSNs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.voice == Voice::Smtp {
            write!(f, "{} ", self.code)?;
        }
        if let Some(status) = self.status {
            write!(f, "{status} ")?;
        }
        f.write_str(&self.text)
    }
}

/// Where an outcome came from: the server that answered, or the local
/// agent. Shown in the log's `relay=` exactly as before this was a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relay {
    /// No server was involved (routing, the queue's own decisions):
    /// `none`.
    None,
    /// The Maildir agent: `maildir` (logged as `relay=virtual`).
    Maildir,
    /// The system users' agent (local(8)): `local`.
    Local,
    /// An LMTP server, by its service address: `unix:/path`,
    /// `inet:host:port`.
    Lmtp(String),
    /// An SMTP server that answered: `host[ip]:port`.
    Smtp { host: String, addr: SocketAddr },
    /// A next hop no connection was made to, by its name: `host:port`,
    /// or its destination key (`mx:…`, `lmtp:unix:…`).
    Hop(String),
    /// A pipe transport's command, by the transport's name (`relay=NAME`,
    /// as Postfix's pipe(8) logs it).
    Pipe(String),
}

impl Relay {
    /// A server outside this process took part (a DSN names it as the
    /// Remote-MTA).
    pub fn is_remote(&self) -> bool {
        !matches!(
            self,
            Relay::None | Relay::Maildir | Relay::Pipe(_) | Relay::Local
        )
    }

    /// For the log and metrics: the transport, the service that logs the
    /// delivery, and the relay as shown (a Maildir is Postfix's
    /// `virtual`).
    pub fn labels(&self) -> (&'static str, &'static str) {
        match self {
            Relay::Maildir => ("maildir", "virtual"),
            Relay::Local => ("local", "local"),
            Relay::Lmtp(_) => ("lmtp", "lmtp"),
            Relay::Pipe(_) => ("pipe", "pipe"),
            _ => ("smtp", "smtp"),
        }
    }

    /// The relay as the delivery line shows it (`virtual` for a Maildir).
    pub fn shown(&self) -> String {
        match self {
            Relay::Maildir => "virtual".into(),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Relay::None => f.write_str("none"),
            Relay::Maildir => f.write_str("maildir"),
            Relay::Local => f.write_str("local"),
            Relay::Lmtp(service) => f.write_str(service),
            Relay::Smtp { host, addr } => write!(f, "{host}[{}]:{}", addr.ip(), addr.port()),
            Relay::Hop(name) | Relay::Pipe(name) => f.write_str(name),
        }
    }
}

/// Written as they are shown (`5.1.1`, `mx[192.0.2.1]:25`, `550 5.1.1
/// text`): the JSON log's fields keep their values.
macro_rules! serialize_as_text {
    ($($t:ty),*) => {$(
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}
serialize_as_text!(Enhanced, Reply, Relay);

#[cfg(test)]
mod tests;
