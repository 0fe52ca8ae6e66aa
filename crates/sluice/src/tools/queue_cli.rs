//! `sluice queue …` and `mailq`: the admin socket's client. Prints the
//! queue like Postfix's mailq (`*` after the ID: active, `!`: on hold),
//! or JSON with `--json`.

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
