//! What a verification says ([`VerifyStatus`]), and the next hop's reply
//! it rests on ([`HopReply`]).
//!
//! Trust: a next hop's reply is a remote server's and may hold anything.
//! Invariant: a [`HopReply`]'s text and relay hold no control character
//! (each is replaced by a space) and are at most [`TEXT_MAX`] characters,
//! so nothing a next hop says can end or add a line of a reply we send
//! or of the log; its fields are private, so no other way in exists.

use crate::deliver::smtp::Command;
use crate::message::reply::{Enhanced, Reply};

/// Characters of a next hop's text kept (Postfix keeps 250 of a reason).
pub const TEXT_MAX: usize = 250;

/// Who asks: `reject_unverified_sender` or `reject_unverified_recipient`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sender,
    Recipient,
}

/// The reply a verification rests on: the next hop's (with the relay and
/// the command it answered), or our own (no connection, a table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopReply {
    code: u16,
    enhanced: Option<Enhanced>,
    text: String,
    relay: Option<String>,
    command: Option<Command>,
}

/// `text` with each control character a space, cut to [`TEXT_MAX`].
pub fn clean(text: &str) -> String {
    text.chars()
        .take(TEXT_MAX)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

impl HopReply {
    /// From a reply, cleaned (see the module head).
    pub fn new(reply: &Reply, relay: Option<&str>, command: Option<Command>) -> HopReply {
        HopReply {
            code: reply.code,
            enhanced: reply.status,
            text: clean(&reply.text),
            relay: relay.map(clean),
            command,
        }
    }

    pub fn code(&self) -> u16 {
        self.code
    }

    pub fn enhanced(&self) -> Option<Enhanced> {
        self.enhanced
    }

    /// The reply's text (after its code and status).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `host[ip]:port` of the next hop that replied, if one did.
    pub fn relay(&self) -> Option<&str> {
        self.relay.as_deref()
    }

    pub fn command(&self) -> Option<Command> {
        self.command
    }

    /// As Postfix's delivery status says it: `host mx[192.0.2.1]:25 said:
    /// 550 5.1.1 text (in reply to RCPT TO command)`, or our own text.
    pub fn describe(&self) -> String {
        match (&self.relay, self.command) {
            (Some(relay), Some(command)) => {
                let status = self.enhanced.map(|e| format!("{e} ")).unwrap_or_default();
                format!(
                    "host {relay} said: {} {status}{} (in reply to {} command)",
                    self.code,
                    self.text,
                    command.name()
                )
            }
            _ => self.text.clone(),
        }
    }
}

/// Why a verification has no answer yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unknown {
    /// A probe is under way (or could not start: too many pending).
    Pending,
    /// The last probe failed temporarily (no connection, a 4XX, a
    /// timeout); nothing was cached.
    Failed(HopReply),
}

/// What is known about an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyStatus {
    Deliverable,
    /// A permanent refusal: the next hop's 5XX (or our tables' "unknown").
    Undeliverable(HopReply),
    Unknown(Unknown),
}

impl VerifyStatus {
    /// The reason text Postfix's verify(8) gives with a status.
    pub fn reason(&self) -> String {
        match self {
            VerifyStatus::Deliverable => "deliverable".into(),
            VerifyStatus::Undeliverable(r) | VerifyStatus::Unknown(Unknown::Failed(r)) => {
                r.describe()
            }
            VerifyStatus::Unknown(Unknown::Pending) => "Address verification in progress".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_next_hops_text_cannot_hold_a_line_end() {
        let reply = Reply::smtp(
            550,
            Enhanced::new(5, 1, 1),
            "no\r\n250 2.0.0 Ok\u{0}\u{1b}[31m",
        );
        let hop = HopReply::new(&reply, Some("mx\n[1.2.3.4]:25"), Some(Command::Rcpt));
        assert!(!hop.text().chars().any(char::is_control));
        assert!(!hop.describe().chars().any(char::is_control));
        assert_eq!(
            hop.describe(),
            "host mx [1.2.3.4]:25 said: 550 5.1.1 no  250 2.0.0 Ok  [31m (in reply to RCPT TO command)"
        );
        let long = Reply::smtp(550, None, "x".repeat(5000));
        assert_eq!(HopReply::new(&long, None, None).text().len(), TEXT_MAX);
    }
}
