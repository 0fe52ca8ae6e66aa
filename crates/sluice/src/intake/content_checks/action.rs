//! What a header or body check's table answered, read as Postfix's
//! cleanup reads it (cleanup_act): the action's name (any case) up to the
//! first blank, then its text with leading blanks removed.
//!
//! Trust: the administrator's tables, but a pattern's `$1` brings in the
//! sender's text: a REJECT's text is made one line before it becomes a
//! reply, and a header that PREPEND or REPLACE writes must start with a
//! header name (as Postfix's is_header), else the action is ignored.

use crate::message::reply::{Enhanced, Reply};

/// One action of header_checks(5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<'a> {
    Reject(&'a str),
    Discard(&'a str),
    Hold(&'a str),
    /// Delete the line, silently.
    Ignore,
    /// Delete the line, logged.
    Strip(&'a str),
    Replace(&'a str),
    Prepend(&'a str),
    Warn(&'a str),
    Info(&'a str),
    /// Turn off the checks (and the milters) for this message.
    Pass(&'a str),
    /// Not supported by Sluice: logged, then as DUNNO.
    Filter(&'a str),
    Redirect(&'a str),
    Bcc(&'a str),
    /// DUNNO, or its old name OK.
    Dunno,
    Unknown(&'a str),
}

impl<'a> Action<'a> {
    pub fn parse(value: &'a str) -> Action<'a> {
        let split = value.find([' ', '\t']).unwrap_or(value.len());
        let (name, rest) = value.split_at(split);
        let text = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
        match name.to_ascii_uppercase().as_str() {
            "REJECT" => Action::Reject(text),
            "DISCARD" => Action::Discard(text),
            "HOLD" => Action::Hold(text),
            "IGNORE" => Action::Ignore,
            "STRIP" => Action::Strip(text),
            "REPLACE" => Action::Replace(text),
            "PREPEND" => Action::Prepend(text),
            "WARN" => Action::Warn(text),
            "INFO" => Action::Info(text),
            "PASS" => Action::Pass(text),
            "FILTER" => Action::Filter(text),
            "REDIRECT" => Action::Redirect(text),
            "BCC" => Action::Bcc(text),
            "DUNNO" | "OK" => Action::Dunno,
            _ => Action::Unknown(value),
        }
    }

    /// The word Postfix logs for it (`reject`, `warning`, …).
    pub fn log_word(&self) -> &'static str {
        match self {
            Action::Reject(_) => "reject",
            Action::Discard(_) => "discard",
            Action::Hold(_) => "hold",
            Action::Ignore => "ignore",
            Action::Strip(_) => "strip",
            Action::Replace(_) => "replace",
            Action::Prepend(_) => "prepend",
            Action::Warn(_) => "warning",
            Action::Info(_) => "info",
            Action::Pass(_) => "pass",
            Action::Filter(_) => "filter",
            Action::Redirect(_) => "redirect",
            Action::Bcc(_) => "bcc",
            Action::Dunno => "dunno",
            Action::Unknown(_) => "unknown",
        }
    }
}

/// A REJECT's reply, as Postfix's cleanup and smtpd make it: the text
/// gets `5.7.1` in front unless it starts with a status; a status of
/// class 4 defers (`451`), any other rejects (`550`); no text is
/// `550 5.7.1 message content rejected`. A status of class 2 is made
/// class 4, as Postfix does ("bad DSN action").
pub fn reject_reply(text: &str) -> Reply {
    let text: String = text.chars().filter(|c| !c.is_control()).collect();
    let text = match text.is_empty() {
        true => "message content rejected".to_string(),
        false => text,
    };
    let (status, rest) = match text.split_once(' ') {
        Some((word, rest)) if Enhanced::parse(word).is_some() => (Enhanced::parse(word), rest),
        _ if Enhanced::parse(&text).is_some() => (Enhanced::parse(&text), ""),
        _ => (Enhanced::new(5, 7, 1), text.as_str()),
    };
    let status = status.and_then(|s| match s.class() {
        2 => Enhanced::parse(&format!("4{}", &s.to_string()[1..])),
        _ => Some(s),
    });
    let code = match status.map(|s| s.class()) {
        Some(4) => 451,
        _ => 550,
    };
    Reply::smtp(code, status, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_read_as_postfix_reads_them() {
        assert_eq!(Action::parse("reject  go away"), Action::Reject("go away"));
        assert_eq!(Action::parse("REJECT"), Action::Reject(""));
        assert_eq!(Action::parse("Ignore whatever"), Action::Ignore);
        assert_eq!(
            Action::parse("REPLACE X-A: b\tc"),
            Action::Replace("X-A: b\tc")
        );
        assert_eq!(Action::parse("OK"), Action::Dunno);
        assert_eq!(Action::parse("bcc\tx@y.test"), Action::Bcc("x@y.test"));
        assert_eq!(Action::parse("FROB x"), Action::Unknown("FROB x"));
        assert_eq!(Action::parse("warn").log_word(), "warning");
    }

    #[test]
    fn reject_replies() {
        let r = |t| reject_reply(t).to_string();
        assert_eq!(r(""), "550 5.7.1 message content rejected");
        assert_eq!(r("no exe"), "550 5.7.1 no exe");
        assert_eq!(r("5.7.0 no exe"), "550 5.7.0 no exe");
        assert_eq!(r("4.7.1 later"), "451 4.7.1 later");
        assert_eq!(r("2.0.0 odd"), "451 4.0.0 odd");
        assert_eq!(r("554 go"), "550 5.7.1 554 go");
        assert_eq!(r("a\r\nb"), "550 5.7.1 ab");
    }
}
