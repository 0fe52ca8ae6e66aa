//! The mail log read as typed events: each JSON line becomes a [`Logged`]
//! holding a `sluice::log::Event`, the type the daemon writes, so tests
//! match on variants and fields, never on the wording.
//!
//! Trusts nothing: a line that is not an event fails the test, and so
//! does one whose human text is not what its event displays (the text
//! people grep for is checked on every line read). There is no untyped
//! line to pass over.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

pub use sluice::log::{ConnectFailed, Event, Reject, Reload};

/// One line of the mail log (its time and component for failure
/// messages, which print it whole).
#[derive(Debug, Clone)]
#[allow(dead_code, reason = "read through Debug in failure messages")]
pub struct Logged {
    pub ts: String,
    pub component: String,
    pub event: Event<'static>,
}

/// The event of one JSON line. A line that does not read as an event,
/// or whose `text` or `component` is not its event's, fails the test.
pub fn read(line: &Value) -> Logged {
    let event = Event::deserialize(line).unwrap_or_else(|e| panic!("not an event: {e}: {line}"));
    if !event.has_text_field() {
        assert_eq!(line["text"], event.to_string(), "text of {line}");
    }
    assert_eq!(line["component"], event.component(), "component of {line}");
    Logged {
        ts: line["ts"].as_str().unwrap_or_default().to_string(),
        component: event.component().to_string(),
        event,
    }
}

/// Every line of the log file `path`, typed (see [`super::events_in`]).
pub fn logged_in(path: &Path) -> Vec<Logged> {
    super::events_in(path).iter().map(read).collect()
}

/// Every line of the mail log of the daemon logging to `dir`, typed.
pub fn logged(dir: &Path) -> Vec<Logged> {
    logged_in(&dir.join("maillog"))
}

/// The events of the mail log in `dir`.
pub fn logged_events(dir: &Path) -> Vec<Event<'static>> {
    logged(dir).into_iter().map(|l| l.event).collect()
}

/// How many events of the mail log in `dir` satisfy `pred`.
pub fn count_logged(dir: &Path, pred: impl Fn(&Event<'static>) -> bool) -> usize {
    logged(dir).iter().filter(|l| pred(&l.event)).count()
}

/// Whether an event of the mail log in `dir` satisfies `pred`.
pub fn any_logged(dir: &Path, pred: impl Fn(&Event<'static>) -> bool) -> bool {
    count_logged(dir, pred) > 0
}

/// Waits up to `secs` for an event of the mail log in `dir` that
/// satisfies `pred`: woken by each batch of lines of a server in this
/// process, and every 20 ms.
pub async fn wait_logged(secs: u64, dir: &Path, pred: impl Fn(&Event<'static>) -> bool) -> bool {
    super::wait_for_log(secs, dir, || any_logged(dir, &pred)).await
}

/// Whether message `qid` was removed from the queue.
pub fn removed(dir: &Path, qid: &str) -> bool {
    any_logged(
        dir,
        |e| matches!(e, Event::Removed { queue_id, .. } if *queue_id == qid),
    )
}

/// Whether recipient `to` of message `qid` (any message when empty) had a
/// delivery event with `status` whose reason starts with `reason`.
pub fn delivered_as(dir: &Path, qid: &str, to: &str, status: &str, reason: &str) -> bool {
    any_logged(dir, |e| match e {
        Event::Delivery {
            queue_id,
            to: t,
            status: s,
            reason: r,
            ..
        } => {
            (qid.is_empty() || *queue_id == qid)
                && (to.is_empty() || t == to)
                && s == status
                && r.text().starts_with(reason)
        }
        _ => false,
    })
}

/// The delivery events (one per recipient and attempt) of message `qid`,
/// or of every message when `qid` is empty.
pub fn delivery_events(dir: &Path, qid: &str) -> Vec<Event<'static>> {
    logged_events(dir)
        .into_iter()
        .filter(
            |e| matches!(e, Event::Delivery { queue_id, .. } if qid.is_empty() || *queue_id == qid),
        )
        .collect()
}

/// Whether `e` is a delivery to `to` (any when empty) with `status`, and
/// with `dsn` and `reason` when they are not empty.
pub fn is_delivery(e: &Event, to: &str, status: &str, dsn: &str, reason: &str) -> bool {
    match e {
        Event::Delivery {
            to: t,
            status: s,
            dsn: d,
            reason: r,
            ..
        } => {
            (to.is_empty() || t == to)
                && s == status
                && (dsn.is_empty() || *d == dsn)
                && (reason.is_empty() || *r == reason)
        }
        _ => false,
    }
}
