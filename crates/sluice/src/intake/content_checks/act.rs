//! Acting on a header or body check's answer, as Postfix's cleanup_act:
//! what each action does to the message and the envelope, and its log
//! line (`header_check` events, Postfix's words and line).
//!
//! - REJECT stops the checks and refuses the message; DISCARD stops them
//!   and drops it; REDIRECT (the recipients replaced, applied with the
//!   access tables' by `divert.rs`) and PASS stop them and turn off the
//!   milters (Postfix clears its filter flags for both);
//! - HOLD (the first, unless discarded) holds it; BCC adds a recipient;
//! - IGNORE and STRIP delete the line, REPLACE replaces it, PREPEND puts a
//!   line before it (a header's text must start with a header name);
//! - FILTER sets the message's after-queue content filter (the last one
//!   counts, over the door's `content_filter`; one that is not an SMTP or
//!   LMTP next hop is a warning, then as DUNNO);
//! - WARN and INFO log; DUNNO and OK do nothing; any other word is logged
//!   as unknown.
//!
//! Trust: the answer is the administrator's, but `$1` may carry the
//! sender's text: written text has its line ends made CRLF with a blank
//! after each (a REPLACE cannot start a header of its own), addresses are
//! [`Target`]s. Invariant: edits are kept in message order and do not
//! overlap, so [`apply`] is one pass.

use super::action::{reject_reply, Action};
use super::mime::header_name;
use crate::config::content_filter::ContentFilter;
use crate::intake::{Intake, Origin, Refusal, Submission};
use crate::log::{Event, Qid};
use crate::message::address::Target;

/// Whether to go on checking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Go,
    Stop,
}

/// One change to the message: `msg[start..end]` becomes `with`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Edit {
    pub start: usize,
    pub end: usize,
    pub with: Vec<u8>,
}

/// What the checks found so far.
#[derive(Default)]
pub(super) struct Checked {
    pub edits: Vec<Edit>,
    pub hold: Option<String>,
    pub discard: bool,
    pub skip_filters: bool,
}

/// Where the line checked is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    /// The list (`header_checks`, …, `body_checks`).
    pub what: &'static str,
    header: bool,
    start: usize,
    /// End of the text a REPLACE replaces (a header's line ends included).
    end: usize,
    /// End of what an IGNORE deletes (a body line's end included).
    cut: usize,
}

impl Place {
    pub fn header(what: &'static str, start: usize, end: usize) -> Place {
        Place {
            what,
            header: true,
            start,
            end,
            cut: end,
        }
    }

    pub fn body(start: usize, end: usize, cut: usize) -> Place {
        Place {
            what: "body_checks",
            header: false,
            start,
            end,
            cut,
        }
    }
}

/// Acts on `value`, the answer for the line `key` at `place`.
pub(super) fn act(
    intake: &Intake,
    sub: &mut Submission,
    state: &mut Checked,
    value: &str,
    key: &str,
    place: Place,
) -> Result<Flow, Refusal> {
    let action = Action::parse(value);
    let log = |text: &str| log(intake, sub, &action, key, place, text);
    match action {
        Action::Reject(text) => {
            let reply = reject_reply(text);
            let status = reply.status.map(|s| s.to_string()).unwrap_or_default();
            log(&format!("{status} {}", reply.text));
            return Err(Refusal::Content(reply));
        }
        Action::Discard(text) => {
            log(text);
            state.discard = true;
            return Ok(Flow::Stop);
        }
        Action::Hold(text) => {
            if state.hold.is_none() {
                log(text);
                let reason = match text.is_empty() {
                    true => format!("{} {}", context(place), shown(key)),
                    false => text.to_string(),
                };
                state.hold = Some(reason);
            }
        }
        Action::Ignore => state.edits.push(edit(place.start, place.cut, Vec::new())),
        Action::Strip(text) => {
            log(text);
            state.edits.push(edit(place.start, place.cut, Vec::new()));
        }
        Action::Replace(text) | Action::Prepend(text) if !fits(text, place) => {
            warn(intake, sub, &bad_text(&action, text, place));
        }
        Action::Replace(text) => {
            log(text);
            let with = written(text, place.header);
            state.edits.push(edit(place.start, place.end, with));
        }
        Action::Prepend(text) => {
            log(text);
            let mut with = written(text, place.header);
            if !place.header {
                with.extend_from_slice(b"\r\n");
            }
            state.edits.push(edit(place.start, place.start, with));
        }
        Action::Warn(text) | Action::Info(text) => log(text),
        Action::Pass(text) => {
            log(text);
            state.skip_filters = true;
            return Ok(Flow::Stop);
        }
        Action::Filter(text) => match ContentFilter::parse(text) {
            Ok(filter) if filter.hop().is_some() => {
                log(text);
                // The last FILTER counts (Postfix's cleanup), over the door's.
                sub.filter = filter;
            }
            _ => warn(intake, sub, &bad_filter(text, place)),
        },
        Action::Redirect(to) | Action::Bcc(to) => {
            return Ok(divert(intake, sub, state, &action, to, (key, place)))
        }
        Action::Dunno => {}
        Action::Unknown(value) => warn(
            intake,
            sub,
            &format!("unknown command in {} map: {value}", place.what),
        ),
    }
    Ok(Flow::Go)
}

/// A FILTER whose destination Sluice cannot send to (as DUNNO).
fn bad_filter(text: &str, place: Place) -> String {
    format!(
        "bad FILTER {text} in {} map -- need smtp:[host]:port or lmtp:...: ignored",
        place.what
    )
}

/// REDIRECT and BCC: the address must be a mailbox.
fn divert(
    intake: &Intake,
    sub: &mut Submission,
    state: &mut Checked,
    action: &Action<'_>,
    to: &str,
    (key, place): (&str, Place),
) -> Flow {
    let target = match to.contains('@').then(|| Target::new(to).ok()).flatten() {
        Some(t) => t,
        None => {
            let word = action.log_word().to_ascii_uppercase();
            let why = format!(
                "bad {word} target \"{to}\" in {} map -- need user@domain",
                place.what
            );
            warn(intake, sub, &why);
            return Flow::Go;
        }
    };
    log(intake, sub, action, key, place, target.as_str());
    match action {
        Action::Bcc(_) => {
            sub.bcc.push(target);
            Flow::Go
        }
        _ => {
            sub.redirect = Some(target);
            state.skip_filters = true;
            Flow::Stop
        }
    }
}

fn edit(start: usize, end: usize, with: Vec<u8>) -> Edit {
    Edit { start, end, with }
}

/// A header's new text must start with a header name; any text must not
/// be empty.
fn fits(text: &str, place: Place) -> bool {
    !text.is_empty() && (!place.header || header_name(text.as_bytes()).is_some())
}

fn bad_text(action: &Action<'_>, text: &str, place: Place) -> String {
    let word = action.log_word().to_ascii_uppercase();
    match text.is_empty() {
        true => format!("{word} action without text in {} map", place.what),
        false => format!(
            "bad {word} header text \"{text}\" in {} map -- need \"headername: headervalue\"",
            place.what
        ),
    }
}

/// `text` as written into the message: a header's line ends CRLF, each
/// line after the first starting with a blank, the last ended; a body
/// line's text without line ends (the line keeps its own).
fn written(text: &str, header: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 2);
    let text = text.replace('\r', "");
    if !header {
        out.extend(text.bytes().filter(|&c| c != b'\n'));
        return out;
    }
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.extend_from_slice(b"\r\n");
            if !line.starts_with([' ', '\t']) {
                out.push(b' ');
            }
        }
        out.extend_from_slice(line.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Where the line after the one ending at `end` starts.
pub(super) fn line_next(body: &[u8], end: usize) -> usize {
    match body.get(end) {
        Some(b'\r') if body.get(end + 1) == Some(&b'\n') => end + 2,
        Some(b'\n') => end + 1,
        _ => end,
    }
}

/// The message with the edits made.
pub(super) fn apply(body: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 256);
    let mut at = 0;
    for e in edits {
        let start = e.start.max(at);
        out.extend_from_slice(&body[at..start]);
        out.extend_from_slice(&e.with);
        at = e.end.max(start);
    }
    out.extend_from_slice(&body[at..]);
    out
}

fn context(place: Place) -> &'static str {
    match place.header {
        true => "header",
        false => "body",
    }
}

/// A line for the log: at most 200 characters, control characters as
/// blanks.
fn shown(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Postfix's cleanup_act_log line, as a `header_check` event.
fn log(
    intake: &Intake,
    sub: &Submission,
    action: &Action<'_>,
    key: &str,
    place: Place,
    text: &str,
) {
    let content = shown(key);
    let (origin, helo) = match &sub.origin {
        Origin::Smtp(c) => (format!("[{}]", c.peer.ip()), format!(" helo=<{}>", c.helo)),
        _ => ("local".to_string(), String::new()),
    };
    let to = sub.recipients.first().map(String::as_str).unwrap_or("");
    let text = shown(text);
    let tail = match text.is_empty() {
        true => String::new(),
        false => format!(": {text}"),
    };
    let line = format!(
        "{}: {}: {} {content} from {origin}; from=<{}> to=<{to}>{helo}{tail}",
        Qid(sub.id),
        action.log_word(),
        context(place),
        sub.sender,
    );
    intake.logger.emit(&Event::HeaderCheck {
        queue_id: Qid(sub.id),
        check: place.what.into(),
        action: action.log_word().into(),
        content: content.into(),
        reason: text.into(),
        line: line.into(),
    });
}

/// A configuration problem found while acting (Postfix's `msg_warn`).
fn warn(intake: &Intake, sub: &Submission, why: &str) {
    intake.logger.emit(&Event::Warning {
        kind: "content_checks".into(),
        open: None,
        line: format!("warning: {}: {why}", Qid(sub.id)).into(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_text_stays_in_its_line() {
        assert_eq!(written("X-A: b", true), b"X-A: b\r\n");
        assert_eq!(
            written("X-A: b\n c\nBcc: x", true),
            b"X-A: b\r\n c\r\n Bcc: x\r\n"
        );
        assert_eq!(written("a\r\nb", false), b"ab");
    }

    #[test]
    fn edits_apply_in_one_pass() {
        let body = b"A: 1\r\nB: 2\r\nC: 3\r\n";
        let edits = [
            edit(0, 0, b"P: 0\r\n".to_vec()),
            edit(0, 6, b"A: x\r\n".to_vec()),
            edit(6, 12, Vec::new()),
        ];
        assert_eq!(apply(body, &edits), b"P: 0\r\nA: x\r\nC: 3\r\n");
        assert_eq!(line_next(b"ab\r\ncd", 2), 4);
        assert_eq!(line_next(b"ab", 2), 2);
    }
}
