//! `sluice queue …` and `mailq`: the admin socket's client. Prints the
//! queue in the layout of Postfix 3.7's mailq for long queue IDs (the
//! ones as long as ours): the ID with `*` (active) or `!` (on hold)
//! right after it, the size, the arrival as asctime(3) gives it in local
//! time without the year, the sender; each deferral reason in parentheses
//! ending at column 78, once for the recipients that share it; or JSON
//! with `--json`. The postsuper-like commands take IDs, `ALL`, or `-`
//! (IDs one a line on standard input).
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::admin::protocol::{Entry, Request, Response};
use crate::admin::{socket_path, submit_socket_path};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(
        "cannot reach the daemon at {} ({err}): is `sluice serve` running with this data_dir?",
        path.display()
    )]
    Unreachable {
        path: std::path::PathBuf,
        err: std::io::Error,
    },
    #[error("talking to the daemon: {0}")]
    Io(#[from] std::io::Error),
    #[error("the daemon did not answer within {0} s")]
    Timeout(u64),
    #[error("bad answer from the daemon: {0}")]
    Answer(#[from] serde_json::Error),
    /// The daemon's refusal; a refused submission carries sendmail(1)'s
    /// exit status.
    #[error("{text}{}", exit_code.map(|c| format!(" [exit {c}]")).unwrap_or_default())]
    Refused {
        text: String,
        exit_code: Option<i32>,
    },
}

impl CallError {
    /// sendmail(1)'s exit status for this failure.
    pub fn exit_status(&self, software: i32, tempfail: i32) -> i32 {
        match self {
            CallError::Unreachable { .. } => tempfail,
            CallError::Refused {
                exit_code: Some(code),
                ..
            } => *code,
            _ => software,
        }
    }
}

const ANSWER_SECS: u64 = 300;

/// Sends one request to the daemon whose data_dir is `data_dir`.
/// Submissions and the listing go to the submission socket (any local
/// user), the rest to the admin socket (root and the daemon's group).
pub async fn call(data_dir: &Path, request: &Request) -> Result<Response, CallError> {
    let path = match request {
        Request::Submit { .. } | Request::List { .. } => submit_socket_path(data_dir),
        _ => socket_path(data_dir),
    };
    let mut stream = match UnixStream::connect(&path).await {
        Ok(stream) => stream,
        Err(err) => return Err(CallError::Unreachable { path, err }),
    };
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    // A daemon that turns the request away (too many in progress) answers
    // and closes without reading it: its answer is still there to read.
    let written = stream.write_all(&line).await;
    let mut reply = String::new();
    let mut reader = BufReader::new(stream);
    let read = reader.read_line(&mut reply);
    tokio::time::timeout(Duration::from_secs(ANSWER_SECS), read)
        .await
        .map_err(|_| CallError::Timeout(ANSWER_SECS))??;
    if reply.is_empty() {
        written?;
    }
    let response: Response = serde_json::from_str(&reply)?;
    match response.ok {
        true => Ok(response),
        false => Err(CallError::Refused {
            text: response.error.unwrap_or_else(|| "failed".into()),
            exit_code: response.exit_code,
        }),
    }
}

/// Postfix 3.7's header and line layouts for long queue IDs.
const HEADER: &str = "----Queue ID----- --Size-- ----Arrival Time---- --Sender/Recipient------";

/// Recipient lines are indented past the ID, size and date columns.
const RCPT_INDENT: usize = 17 + 1 + 8 + 1 + 19 + 1;

/// The queue as mailq prints it.
pub fn mailq(entries: &[Entry]) -> String {
    if entries.is_empty() {
        return "Mail queue is empty\n".into();
    }
    let mut out = String::from(HEADER);
    out.push('\n');
    let mut bytes = 0;
    for e in entries {
        bytes += e.size;
        let mark = match e.state.as_str() {
            "active" => '*',
            "hold" => '!',
            _ => ' ',
        };
        let id = format!("{}{mark}", e.id);
        let sender = if e.sender.is_empty() {
            "MAILER-DAEMON"
        } else {
            &e.sender
        };
        let when = asctime(e.arrival_ms);
        out.push_str(&format!("{id:<17} {:>8} {when:.19} {sender}\n", e.size));
        let mut said: Option<String> = None;
        for r in e.recipients.iter().filter(|r| r.state != "done") {
            if let Some(reason) = r.reason.as_deref().map(plain_reason) {
                if said.as_deref() != Some(reason.as_str()) {
                    let pad = 76usize.saturating_sub(reason.chars().count());
                    out.push_str(&format!("{:pad$}({reason})\n", ""));
                    said = Some(reason);
                }
            }
            out.push_str(&format!("{:RCPT_INDENT$}{}\n", "", r.address));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "-- {} Kbytes in {} Request{}.\n",
        bytes / 1024,
        entries.len(),
        if entries.len() == 1 { "" } else { "s" }
    ));
    out
}

/// `Fri Nov 27 15:54:54`: asctime(3) in local time without the year
/// (the day space-padded, as asctime has it: `Nov  7`).
fn asctime(millis: u64) -> String {
    let secs = (millis / 1000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return crate::timefmt::rfc5322(millis);
        }
        tm
    };
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let day = DAYS.get(tm.tm_wday as usize).unwrap_or(&"???");
    let month = MONTHS.get(tm.tm_mon as usize).unwrap_or(&"???");
    format!(
        "{day} {month} {:>2} {:02}:{:02}:{:02}",
        tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec
    )
}

/// A reason as shown: no Rust `(os error N)` suffixes, one line.
fn plain_reason(reason: &str) -> String {
    crate::message::status::plain_reason(reason).replace(['\r', '\n'], " ")
}

/// `sluice queue show`: the entry, where it stands (attempts, last and
/// next attempt, each open recipient's last reason), its headers, its
/// log lines.
pub fn show(r: &Response) -> String {
    let mut out = mailq(&r.messages);
    if let Some(e) = r.messages.first() {
        out.push_str(&format!("\nstate: {}, attempts: {}\n", e.state, e.attempts));
        if let Some(at) = e.last_attempt_ms {
            out.push_str(&format!("last attempt: {}\n", asctime(at)));
        }
        if let Some(at) = e.next_retry_ms {
            out.push_str(&format!("next retry: {}\n", asctime(at)));
        }
        for rc in &e.recipients {
            let reason = rc.reason.as_deref().map(plain_reason).unwrap_or_default();
            out.push_str(&format!("  to=<{}> {} {reason}\n", rc.address, rc.state));
        }
    }
    if let Some(h) = &r.headers {
        out.push_str("\nheaders:\n");
        out.push_str(h);
    }
    if !r.history.is_empty() {
        out.push_str("\nlog:\n");
        for l in &r.history {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// `show --body`: the whole message as stored (header and body).
pub fn message(r: &Response) -> Option<Vec<u8>> {
    use base64::Engine;
    let b64 = r.message_b64.as_deref()?;
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// What a postsuper-like command did: `N message(s)`, and how many were
/// already so.
pub fn tally(r: &Response) -> String {
    match r.unchanged {
        0 => format!("{} message(s)", r.count),
        n => format!("{} message(s); {n} already so", r.count),
    }
}

/// The messages a postsuper-like command names: `ALL` (true), queue IDs,
/// and for `-` the IDs on `stdin`, one a line (blank lines skipped).
pub fn targets(
    args: Vec<String>,
    stdin: impl std::io::BufRead,
) -> std::io::Result<(Vec<String>, bool)> {
    let all = args.iter().any(|a| a == "ALL");
    let from_stdin = args.iter().any(|a| a == "-");
    let mut ids: Vec<String> = args
        .into_iter()
        .filter(|a| a != "ALL" && a != "-")
        .collect();
    if from_stdin {
        for line in stdin.lines() {
            let line = line?;
            let id = line.trim();
            if !id.is_empty() {
                ids.push(id.to_string());
            }
        }
    }
    Ok((ids, all))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::protocol::RcptEntry;

    fn entry(state: &str, reason: Option<&str>) -> Entry {
        let rcpt = |a: &str| RcptEntry {
            address: a.into(),
            state: "deferred".into(),
            reason: reason.map(str::to_string),
        };
        Entry {
            id: "661440F8C975A".into(),
            size: 1035,
            arrival_ms: 1_795_794_894_000,
            sender: "ops1@example.test".into(),
            login: None,
            limited: false,
            state: state.into(),
            attempts: 1,
            last_attempt_ms: None,
            next_retry_ms: None,
            recipients: vec![rcpt("user1@down.test"), rcpt("user2@down.test")],
            body_ref: None,
        }
    }

    /// Postfix 3.7's layout: the mark right after the ID, asctime's date,
    /// the reason once in parentheses ending at column 78, no os error.
    #[test]
    fn the_listing_has_postfix_s_layout() {
        let when = asctime(1_795_794_894_000);
        assert_eq!(when.len(), 19, "{when}");
        if local_offset_is_zero() {
            assert_eq!(when, "Fri Nov 27 15:54:54");
        }
        let why = "4.4.1 connect to 127.0.0.1[127.0.0.1]:32999: Connection refused (os error 111)";
        let text = mailq(&[entry("deferred", Some(why)), entry("hold", None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(
            lines[1],
            format!("661440F8C975A         1035 {when} ops1@example.test")
        );
        let reason = "(4.4.1 connect to 127.0.0.1[127.0.0.1]:32999: Connection refused)";
        assert_eq!(lines[2], format!("{reason:>78}"));
        assert_eq!(lines[3], format!("{:47}user1@down.test", ""));
        assert_eq!(lines[4], format!("{:47}user2@down.test", ""), "reason once");
        assert_eq!(lines[5], "");
        assert!(lines[6].starts_with("661440F8C975A!  "), "{}", lines[6]);
        assert_eq!(lines.last(), Some(&"-- 2 Kbytes in 2 Requests."));
        // A reason from a remote server cannot forge a line of its own.
        let forged = "4.0.0 x\r\n0123456789ABC  1 Fri Nov 27 15:54:54 a@b";
        let text = mailq(&[entry("deferred", Some(forged))]);
        assert_eq!(
            text.lines().filter(|l| l.starts_with('0')).count(),
            0,
            "{text}"
        );
        // What scripts do with it: awk's $1 less the mark, $7 the sender.
        let fields: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(fields[0].trim_end_matches(['*', '!']), "661440F8C975A");
        assert_eq!(fields[6], "ops1@example.test");
    }

    fn local_offset_is_zero() -> bool {
        let t: libc::time_t = 1_795_794_894;
        // SAFETY: as in `asctime`.
        unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            !libc::localtime_r(&t, &mut tm).is_null() && tm.tm_gmtoff == 0
        }
    }

    #[test]
    fn targets_are_ids_all_or_stdin() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (ids, all) = targets(args(&["ALL"]), &b""[..]).unwrap();
        assert!(all && ids.is_empty());
        let stdin = &b"AB12*\n\n  CD34\nEF56!\n"[..];
        let (ids, all) = targets(args(&["0A", "-"]), stdin).unwrap();
        assert!(!all);
        assert_eq!(ids, ["0A", "AB12*", "CD34", "EF56!"]);
    }
}
