//! `log_format = "json"`: every line of the mail log is a JSON object
//! with the queue ID split out, for log shippers.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_carry_the_queue_id() {
    // Libraries' records reach the first daemon of a process only.
    if common::alone::elsewhere(module_path!(), "json_log_lines_carry_the_queue_id") {
        return;
    }
    let dir = temp_dir("log-json");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.log_format = sluice::config::LogFormat::Json;
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c.message("a@b.test", &["x@ours.test"], &body("json")).await;
    let id = qid_of(&r);
    assert!(wait_until(15, || sink.count() == 1).await);
    // Libraries' warnings (log, and hickory's tracing) reach the mail log.
    tracing::warn!(target: "hickory_proto::udp", "tracing reaches the mail log");
    server.shutdown().await;
    let log = read_log(&dir);
    // Every line is an object (events() fails the test on one that is not).
    let lines = events(&dir);
    let received = lines
        .iter()
        .find(|v| v["event"] == "received" && v["queue_id"] == id.as_str())
        .unwrap_or_else(|| panic!("a line for {id}: {log}"));
    assert_eq!(received["component"], "smtpd");
    assert_eq!(received["origin"], "smtpd");
    assert_eq!(received["client_ip"], "127.0.0.1");
    assert_eq!(received["from"], "a@b.test");
    assert_eq!(received["nrcpt"], 1);
    assert_eq!(received["program"], "sluice");
    assert!(received["ts"].as_str().unwrap().starts_with("20"));
    assert!(
        lines.iter().any(|v| v["component"] == "hickory_proto"
            && v["text"] == "WARN: tracing reaches the mail log"),
        "{log}"
    );
    // A format that does not exist is an error when the file is read,
    // with its line.
    let path = dir.join("bad.toml");
    std::fs::write(&path, "hostname = \"mx.test\"\nlog_format = \"xml\"\n").unwrap();
    let err = sluice::config::Config::load(&path).unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");
}
