//! The header and body checks stage (issue 39): Postfix's
//! `header_checks`, `mime_header_checks`, `nested_header_checks` and
//! `body_checks` (header_checks(5)), after our trace is on the message
//! and before the milters, as Postfix's cleanup runs them.
//!
//! The message is walked as Postfix's mime_state walks it (`mime.rs`):
//! each logical header is looked up whole, its lines joined by `\n` (the
//! CR removed, the blanks kept: Postfix's key), in the list its class
//! says; each body line (in pieces of at most 2048 bytes, Postfix's
//! `line_length_limit`, empty ones never) in `body_checks`, up to
//! `body_checks_size_limit` bytes into each body segment. The tables of a
//! list are asked in order; the first answer is the action (`action.rs`,
//! `act.rs`). Our own notices are not checked; SMTP mail is checked with
//! the lists of the listener it came in on.
//!
//! Bounds (Sluice's, not Postfix's): a header's key is at most
//! [`HEADER_SIZE_LIMIT`] bytes (Postfix's `header_size_limit`; Postfix
//! also drops the rest from the message, Sluice keeps it); the whole walk
//! has `[content_checks] time_limit_ms`, past which the checks stop and
//! the message goes on as checked so far, with a `content_checks`
//! warning (Postfix has no time limit); a `pcre:` pattern past its
//! backtracking limit stops them too and defers the message (`451
//! 4.3.0`, never taken unchecked; Postfix would skip that one rule). A
//! table that fails otherwise defers the message (`451 4.3.0`).
//!
//! Trust: the tables are the administrator's; the message is the
//! sender's. Invariant: nothing is allocated for a message when its door
//! has no checks ([`CheckTables::for_origin`] is `None`); the body is
//! changed only by IGNORE, STRIP, REPLACE and PREPEND, and stays CRLF
//! text.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Intake, Origin, Refusal, Submission};
use crate::log::{Event, Qid};
use crate::tables::{LookupError, Table};

mod act;
mod action;
pub mod mime;

use act::{Checked, Flow, Place};
use mime::{Class, Item, Walker};

/// Postfix's `header_size_limit`: the longest header key looked up.
pub const HEADER_SIZE_LIMIT: usize = 102_400;
/// Postfix's `line_length_limit`: body lines are checked in such pieces.
const LINE_PIECE: usize = 2048;

/// One door's four lists, built.
#[derive(Default)]
pub struct Checks {
    pub header: Vec<Arc<Table>>,
    pub mime: Vec<Arc<Table>>,
    pub nested: Vec<Arc<Table>>,
    pub body: Vec<Arc<Table>>,
}

impl Checks {
    fn any(&self) -> bool {
        !(self.header.is_empty()
            && self.mime.is_empty()
            && self.nested.is_empty()
            && self.body.is_empty())
    }
}

/// `[content_checks]`'s tables, and each listener's own, as the
/// restriction lists' builder built them.
#[derive(Default)]
pub struct CheckTables {
    main: Option<Arc<Checks>>,
    listeners: HashMap<SocketAddr, Option<Arc<Checks>>>,
}

impl CheckTables {
    /// The main lists and those of the listeners that have their own
    /// (empty lists are no checks).
    pub fn new(main: Checks, listeners: Vec<(SocketAddr, Checks)>) -> CheckTables {
        let some = |c: Checks| c.any().then(|| Arc::new(c));
        CheckTables {
            main: some(main),
            listeners: listeners.into_iter().map(|(a, c)| (a, some(c))).collect(),
        }
    }

    /// The lists for a message from `origin`: SMTP by its listener's,
    /// sendmail by the main ones, our notices none.
    pub fn for_origin(&self, origin: &Origin) -> Option<&Arc<Checks>> {
        match origin {
            Origin::Smtp(c) => match self.listeners.get(&c.listener) {
                Some(own) => own.as_ref(),
                None => self.main.as_ref(),
            },
            Origin::Local { .. } => self.main.as_ref(),
            Origin::Notice => None,
        }
    }
}

/// What the checks decided.
pub(super) enum Outcome {
    /// Go on: held with this reason if any; without the milters after a
    /// PASS or a REDIRECT (Postfix turns them off too).
    Pass {
        hold: Option<String>,
        skip_filters: bool,
    },
    /// DISCARD: claim delivery, keep nothing.
    Discard,
    Refuse(Refusal),
}

/// Why a lookup gave no answer.
enum Failed {
    /// A pattern past its backtracking limit (the key's fault).
    Limit(String),
    /// The table could not answer (which list).
    Table,
}

/// The stage.
pub(super) async fn run(intake: &Intake, checks: &Checks, sub: &mut Submission) -> Outcome {
    let body = std::mem::take(&mut sub.body);
    let mut state = Checked::default();
    let outcome = walk(intake, checks, sub, &body, &mut state).await;
    sub.body = match state.edits.is_empty() {
        true => body,
        false => act::apply(&body, &state.edits),
    };
    match outcome {
        Err(refusal) => Outcome::Refuse(refusal),
        Ok(()) if state.discard => Outcome::Discard,
        Ok(()) => Outcome::Pass {
            hold: state.hold,
            skip_filters: state.skip_filters,
        },
    }
}

async fn walk(
    intake: &Intake,
    checks: &Checks,
    sub: &mut Submission,
    body: &[u8],
    state: &mut Checked,
) -> Result<(), Refusal> {
    let cfg = &intake.config.content_checks;
    let deadline = Instant::now() + Duration::from_millis(cfg.time_limit_ms);
    // Only the message's own headers are checked: the walk ends with them.
    let primary_only = checks.mime.is_empty() && checks.nested.is_empty() && checks.body.is_empty();
    for (n, item) in Walker::new(body).enumerate() {
        if n % 256 == 255 {
            tokio::task::yield_now().await;
        }
        if Instant::now() > deadline {
            let why = format!("took more than {} ms", cfg.time_limit_ms);
            stopped(intake, sub, &why, "the rest of the message is not checked");
            return Ok(());
        }
        let flow = match item {
            Item::Header {
                class,
                start,
                end,
                name_len,
            } => {
                let (what, tables) = match class {
                    Class::Primary => ("header_checks", &checks.header),
                    Class::Multipart => ("mime_header_checks", &checks.mime),
                    Class::Nested => ("nested_header_checks", &checks.nested),
                };
                if tables.is_empty() {
                    continue;
                }
                let key = header_key(&body[start..end], name_len);
                let place = Place::header(what, start, end);
                check(intake, sub, state, tables, &key, place).await?
            }
            Item::Body { .. } if primary_only => break,
            Item::Body { start, end, offset } => {
                let flow = check_line(intake, checks, sub, state, body, (start, end, offset));
                flow.await?
            }
        };
        if flow == Flow::Stop {
            break;
        }
    }
    Ok(())
}

/// One body line, in `line_length_limit` pieces, within the size limit.
async fn check_line(
    intake: &Intake,
    checks: &Checks,
    sub: &mut Submission,
    state: &mut Checked,
    body: &[u8],
    (start, end, offset): (usize, usize, usize),
) -> Result<Flow, Refusal> {
    let limit = intake.config.content_checks.body_checks_size_limit;
    if checks.body.is_empty() || offset >= limit || start == end {
        return Ok(Flow::Go);
    }
    let line_next = act::line_next(body, end);
    let mut at = start;
    while at < end && offset + (at - start) < limit {
        let piece_end = (at + LINE_PIECE).min(end);
        let key = String::from_utf8_lossy(&body[at..piece_end]);
        let cut = if piece_end == end {
            line_next
        } else {
            piece_end
        };
        let place = Place::body(at, piece_end, cut);
        if check(intake, sub, state, &checks.body, &key, place).await? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        at = piece_end;
    }
    Ok(Flow::Go)
}

/// Looks `key` up in `tables` and acts on the answer.
async fn check(
    intake: &Intake,
    sub: &mut Submission,
    state: &mut Checked,
    tables: &[Arc<Table>],
    key: &str,
    place: Place,
) -> Result<Flow, Refusal> {
    match lookup(tables, key).await {
        Ok(None) => Ok(Flow::Go),
        Ok(Some(value)) => act::act(intake, sub, state, &value, key, place),
        // Never a silent miss: a message that makes a pattern blow up is
        // not taken unchecked (Postfix skips that one rule; our table
        // cannot go on past it), as the access tables defer too.
        Err(Failed::Limit(why)) => {
            stopped(intake, sub, &why, "the message is deferred");
            Err(Refusal::Lookup(place.what.into()))
        }
        Err(Failed::Table) => Err(Refusal::Lookup(place.what.into())),
    }
}

/// The first answer of `tables` for `key`.
async fn lookup(tables: &[Arc<Table>], key: &str) -> Result<Option<String>, Failed> {
    for table in tables {
        // (A table that fails logs its own `lookup_failed`.)
        match table.lookup(key).await {
            Ok(Some(values)) => return Ok(Some(values.raw().to_string())),
            Ok(None) => {}
            Err(LookupError::Unavailable(why)) if table.is_pattern() => {
                return Err(Failed::Limit(why))
            }
            Err(LookupError::Unavailable(_)) => return Err(Failed::Table),
        }
    }
    Ok(None)
}

/// The checks stop here, logged with what becomes of the message.
fn stopped(intake: &Intake, sub: &Submission, why: &str, then: &str) {
    intake.logger.emit(&Event::Warning {
        kind: "content_checks".into(),
        open: None,
        line: format!(
            "warning: {}: header/body checks stopped ({why}): {then}",
            Qid(sub.id)
        )
        .into(),
    });
}

/// The lookup key of a header (Postfix's): its name, the blanks before
/// the colon removed, then the rest with each line end made `\n` (the
/// last one dropped); at most [`HEADER_SIZE_LIMIT`] bytes.
pub fn header_key(header: &[u8], name_len: usize) -> String {
    let mut key = Vec::with_capacity(header.len().min(HEADER_SIZE_LIMIT));
    key.extend_from_slice(&header[..name_len]);
    let rest = &header[name_len..];
    let colon = rest.iter().position(|&c| c == b':').unwrap_or(0);
    let rest = &rest[colon..];
    let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
    let rest = rest.strip_suffix(b"\r").unwrap_or(rest);
    let mut i = 0;
    while i < rest.len() && key.len() < HEADER_SIZE_LIMIT {
        match rest[i] {
            b'\r' if rest.get(i + 1) == Some(&b'\n') => {}
            c => key.push(c),
        }
        i += 1;
    }
    key.truncate(HEADER_SIZE_LIMIT);
    match String::from_utf8(key) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
mod tests;
