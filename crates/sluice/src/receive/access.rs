//! What an access table's answer means: Postfix's access(5) actions, read
//! from a table's string into a typed [`Action`]. The restriction lists
//! (issue 38) act on it; this module only reads.
//!
//! The grammar, as access(5) of Postfix 3.7 gives it (keywords are
//! matched without regard to case):
//! - an all-numerical answer is `OK` (Postfix's backwards compatibility);
//! - `4NN text`, `5NN text`: that reply, the text optionally starting
//!   with an enhanced status code;
//! - `OK`, `DUNNO`, `REJECT [text]`, `DEFER [text]`,
//!   `DEFER_IF_REJECT [text]`, `DEFER_IF_PERMIT [text]`, `DISCARD [text]`,
//!   `HOLD [text]`, `INFO [text]`, `WARN [text]`, `FILTER
//!   transport:destination`, `REDIRECT user@domain`, `BCC user@domain`,
//!   `PREPEND header: value`;
//! - anything else is a list of restrictions (a restriction class name or
//!   restriction keywords), to be applied in its place.
//!
//! Trust: the answer is the table's (the operator's, or a server's or a
//! directory's that may be broken). Invariant: text that would become
//! part of an SMTP reply or a header never holds a control character (a
//! CR or LF there would end the reply or the header early and let the
//! table's answer write a line of its own): such an answer is an error,
//! which the restriction lists turn into "try again", never a permit.
//! The address of a `REDIRECT` or `BCC` becomes an envelope recipient: it
//! is a [`Target`], a mailbox RFC 5321's grammar accepts (checked by
//! `sluice_proto::address`, the parser every RCPT goes through), or the
//! answer is an error; Postfix takes any text with an `@` in it.

pub use crate::message::address::Target;

/// A reply an access table asks for: `NNN [d.d.d] text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    /// The enhanced status code the text began with, if any.
    pub enhanced: Option<String>,
    /// The text, without the code (may be empty: the caller's generic
    /// text then).
    pub text: String,
}

/// What an access table's answer tells the restriction list to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Ok,
    Dunno,
    /// `REJECT [text]` (code: `access_map_reject_code`, 554).
    Reject(String),
    /// `DEFER [text]` (code: `access_map_defer_code`, 450).
    Defer(String),
    DeferIfReject(String),
    DeferIfPermit(String),
    /// `4NN text`, `5NN text`.
    Reply(Reply),
    Discard(String),
    Hold(String),
    Info(String),
    Warn(String),
    Filter(String),
    /// `REDIRECT user@domain`: every recipient replaced by this one.
    Redirect(Target),
    /// `BCC user@domain`: this recipient added.
    Bcc(Target),
    /// One header line, `name: value`.
    Prepend(String),
    /// Restrictions to apply instead (class names or keywords).
    Restrictions(Vec<String>),
}

/// Why an answer cannot be acted on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("access table answer {0:?} holds a control character")]
    Control(String),
    #[error("access table answer {0:?}: {1} needs {2}")]
    Needs(String, &'static str, &'static str),
    #[error("access table answer {0:?}: a {1} reply is not 4XX or 5XX")]
    BadCode(String, u16),
    #[error("access table answer {0:?}: {1} address is not a mailbox: {2}")]
    BadAddress(String, &'static str, &'static str),
}

/// Reads a table's answer (Postfix's string) as an action.
pub fn parse(answer: &str) -> Result<Action, ActionError> {
    if answer.chars().any(char::is_control) {
        return Err(ActionError::Control(answer.to_string()));
    }
    let answer = answer.trim();
    if !answer.is_empty() && answer.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(Action::Ok);
    }
    if let Some(reply) = numeric(answer)? {
        return Ok(Action::Reply(reply));
    }
    let (word, rest) = match answer.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (answer, ""),
    };
    let needs = |what, needs| ActionError::Needs(answer.to_string(), what, needs);
    let text = || rest.to_string();
    let target = |what| {
        Target::new(rest).map_err(|e| ActionError::BadAddress(answer.to_string(), what, e.text()))
    };
    Ok(match word.to_ascii_uppercase().as_str() {
        "OK" => Action::Ok,
        "DUNNO" => Action::Dunno,
        "REJECT" => Action::Reject(text()),
        "DEFER" => Action::Defer(text()),
        "DEFER_IF_REJECT" => Action::DeferIfReject(text()),
        "DEFER_IF_PERMIT" => Action::DeferIfPermit(text()),
        "DISCARD" => Action::Discard(text()),
        "HOLD" => Action::Hold(text()),
        "INFO" => Action::Info(text()),
        "WARN" => Action::Warn(text()),
        "FILTER" if rest.contains(':') => Action::Filter(text()),
        "FILTER" => return Err(needs("FILTER", "transport:destination")),
        "REDIRECT" if rest.contains('@') => Action::Redirect(target("REDIRECT")?),
        "REDIRECT" => return Err(needs("REDIRECT", "user@domain")),
        "BCC" if rest.contains('@') => Action::Bcc(target("BCC")?),
        "BCC" => return Err(needs("BCC", "user@domain")),
        "PREPEND" if header_line(rest) => Action::Prepend(text()),
        "PREPEND" => return Err(needs("PREPEND", "a header, name: value")),
        _ => Action::Restrictions(
            answer
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect(),
        ),
    })
}

/// `4NN text` / `5NN text`, if the answer is one.
fn numeric(answer: &str) -> Result<Option<Reply>, ActionError> {
    let bytes = answer.as_bytes();
    if bytes.len() < 3 || !bytes[..3].iter().all(u8::is_ascii_digit) {
        return Ok(None);
    }
    if bytes.get(3).is_some_and(|b| !b.is_ascii_whitespace()) {
        return Ok(None);
    }
    let code: u16 = answer[..3].parse().unwrap_or(0);
    if !(400..600).contains(&code) {
        return Err(ActionError::BadCode(answer.to_string(), code));
    }
    let rest = answer[3..].trim();
    let (enhanced, text) = match rest.split_once(char::is_whitespace) {
        Some((first, text)) if enhanced_code(first, code) => (Some(first), text.trim()),
        None if enhanced_code(rest, code) => (Some(rest), ""),
        _ => (None, rest),
    };
    Ok(Some(Reply {
        code,
        enhanced: enhanced.map(str::to_string),
        text: text.to_string(),
    }))
}

/// `C.S.D` with the class of `code` (RFC 3463: 1–3 and 1–3 digits).
fn enhanced_code(word: &str, code: u16) -> bool {
    let parts: Vec<&str> = word.split('.').collect();
    let digits = |p: &str, max: usize| {
        !p.is_empty() && p.len() <= max && p.bytes().all(|b| b.is_ascii_digit())
    };
    parts.len() == 3
        && parts[0] == (code / 100).to_string()
        && digits(parts[1], 3)
        && digits(parts[2], 3)
}

/// `name: value` with a header field name (printable, no blank or colon).
fn header_line(line: &str) -> bool {
    match line.split_once(':') {
        Some((name, _)) => {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_codes_and_restrictions() {
        assert_eq!(parse("ok"), Ok(Action::Ok));
        assert_eq!(parse("12345"), Ok(Action::Ok), "all-numerical is OK");
        assert_eq!(
            parse("REJECT go away"),
            Ok(Action::Reject("go away".into()))
        );
        assert_eq!(parse("reject"), Ok(Action::Reject(String::new())));
        assert_eq!(
            parse("550 5.7.1 No thanks"),
            Ok(Action::Reply(Reply {
                code: 550,
                enhanced: Some("5.7.1".into()),
                text: "No thanks".into()
            }))
        );
        assert_eq!(
            parse("450 try later"),
            Ok(Action::Reply(Reply {
                code: 450,
                enhanced: None,
                text: "try later".into()
            }))
        );
        assert_eq!(
            parse("550 4.7.1 mismatched class"),
            Ok(Action::Reply(Reply {
                code: 550,
                enhanced: None,
                text: "4.7.1 mismatched class".into()
            })),
            "an enhanced code of another class is text"
        );
        assert_eq!(
            parse("PREPEND X-Seen: yes"),
            Ok(Action::Prepend("X-Seen: yes".into()))
        );
        assert_eq!(
            parse("FILTER smtp:[127.0.0.1]:10025"),
            Ok(Action::Filter("smtp:[127.0.0.1]:10025".into()))
        );
        assert_eq!(
            parse("permit_mynetworks, reject"),
            Ok(Action::Restrictions(vec![
                "permit_mynetworks".into(),
                "reject".into()
            ]))
        );
        assert_eq!(
            parse("my_class"),
            Ok(Action::Restrictions(vec!["my_class".into()]))
        );
    }

    #[test]
    fn hostile_answers_are_errors_never_actions() {
        assert!(matches!(
            parse("REJECT x\r\n250 OK"),
            Err(ActionError::Control(_))
        ));
        assert!(matches!(
            parse("PREPEND X-A: b\nBcc: c@d"),
            Err(ActionError::Control(_))
        ));
        assert!(matches!(
            parse("250 fine"),
            Err(ActionError::BadCode(_, 250))
        ));
        assert!(matches!(
            parse("PREPEND no colon"),
            Err(ActionError::Needs(..))
        ));
        assert!(matches!(
            parse("REDIRECT nobody"),
            Err(ActionError::Needs(..))
        ));
        assert!(matches!(
            parse("FILTER nowhere"),
            Err(ActionError::Needs(..))
        ));
        // A REDIRECT or BCC address becomes a recipient: a mailbox or
        // nothing (Postfix takes any text with an @ in it).
        for bad in [
            "REDIRECT @",
            "REDIRECT a@",
            "REDIRECT @b.test",
            "REDIRECT a b@c.test",
            "REDIRECT <a@b.test>",
            "BCC a@b.test> ORCPT=rfc822;x@y",
            "BCC a@@b.test",
            "BCC a@b..test",
        ] {
            assert!(
                matches!(parse(bad), Err(ActionError::BadAddress(..))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse("REDIRECT a@b.test\r\nRCPT TO:<c@d.test>"),
            Err(ActionError::Control(_))
        ));
        assert!(matches!(parse("BCC"), Err(ActionError::Needs(..))));
    }

    #[test]
    fn redirect_and_bcc_carry_a_mailbox() {
        let target = |a: &str| Target::new(a).unwrap();
        assert_eq!(
            parse("REDIRECT Elsewhere@Example.NET"),
            Ok(Action::Redirect(target("Elsewhere@example.net")))
        );
        assert_eq!(
            parse("bcc archive@example.net"),
            Ok(Action::Bcc(target("archive@example.net")))
        );
        assert_eq!(target("a@B.test").as_str(), "a@b.test");
    }
}
