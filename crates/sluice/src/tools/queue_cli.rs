//! `sluice queue …` and `mailq`: the admin socket's client. Prints the
//! queue like Postfix's mailq (`*` after the ID: active, `!`: on hold),
//! or JSON with `--json`.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::admin::protocol::{Entry, Request, Response};
use crate::admin::{socket_path, submit_socket_path};

/// Why a request failed: the text, sendmail(1)'s exit status when the
/// daemon refused with one, and whether the daemon could not be reached.
#[derive(Debug)]
pub struct CallError {
    pub text: String,
    pub exit_code: Option<i32>,
    pub unreachable: bool,
}

impl From<String> for CallError {
    fn from(text: String) -> CallError {
        CallError {
            text,
            exit_code: None,
            unreachable: false,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.exit_code {
            Some(code) => write!(f, "{} [exit {code}]", self.text),
            None => f.write_str(&self.text),
        }
    }
}

impl From<CallError> for String {
    fn from(e: CallError) -> String {
        e.to_string()
    }
}

/// Sends one request to the daemon whose data_dir is `data_dir`.
/// Submissions and the listing go to the submission socket (any local
/// user), the rest to the admin socket (root and the daemon's group).
pub async fn call(data_dir: &Path, request: &Request) -> Result<Response, CallError> {
    let path = match request {
        Request::Submit { .. } | Request::List { .. } => submit_socket_path(data_dir),
        _ => socket_path(data_dir),
    };
    let mut stream = UnixStream::connect(&path).await.map_err(|e| CallError {
        text: format!(
            "cannot reach the daemon at {} ({e}): is `sluice serve` running with this data_dir?",
            path.display()
        ),
        exit_code: None,
        unreachable: true,
    })?;
    let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    line.push(b'\n');
    stream.write_all(&line).await.map_err(|e| e.to_string())?;
    let mut reply = String::new();
    let mut reader = BufReader::new(stream);
    let read = reader.read_line(&mut reply);
    tokio::time::timeout(Duration::from_secs(300), read)
        .await
        .map_err(|_| "the daemon did not answer within 300 s".to_string())?
        .map_err(|e| e.to_string())?;
    let response: Response =
        serde_json::from_str(&reply).map_err(|e| format!("bad answer from the daemon: {e}"))?;
    match response.ok {
        true => Ok(response),
        // A refused submission carries sendmail(1)'s exit status.
        false => Err(CallError {
            text: response.error.unwrap_or_else(|| "failed".into()),
            exit_code: response.exit_code,
            unreachable: false,
        }),
    }
}

/// The queue as mailq prints it.
pub fn mailq(entries: &[Entry]) -> String {
    if entries.is_empty() {
        return "Mail queue is empty\n".into();
    }
    let mut out =
        String::from("-Queue ID-       --Size-- ----Arrival Time---- -Sender/Recipient-------\n");
    let mut bytes = 0;
    for e in entries {
        bytes += e.size;
        let mark = match e.state.as_str() {
            "active" => "*",
            "hold" => "!",
            _ => " ",
        };
        let when = crate::timefmt::rfc5322(e.arrival_ms);
        let when: String = when.chars().take(25).collect();
        out.push_str(&format!(
            "{:<16}{mark}{:>8} {when:<25} {}\n",
            e.id, e.size, e.sender
        ));
        for r in e.recipients.iter().filter(|r| r.state != "done") {
            if let Some(reason) = &r.reason {
                out.push_str(&format!("{:52}({reason})\n", ""));
            }
            out.push_str(&format!("{:52}{}\n", "", r.address));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "-- {} Kbytes in {} Request{}.\n",
        bytes.div_ceil(1024),
        entries.len(),
        if entries.len() == 1 { "" } else { "s" }
    ));
    out
}

/// `sluice queue show`: the entry, its headers, its log lines.
pub fn show(r: &Response) -> String {
    let mut out = mailq(&r.messages);
    if let Some(e) = r.messages.first() {
        out.push_str(&format!("\nstate: {}, attempts: {}\n", e.state, e.attempts));
        for rc in &e.recipients {
            let reason = rc.reason.as_deref().unwrap_or("");
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
