use super::*;
use crate::sink::{Sink, SinkOptions};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn lines(path: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn ack_log_lists_exactly_what_the_sink_received() {
    let dir = temp("acks");
    let sink = Sink::start(SinkOptions {
        message_ids: Some(dir.join("sink.ids")),
        ..SinkOptions::default()
    })
    .await
    .unwrap();
    let opts = BenchOptions {
        target: sink.addr,
        sessions: 4,
        messages_per_session: 3,
        count: 50,
        ack_log: Some(dir.join("acks")),
        chart: Some(dir.join("rates.svg")),
        ..BenchOptions::default()
    };
    let report = run(opts, std::io::sink()).await.unwrap();
    assert_eq!((report.messages, report.errors), (50, 0));
    let svg = std::fs::read_to_string(dir.join("rates.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );
    let acks = lines(&dir.join("acks"));
    assert_eq!(acks.len(), 50);
    assert!(acks[0].starts_with('<') && acks[0].ends_with("@sluice.bench>"));
    assert_eq!(acks, lines(&dir.join("sink.ids")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The generator's per-interval CSV, line by line, for a test to watch.
struct Csv {
    partial: Vec<u8>,
    lines: tokio::sync::mpsc::UnboundedSender<String>,
}

impl std::io::Write for Csv {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(buf);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let _ = self
                .lines
                .send(String::from_utf8_lossy(&line).trim_end().to_string());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Waits until a CSV line's `column` (1: messages, 3: errors) is above 0.
async fn until_column(csv: &mut tokio::sync::mpsc::UnboundedReceiver<String>, column: usize) {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(10), csv.recv())
            .await
            .expect("a CSV line within 10 s")
            .expect("the generator writes its CSV");
        let n = line
            .split(',')
            .nth(column)
            .and_then(|n| n.parse::<u64>().ok());
        if n.is_some_and(|n| n > 0) {
            return;
        }
    }
}

#[tokio::test]
async fn keeps_going_while_the_server_is_down() {
    let dir = temp("down");
    // A port held (bound, not listening: connections to it are refused)
    // until the sink takes it.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = held.local_addr().unwrap();
    let opts = BenchOptions {
        target: addr,
        sessions: 2,
        count: 40,
        max_seconds: Some(20),
        retry_pause: Duration::from_millis(100),
        interval: Duration::from_millis(50),
        ack_log: Some(dir.join("acks")),
        ..BenchOptions::default()
    };
    let (tx, mut csv) = tokio::sync::mpsc::unbounded_channel();
    let writer = Csv {
        partial: Vec::new(),
        lines: tx,
    };
    let bench = tokio::spawn(run(opts, writer));
    // Until the generator reports refused connections.
    until_column(&mut csv, 3).await;
    drop(held);
    let sink = Sink::start(SinkOptions {
        listen: Some(addr),
        ..SinkOptions::default()
    })
    .await
    .unwrap();
    let report = bench.await.unwrap().unwrap();
    // Refused connections count as errors, with a pause each: a few per
    // session, not all 40 messages.
    assert!(report.errors > 0 && report.errors < 20, "{report:?}");
    assert_eq!(report.messages + report.errors, 40);
    assert_eq!(report.messages, sink.count());
    assert_eq!(lines(&dir.join("acks")).len() as u64, report.messages);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn stop_ends_the_run_with_a_complete_ack_log() {
    let dir = temp("stop");
    let sink = Sink::start(SinkOptions::default()).await.unwrap();
    let stop = Arc::new(tokio::sync::Notify::new());
    let opts = BenchOptions {
        target: sink.addr,
        sessions: 3,
        count: u64::MAX / 2,
        ack_log: Some(dir.join("acks")),
        stop: Some(stop.clone()),
        interval: Duration::from_millis(50),
        ..BenchOptions::default()
    };
    let (tx, mut csv) = tokio::sync::mpsc::unbounded_channel();
    let writer = Csv {
        partial: Vec::new(),
        lines: tx,
    };
    let bench = tokio::spawn(run(opts, writer));
    // Stopped once messages go through.
    until_column(&mut csv, 1).await;
    stop.notify_one();
    let report = tokio::time::timeout(Duration::from_secs(10), bench)
        .await
        .expect("stops")
        .unwrap()
        .unwrap();
    assert!(report.messages > 0);
    assert_eq!(report.messages, sink.count());
    assert_eq!(lines(&dir.join("acks")).len() as u64, report.messages);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn starttls_from_generator_to_sink() {
    let sink = Sink::start(SinkOptions {
        starttls: true,
        record: true,
        ..SinkOptions::default()
    })
    .await
    .unwrap();
    let opts = BenchOptions {
        target: sink.addr,
        sessions: 3,
        messages_per_session: 2,
        count: 12,
        starttls: true,
        ..BenchOptions::default()
    };
    let report = run(opts, std::io::sink()).await.unwrap();
    assert_eq!((report.messages, report.errors), (12, 0));
    assert_eq!(sink.count(), 12);
    // Without STARTTLS on the sink's side, a generator that wants it fails.
    let plain = Sink::start(SinkOptions::default()).await.unwrap();
    let opts = BenchOptions {
        target: plain.addr,
        sessions: 1,
        count: 1,
        starttls: true,
        max_seconds: Some(5),
        ..BenchOptions::default()
    };
    let report = run(opts, std::io::sink()).await.unwrap();
    assert_eq!(report.messages, 0);
    assert_eq!(plain.count(), 0);
}
