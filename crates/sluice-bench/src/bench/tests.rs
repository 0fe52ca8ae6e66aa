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

#[tokio::test]
async fn keeps_going_while_the_server_is_down() {
    let dir = temp("down");
    // A port nobody listens on, for now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let opts = BenchOptions {
        target: addr,
        sessions: 2,
        count: 40,
        max_seconds: Some(20),
        retry_pause: Duration::from_millis(100),
        ack_log: Some(dir.join("acks")),
        ..BenchOptions::default()
    };
    let bench = tokio::spawn(run(opts, std::io::sink()));
    tokio::time::sleep(Duration::from_millis(450)).await;
    let sink = Sink::start(SinkOptions {
        listen: Some(addr),
        ..SinkOptions::default()
    })
    .await
    .unwrap();
    let report = bench.await.unwrap().unwrap();
    // Refused connections count as errors, with a pause each: about
    // 2 sessions x 4-5 attempts, not all 40 messages.
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
        ..BenchOptions::default()
    };
    let bench = tokio::spawn(run(opts, std::io::sink()));
    tokio::time::sleep(Duration::from_millis(300)).await;
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
