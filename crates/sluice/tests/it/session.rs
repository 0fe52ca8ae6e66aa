//! In-memory session tests: no sockets, an I/O stub that records each
//! write, so "pipelined replies go out in one write" is checked exactly;
//! the context is the daemon's ([`SessionContext::for_tests`]). For
//! conversations that need no such stub, see `common::scripted`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use sluice::config::Config;
use sluice::log::Logger;
use sluice::queue::Event;
use sluice::receive::smtp::{Session, SessionContext};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Serves `input` one chunk per read, then EOF; records every write.
struct Scripted {
    input: VecDeque<Vec<u8>>,
    writes: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl AsyncRead for Scripted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(chunk) = self.input.pop_front() {
            buf.put_slice(&chunk);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut TaskContext<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.writes.lock().unwrap().push(data.to_vec());
        Poll::Ready(Ok(data.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

async fn run(name: &str, chunks: &[&[u8]]) -> (Vec<String>, Vec<Event>) {
    run_with(name, chunks, 0).await
}

/// As [`run`], with `backlog` jobs published as waiting for local
/// delivery (in-flow pacing).
async fn run_with(name: &str, chunks: &[&[u8]], backlog: usize) -> (Vec<String>, Vec<Event>) {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("sluice-session-{name}-"))
        .tempdir()
        .unwrap();
    let config = Config {
        data_dir: tmp.path().to_path_buf(),
        ..Default::default()
    };
    let (ctx, mut queue) = SessionContext::for_tests(config, Logger::disabled())
        .await
        .unwrap();
    queue.handle.flow().publish(backlog);
    let writes = Arc::new(Mutex::new(Vec::new()));
    let io = Scripted {
        input: chunks.iter().map(|c| c.to_vec()).collect(),
        writes: writes.clone(),
    };
    let listener = Arc::new(ctx.config.all_listeners().remove(0));
    Session::new(io, "127.0.0.1:40000".parse().unwrap(), ctx, listener)
        .run()
        .await;
    let events = queue.events();
    let writes = writes
        .lock()
        .unwrap()
        .iter()
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (writes, events)
}

#[tokio::test]
async fn pipelined_commands_are_answered_in_one_write() {
    let (writes, events) = run(
        "pipeline",
        &[
            b"EHLO a.test\r\nMAIL FROM:<a@b.test>\r\nRCPT TO:<c@d.test>\r\nRCPT TO:<e@d.test>\r\nDATA\r\n",
            b"Subject: x\r\n\r\nbody\r\n.\r\nQUIT\r\n",
        ],
    )
    .await;
    assert_eq!(writes.len(), 3, "{writes:#?}");
    assert!(writes[0].starts_with("220 localhost ESMTP Sluice"));
    let batch = &writes[1];
    for want in [
        "250-localhost",
        "250 2.1.0 Ok",
        "250 2.1.5 Ok\r\n250 2.1.5 Ok",
        "354 ",
    ] {
        assert!(batch.contains(want), "{want} missing from {batch:?}");
    }
    assert!(
        writes[2].starts_with("250 2.0.0 Ok: queued as ")
            && writes[2].ends_with("221 2.0.0 Bye\r\n")
    );
    assert_eq!(events.len(), 1, "the message reached the scheduler");
    match &events[0] {
        Event::Queued(inc) => {
            assert_eq!(inc.envelope.recipients, vec!["c@d.test", "e@d.test"]);
            assert!(inc
                .body
                .as_ref()
                .unwrap()
                .ends_with(b"Subject: x\r\n\r\nbody\r\n"));
        }
        _ => panic!("unexpected event"),
    }
}

#[tokio::test(start_paused = true)]
async fn mail_from_waits_while_local_delivery_is_behind() {
    // Default pacing: above 1,000 jobs waiting, MAIL waits up to 1 s.
    let script: &[&[u8]] = &[b"EHLO a.test\r\nMAIL FROM:<a@b.test>\r\nQUIT\r\n"];
    let t0 = tokio::time::Instant::now();
    let (writes, _) = run_with("paced", script, 1001).await;
    assert_eq!(t0.elapsed(), std::time::Duration::from_secs(1));
    assert!(writes.concat().contains("250 2.1.0 Ok"), "{writes:?}");
    let t0 = tokio::time::Instant::now();
    let (writes, _) = run_with("unpaced", script, 1000).await;
    assert_eq!(t0.elapsed(), std::time::Duration::ZERO);
    assert!(writes.concat().contains("250 2.1.0 Ok"), "{writes:?}");
}

#[tokio::test]
async fn reply_table() {
    // (command line, expected reply prefix) after EHLO.
    let table: &[(&str, &str)] = &[
        ("RCPT TO:<c@d.test>", "503 5.5.1"),
        ("MAIL FROM:<a@b.test> SIZE=999999999999", "552 5.3.4"),
        ("MAIL FROM:<a@b.test> FOO=BAR", "555 5.5.4"),
        ("MAIL FROM:<a@b.test>", "250 2.1.0"),
        ("RCPT TO:<c@d.test> XFORWARD=1", "555 5.5.4"),
        ("RCPT TO:<c@d.test> NOTIFY=NEVER,DELAY", "501 5.5.4"),
        ("RCPT TO:<c@d.test>", "250 2.1.5"),
        ("RCPT TO:<c>", "501 5.1.3"),
        ("EXPN list", "502 5.5.1"),
        ("AUTH PLAIN", "503 5.5.1"),
        ("HELO", "501"),
    ];
    let mut input = b"EHLO a.test\r\n".to_vec();
    for (line, _) in table {
        input.extend_from_slice(line.as_bytes());
        input.extend_from_slice(b"\r\n");
    }
    let (writes, _) = run("table", &[&input]).await;
    let all: String = writes.concat();
    let replies: Vec<&str> = all
        .split("\r\n")
        .filter(|l| !l.starts_with("250-") && !l.is_empty())
        .collect();
    // replies[0] = greeting, [1] = last EHLO line.
    for (i, (line, want)) in table.iter().enumerate() {
        let got = replies[i + 2];
        assert!(got.starts_with(want), "{line:?}: want {want}, got {got:?}");
    }
}
