//! Why the intake refused a message, as one type: the SMTP reply a
//! session sends and the sysexits(3) status sendmail(1) exits with come
//! from the same value, so the two doors cannot drift apart.

use sluice_spool::SpoolError;

use crate::message::reply::{Enhanced, Reply};

/// sendmail(1) exit statuses (sysexits.h).
pub const EX_OK: i32 = 0;
pub const EX_USAGE: i32 = 64;
pub const EX_DATAERR: i32 = 65;
pub const EX_NOUSER: i32 = 67;
pub const EX_SOFTWARE: i32 = 70;
pub const EX_TEMPFAIL: i32 = 75;

/// A message the intake did not queue.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("message file too big")]
    TooBig,
    #[error("bare <CR> or <LF> in message; lines must end with <CR><LF>")]
    BareLineEnd,
    #[error("NUL character in message")]
    Nul,
    #[error("message line longer than {0} octets")]
    LineTooLong(usize),
    #[error("too many hops: {0} Received: headers (mail loop?)")]
    TooManyHops(usize),
    /// DMARC p=reject failed and the listener enforces it (the reply).
    #[error("{0}")]
    Dmarc(Reply),
    #[error("spool: {0}")]
    Spool(#[from] SpoolError),
    /// A content filter's answer, or `milter_default_action` (the reply).
    #[error("{0}")]
    Milter(Reply),
    /// No peer took a shadow copy and `cluster.shadow_required` is set.
    #[error("no cluster peer holds a copy: {0}")]
    Shadow(String),
    /// A header or body check's REJECT (the reply: `550 5.7.1 …`, or
    /// `451 4.x.x …` for a text with a class 4 status).
    #[error("{0}")]
    Content(Reply),
    /// A rewriting table could not answer (which, and why): the message
    /// is deferred, as Postfix's cleanup does.
    #[error("{0} lookup error")]
    Lookup(String),
    /// A virtual alias expanded too far or too wide (a loop): deferred,
    /// as Postfix's cleanup does.
    #[error("alias expansion error")]
    AliasExpansion,
}

impl Refusal {
    /// What was refused, as one word (the log's `cause` field).
    pub fn cause(&self) -> &'static str {
        match self {
            Refusal::TooBig => "too_big",
            Refusal::BareLineEnd => "bare_line_end",
            Refusal::Nul => "nul",
            Refusal::LineTooLong(_) => "line_too_long",
            Refusal::TooManyHops(_) => "too_many_hops",
            Refusal::Dmarc(_) => "dmarc",
            Refusal::Spool(_) => "spool",
            Refusal::Milter(_) => "milter",
            Refusal::Shadow(_) => "shadow",
            Refusal::Lookup(_) => "lookup",
            Refusal::Content(_) => "content_checks",
            Refusal::AliasExpansion => "alias_expansion",
        }
    }

    /// The SMTP reply, code and enhanced status included.
    pub fn reply(&self) -> Reply {
        let smtp = |code, (c, s, d), text: String| Reply::smtp(code, Enhanced::new(c, s, d), text);
        match self {
            Refusal::TooBig => smtp(552, (5, 3, 4), "Error: message file too big".into()),
            Refusal::BareLineEnd => smtp(
                554,
                (5, 6, 0),
                "Error: bare <CR> or <LF> in message; lines must end with <CR><LF>".into(),
            ),
            Refusal::Nul => smtp(554, (5, 6, 0), "Error: NUL character in message".into()),
            Refusal::LineTooLong(n) => smtp(
                554,
                (5, 6, 0),
                format!("Error: message line longer than {n} octets (RFC 5321)"),
            ),
            Refusal::TooManyHops(_) => {
                smtp(554, (5, 4, 6), "Error: too many hops (mail loop?)".into())
            }
            Refusal::Dmarc(reply) | Refusal::Milter(reply) | Refusal::Content(reply) => {
                reply.clone()
            }
            Refusal::Spool(SpoolError::Full) => {
                smtp(452, (4, 3, 1), "Error: insufficient system storage".into())
            }
            Refusal::Spool(SpoolError::Invalid(_)) => smtp(
                554,
                (5, 3, 4),
                "Error: message envelope too large to store".into(),
            ),
            Refusal::Spool(_) => smtp(451, (4, 3, 0), "Error: queue file write error".into()),
            Refusal::Shadow(_) => smtp(
                451,
                (4, 3, 0),
                "Error: no cluster peer took a copy; try again later".into(),
            ),
            Refusal::Lookup(what) => smtp(
                451,
                (4, 3, 0),
                format!("Error: {what} lookup error; try again later"),
            ),
            // (Postfix's cleanup's reason, word for word.)
            Refusal::AliasExpansion => smtp(451, (4, 6, 0), "Alias expansion error".into()),
        }
    }

    /// sendmail(1)'s exit status: temporary (75) when trying again later
    /// may work, a data error (65) otherwise.
    pub fn exit_code(&self) -> i32 {
        match self.is_temporary() {
            true => EX_TEMPFAIL,
            false => EX_DATAERR,
        }
    }

    /// Whether the same message may be taken later (a 4xx).
    pub fn is_temporary(&self) -> bool {
        match self {
            Refusal::Spool(e) => !matches!(e, SpoolError::Invalid(_)),
            Refusal::Milter(reply) | Refusal::Dmarc(reply) | Refusal::Content(reply) => {
                reply.is_temporary()
            }
            Refusal::Shadow(_) | Refusal::Lookup(_) | Refusal::AliasExpansion => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milter(code: u16, text: &str) -> Refusal {
        Refusal::Milter(Reply::smtp(code, None, text))
    }

    #[test]
    fn temporary_or_not_follows_the_code_not_the_text() {
        assert!(milter(451, "5.7.1 odd words").is_temporary());
        assert!(!milter(550, "4.7.1 odd words").is_temporary());
        assert_eq!(milter(451, "x").exit_code(), EX_TEMPFAIL);
        assert_eq!(milter(554, "x").exit_code(), EX_DATAERR);
        let dmarc = Reply::smtp(550, Enhanced::new(5, 7, 1), "4.7.1 said the text");
        assert!(!Refusal::Dmarc(dmarc).is_temporary());
        assert!(Refusal::Spool(SpoolError::Full).is_temporary());
    }

    #[test]
    fn replies_read_as_they_always_did() {
        let r = Refusal::TooBig.reply();
        assert_eq!(
            (r.code, r.to_string().as_str()),
            (552, "552 5.3.4 Error: message file too big")
        );
        let r = Refusal::LineTooLong(998).reply();
        assert_eq!(
            r.to_string(),
            "554 5.6.0 Error: message line longer than 998 octets (RFC 5321)"
        );
        let r = Refusal::Spool(SpoolError::Full).reply();
        assert_eq!(
            r.to_string(),
            "452 4.3.1 Error: insufficient system storage"
        );
        assert_eq!(milter(554, "go away").reply().to_string(), "554 go away");
    }
}
