//! Accept loops when descriptors run out (security review M3): the real
//! `sluice serve` under `ulimit -n 64`, flooded with SMTP connections it
//! cannot all take, while clients also knock on the admin socket and the
//! metrics server. Before, the admin and metrics loops ended on the first
//! EMFILE and stayed dead; now every loop backs off and, once the flood
//! is gone, all three answer.

use crate::common;

use std::process::{Child, Command, Stdio};

use common::*;
use sluice::admin::protocol::Request;

/// The daemon, listening on port 0 for SMTP and metrics (its `listening`
/// events say where), under `ulimit -n 64`.
fn spawn(dir: &std::path::Path) -> Child {
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "hostname = \"mx.test\"\nrun_as_root = true\ndata_dir = \"{}\"\nlog_file = \"{}\"\n\
             log_format = \"json\"\n[smtpd]\nlisten = [\"127.0.0.1:0\"]\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\n[delivery]\nrelayhost = \"discard\"\n",
            dir.join("var").display(),
            dir.join("maillog").display(),
        ),
    )
    .unwrap();
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" serve --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn metrics_answer(addr: std::net::SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(2), s.read_to_end(&mut reply));
    matches!(read.await, Ok(Ok(_))) && reply.starts_with(b"HTTP/1.1 200")
}

async fn smtp_answers(addr: std::net::SocketAddr) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let mut greeting = [0u8; 3];
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        s.read_exact(&mut greeting),
    );
    matches!(read.await, Ok(Ok(_))) && &greeting == b"220"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accept_loop_survives_running_out_of_descriptors() {
    let dir = temp_dir("emfile");
    let mut server = spawn(&dir);
    let metrics = listening_on(&dir, 0, "metrics").await;
    let smtp = listening_on(&dir, 0, "smtp").await;
    // More connections than the daemon has descriptors: it takes what it
    // can, the rest wait in the backlog, and its accepts fail.
    let mut flood = Vec::new();
    for _ in 0..120 {
        flood.push(std::net::TcpStream::connect(smtp).unwrap());
    }
    assert!(
        wait_logged(20, &dir, |e| matches!(e, Event::AcceptFailed { .. })).await,
        "the daemon never ran out: {}",
        read_log(&dir)
    );
    // Knock on the other two while nothing is left.
    let admin = sluice::admin::socket_path(&dir.join("var"));
    let mut knocks = Vec::new();
    for _ in 0..3 {
        // (A dead loop has closed its socket: refused, seen below.)
        knocks.extend(std::os::unix::net::UnixStream::connect(&admin).ok());
        flood.extend(std::net::TcpStream::connect(metrics).ok());
    }
    let failed = |which: &str| {
        any_logged(
            &dir,
            |e| matches!(e, Event::AcceptFailed { listener, .. } if listener == which),
        )
    };
    assert!(
        wait_until(20, || failed("admin") && failed("metrics")).await,
        "{}",
        read_log(&dir)
    );
    drop(flood);
    drop(knocks);
    // The flood is gone: all three answer again.
    let data_dir = dir.join("var");
    // A request only the admin socket answers (the listing goes to the
    // submission socket).
    let list = Request::Flush {
        id: None,
        domain: None,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut state = (false, false, false);
    while std::time::Instant::now() < deadline {
        state = (
            smtp_answers(smtp).await,
            sluice::tools::queue_cli::call(&data_dir, &list)
                .await
                .is_ok(),
            metrics_answer(metrics).await,
        );
        if state == (true, true, true) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
    let log = read_log(&dir);
    assert_eq!(
        state,
        (true, true, true),
        "(smtp, admin, metrics) answer: {log}"
    );
    assert!(
        any_logged(&dir, |e| matches!(e, Event::AcceptRecovered { .. })),
        "{log}"
    );
}
