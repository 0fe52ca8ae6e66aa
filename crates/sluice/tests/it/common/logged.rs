//! The mail log read as typed events: each JSON line becomes a [`Logged`]
//! holding a `sluice::log::Event`, the type the daemon writes, so tests
//! match on variants and fields, never on the wording.
//!
//! Trusts nothing: a line that is not an event fails the test, and so
//! does one whose human text is not what its event displays (the text
//! people grep for is checked on every line read). Lines of the old
//! `log!` path (`"event": "log"`, the queue's until it moves to typed
//! events) are the only ones passed over.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

pub use sluice::log::{ConnectFailed, Event};

/// One line of the mail log (its time and component for failure
/// messages, which print it whole).
#[derive(Debug, Clone)]
#[allow(dead_code, reason = "read through Debug in failure messages")]
pub struct Logged {
    pub ts: String,
    pub component: String,
    pub event: Event<'static>,
}

/// The event of one JSON line; `None` for an old-path `log` line. Any
/// other line that does not read as an event, or whose `text` or
/// `component` is not its event's, fails the test.
pub fn read(line: &Value) -> Option<Logged> {
    if line["event"] == "log" {
        return None;
    }
    let event = Event::deserialize(line).unwrap_or_else(|e| panic!("not an event: {e}: {line}"));
    if !event.has_text_field() {
        assert_eq!(line["text"], event.to_string(), "text of {line}");
    }
    assert_eq!(line["component"], event.component(), "component of {line}");
    Some(Logged {
        ts: line["ts"].as_str().unwrap_or_default().to_string(),
        component: event.component().to_string(),
        event,
    })
}

/// Every line of the log file `path`, typed (see [`super::events_in`]).
pub fn logged_in(path: &Path) -> Vec<Logged> {
    super::events_in(path).iter().filter_map(read).collect()
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
