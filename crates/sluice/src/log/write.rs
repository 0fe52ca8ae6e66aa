//! The writer's side of the mail log: the file (or stderr) it appends
//! to, reopening it for logrotate, and the two line formats (the
//! Postfix-like text line, and one JSON object per line).
//!
//! Trust: a line's text may hold anything a peer managed to get into it;
//! a line end in it becomes a space, so one event is one line and nobody
//! writes a line of their own into the log. Only the writer thread calls
//! these.

use std::io::Write;
use std::path::Path;

use super::{tap, timefmt, Event};

/// The log file (appended, created with its directory) or stderr.
pub(super) fn open(path: Option<&Path>) -> std::io::Result<Box<dyn Write + Send>> {
    Ok(match path {
        Some(p) => {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            Box::new(open_append(p)?)
        }
        None => Box::new(std::io::stderr()),
    })
}

/// Opens the log for appending; a new file is made mode 0640 whatever the
/// umask (the daemon's is 077): readable by the `adm` group, as logs are.
pub(super) fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path)
    {
        Ok(file) => {
            file.set_permissions(std::fs::Permissions::from_mode(0o640))?;
            Ok(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::OpenOptions::new().append(true).open(path)
        }
        Err(e) => Err(e),
    }
}

pub(super) fn reopen(out: &mut tap::Out, path: Option<&Path>, json: bool) {
    let _ = out.flush();
    match open(path) {
        Ok(file) if path.is_some() => {
            out.replace(file);
            note(out, json, &Event::LogReopened);
        }
        Ok(_) => {}
        Err(e) => {
            let error = e.to_string().into();
            note(out, json, &Event::LogReopenFailed { error });
        }
    }
}

/// A line of the writer's own, in the log's format.
pub(super) fn note(out: &mut impl Write, json: bool, event: &Event<'_>) {
    let now = timefmt::now_millis();
    match json {
        true => write_body(out, now, &json_body("sluice", event)),
        false => {
            let line = format!("sluice/{}: {event}", event.component());
            write_line(out, now, &line)
        }
    }
}

/// An event's JSON object without its `ts`: the event's own fields
/// (`event` first), then `program`, `component`, `queue_id` (null when
/// the event has none) and `text`, the human line (unless the event has a
/// `text` of its own). Serialised straight from the event into one buffer.
pub(super) fn json_body(program: &str, event: &Event<'_>) -> Vec<u8> {
    /// The human line, escaped as it is written (no string made first).
    struct Line<'e, 'a>(&'e Event<'a>);
    impl serde::Serialize for Line<'_, '_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_str(self.0)
        }
    }
    let mut buf = Vec::with_capacity(256);
    // Writing to memory fails only for a value serde cannot write; the
    // line then says so rather than being lost.
    if serde_json::to_writer(&mut buf, event).is_err() || buf.last() != Some(&b'}') {
        buf.clear();
        buf.extend_from_slice(br#"{"event":"unwritable"}"#);
    }
    buf.pop();
    buf.extend_from_slice(br#","program":"#);
    let _ = serde_json::to_writer(&mut buf, program);
    buf.extend_from_slice(br#","component":"#);
    let _ = serde_json::to_writer(&mut buf, event.component());
    if event.queue_id().is_none() {
        buf.extend_from_slice(br#","queue_id":null"#);
    }
    if !event.has_text_field() {
        buf.extend_from_slice(br#","text":"#);
        let _ = serde_json::to_writer(&mut buf, &Line(event));
    }
    buf.push(b'}');
    buf
}

/// One JSON line: `{"ts":…,` and the body made by [`json_body`].
pub(super) fn write_body(out: &mut impl Write, millis: u64, body: &[u8]) {
    let ts = timefmt::iso8601(millis);
    let _ = write!(out, "{{\"ts\":\"{ts}\",");
    let _ = out.write_all(body.get(1..).unwrap_or_default());
    let _ = out.write_all(b"\n");
}

/// One line as a JSON object: `sluice/smtpd: 1A2B: text` gives program
/// `sluice`, component `smtpd`, queue_id `1A2B`, text.
pub(super) fn write_json(out: &mut impl Write, millis: u64, line: &str) {
    let (head, text) = line.split_once(": ").unwrap_or(("", line));
    let (program, component) = head.split_once('/').unwrap_or((head, ""));
    let queue_id = text.split_once(": ").map(|(id, _)| id).filter(|id| {
        id.len() >= 8
            && id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())
    });
    let value = serde_json::json!({
        "ts": timefmt::iso8601(millis),
        "program": program,
        "component": component,
        "event": "log",
        "queue_id": queue_id,
        "text": text,
    });
    let _ = writeln!(out, "{value}");
}

/// One line of the text format. A line end inside the text (whatever a
/// peer managed to get into it) becomes a space: one event, one line, and
/// nobody can write a line of their own into the log.
pub(super) fn write_line(out: &mut impl Write, millis: u64, line: &str) {
    let ts = timefmt::iso8601(millis);
    let _ = match memchr::memchr2(b'\n', b'\r', line.as_bytes()) {
        None => writeln!(out, "{ts} {line}"),
        Some(_) => writeln!(out, "{ts} {}", line.replace(['\n', '\r'], " ")),
    };
}
