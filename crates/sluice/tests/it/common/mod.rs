//! Shared helpers for end-to-end tests: temp dirs, configs, a raw SMTP
//! client, polling with a deadline, the events of a test's servers.

pub mod alone;
pub mod amavis;
mod client;
pub mod dns_split;
pub mod dovecot;
pub mod haproxy;
pub mod live;
mod logged;
pub mod mariadb;
pub mod milter_probe;
pub mod netns;
pub mod nsd;
pub mod opendkim;
pub mod pebble;
pub mod postfix;
pub mod postfix_dns;
mod postfix_log;
pub mod postgres;
pub mod postgrey;
pub mod postsrsd;
pub mod redis;
pub mod rspamd;
pub mod scripted;
pub mod shadow_nodes;
pub mod slapd;
pub mod tls;
pub mod users;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use client::{body, qid_of, take_reply, Client};
pub use logged::*;
pub use sluice::config::hop::{Cidr, NextHop};

/// A network for `mynetworks` and the like.
pub fn net(text: &str) -> Cidr {
    Cidr::parse(text).unwrap_or_else(|| panic!("bad network {text:?}"))
}
use sluice::config::Config;
use sluice::daemon::Server;
use sluice_bench::sink::{Sink, SinkOptions};

/// A test's own directory, removed when the test ends (kept if
/// `SLUICE_KEEP_TEST_DIRS` is set, or the test failed, for a look at logs
/// and spools; a failed test names it on stderr).
pub struct TestDir(Option<tempfile::TempDir>);

impl std::ops::Deref for TestDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.as_ref().expect("present until drop").path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed || std::env::var_os("SLUICE_KEEP_TEST_DIRS").is_some() {
            if let Some(dir) = self.0.take() {
                let kept = dir.keep();
                if failed {
                    eprintln!("test directory kept: {}", kept.display());
                }
            }
        }
    }
}

pub fn temp_dir(name: &str) -> TestDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("sluice-test-{name}-"))
        .tempdir()
        .unwrap();
    TestDir(Some(dir))
}

/// Runs `cmd` with `stdin` written to it: (exit status, stdout, stderr).
pub fn output_of(mut cmd: std::process::Command, stdin: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Stops the test with a clear message when `bin` (Debian package `pkg`)
/// is missing. Tests install nothing: `scripts/test` installs every
/// package the suite needs before it runs (installing from inside a test
/// raced with other tests' dpkg runs).
pub fn ensure_package(bin: &str, pkg: &str) {
    assert!(
        std::path::Path::new(bin).exists(),
        "{bin} is missing: install the Debian package {pkg} (scripts/test does)"
    );
}

/// Waits until the server `child` (named `what`, its files in `dir`)
/// accepts on the Unix socket `socket`; fails the test if it exits first
/// or is not up within `secs`.
pub fn wait_for_socket(
    child: &mut std::process::Child,
    socket: &std::path::Path,
    secs: u64,
    what: &str,
    dir: &std::path::Path,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        let exited = child.try_wait().unwrap();
        assert!(
            exited.is_none() && std::time::Instant::now() < deadline,
            "{what} did not start ({exited:?}); see {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A config for tests: port 0 on loopback, relayhost = `next_hop`, fast retries.
pub fn config(dir: &std::path::Path, next_hop: Option<SocketAddr>) -> Config {
    let mut c = Config {
        hostname: "mx.test".parse().unwrap(),
        data_dir: dir.join("var"),
        log_file: Some(dir.join("maillog")),
        // Tests read events, not prose.
        log_format: sluice::config::LogFormat::Json,
        ..Default::default()
    };
    c.smtpd.listen = vec!["127.0.0.1:0".parse().unwrap()];
    c.delivery.relayhost = next_hop.map(NextHop::to_addr);
    c.delivery.connection_idle_secs = 1;
    c.queue.minimal_backoff_secs = 1;
    c.queue.maximal_backoff_secs = 2;
    // No DNS query leaves the machine: nothing answers here (tests that
    // need DNS start their own nsd).
    c.dns.nameservers = vec!["127.0.0.1:9".parse().unwrap()];
    c.dns.timeout_ms = 300;
    c.dns.attempts = 1;
    // The tests' mail hosts are on loopback: their zones point MX at
    // 127.0.0.x sinks. Our own listening address stays refused (guard.rs).
    c.delivery.allow_mx_networks = vec![sluice::config::hop::Cidr::parse("127.0.0.0/8").unwrap()];
    // Next hops that tests stop and start come back within a second.
    c.delivery.dead_host_secs = 1;
    c
}

/// As [`config`], for a client on the Internet: the test client
/// (127.0.0.1) is outside mynetworks, `ours.test` is a relay domain routed
/// to `next_hop` (or discarded).
pub fn untrusted_config(dir: &std::path::Path, next_hop: Option<SocketAddr>) -> Config {
    let mut cfg = config(dir, next_hop);
    cfg.smtpd.mynetworks = vec![net("127.0.0.3/32")];
    cfg.smtpd.relay_domains = vec!["ours.test".parse().unwrap()];
    let hop = next_hop.map_or(NextHop::Discard, NextHop::to_addr);
    cfg.transport.insert("ours.test".into(), hop);
    cfg
}

/// An SMTP listener on a free loopback port that takes PROXY headers from
/// 127.0.0.1 only (the tests' balancer).
pub fn proxy_listener() -> sluice::config::listener::ListenerConfig {
    sluice::config::listener::ListenerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        kind: sluice::config::listener::ListenerKind::Smtp,
        proxy_protocol: true,
        proxy_protocol_from: vec![net("127.0.0.1/32")],
        auth: None,
        auth_without_tls: false,
        sender_auth: false,
        dmarc_reject: false,
        restrictions: Default::default(),
        content_checks: Default::default(),
        overrides: Default::default(),
        smtpd_tls_ask_ccert: None,
        content_filter: None,
    }
}

pub async fn recording_sink() -> Sink {
    Sink::start(SinkOptions {
        record: true,
        test_replies: true,
        ..Default::default()
    })
    .await
    .unwrap()
}

pub async fn sink_on(addr: SocketAddr) -> Sink {
    Sink::start(SinkOptions {
        listen: Some(addr),
        record: true,
        test_replies: true,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A loopback port kept by a socket that is bound but not listening:
/// connections to it are refused (a next hop that is down), and no other
/// socket can take it, until [`Reserved::sink`] starts listening on it
/// (the hop comes back at the same address). Nothing is released and
/// hoped for.
pub struct Reserved {
    socket: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

pub fn reserve() -> Reserved {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    Reserved { socket, addr }
}

impl Reserved {
    /// A recording sink, now listening on the kept port.
    pub async fn sink(self) -> Sink {
        let opts = SinkOptions {
            record: true,
            test_replies: true,
            ..Default::default()
        };
        Sink::start_on(self.socket, opts).await.unwrap()
    }
}

/// Starts a server in this process; its events are read from memory as
/// they are logged ([`live`]). Its start-up events (`started`,
/// `listening` …) are in the log when this returns.
pub async fn start(config: Config) -> (Server, SocketAddr) {
    let logger = live::logger(&config);
    let server = Server::start_logging_to(config, logger.clone())
        .await
        .unwrap();
    tokio::task::spawn_blocking(move || logger.flush())
        .await
        .unwrap();
    let addr = server.addrs[0];
    (server, addr)
}

/// Polls `cond` every 20 ms for up to `secs` seconds.
pub async fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// The mail log as people read it: each JSON event's `component: text`
/// (lines that are not JSON as they are). For failure messages, and for
/// the tests not yet asserting on events.
pub fn read_log(dir: &std::path::Path) -> String {
    let raw = std::fs::read_to_string(dir.join("maillog")).unwrap_or_default();
    let mut out = String::with_capacity(raw.len());
    for line in raw.lines() {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => {
                let component = v["component"].as_str().unwrap_or("");
                let text = v["text"].as_str().unwrap_or("");
                let ts = v["ts"].as_str().unwrap_or("");
                out.push_str(&format!("{ts} sluice/{component}: {text}\n"));
            }
            Err(_) => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Every event of the mail log (`log_format = "json"`, as `config` sets);
/// a line that is not a JSON object fails the test.
pub fn events(dir: &std::path::Path) -> Vec<serde_json::Value> {
    events_in(&dir.join("maillog"))
}

/// The events of the log file `path` (a last line still being written,
/// without its newline, is left for the next read).
pub fn events_in(path: &std::path::Path) -> Vec<serde_json::Value> {
    events_where(path, |_| true)
}

/// The events of the log file `path` that satisfy `pred`: from memory
/// while a server of this process writes it ([`live`]), else read. Each
/// line must read as a typed event whose text is its own
/// ([`logged::read`]): whatever a test asserts, the log stays typed.
fn events_where(
    path: &std::path::Path,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    if let Some(events) = live::events_where(path, &pred) {
        events.iter().for_each(|e| drop(logged::read(e)));
        return events;
    }
    let raw = std::fs::read_to_string(path).unwrap_or_default();
    let whole = raw.rfind('\n').map_or("", |end| &raw[..end]);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .inspect(|e| drop(logged::read(e)))
        .filter(|e| pred(e))
        .collect()
}

/// How many times a daemon logging to `dir` has started.
pub fn starts(dir: &std::path::Path) -> usize {
    count_logged(dir, |e| matches!(e, Event::Started { .. }))
}

/// The address a daemon logging to `dir` listens on for `kind` ("smtp",
/// "submission", "metrics" …) since its start number `start` (0-based; see [`starts`]):
/// daemons under test listen on port 0 and say where in their
/// `listening` events. Waits up to 20 s.
pub async fn listening_on(dir: &std::path::Path, start: usize, kind: &str) -> SocketAddr {
    listening_in(&dir.join("maillog"), start, kind).await
}

/// As [`listening_on`], for a daemon logging to the file `log`.
pub async fn listening_in(log: &std::path::Path, start: usize, kind: &str) -> SocketAddr {
    let mut found = None;
    let seen = wait_until(20, || {
        let all = logged_in(log);
        let Some(begin) = all
            .iter()
            .enumerate()
            .filter(|(_, l)| matches!(l.event, Event::Started { .. }))
            .nth(start)
            .map(|(i, _)| i)
        else {
            return false;
        };
        found = all[begin..].iter().find_map(|l| match &l.event {
            Event::Listening { addr, kind: k } if k.eq_ignore_ascii_case(kind) => addr.parse().ok(),
            _ => None,
        });
        found.is_some()
    })
    .await;
    assert!(
        seen,
        "no {kind} listener of start {start} in {}",
        log.display()
    );
    found.unwrap()
}

/// The events named `name`.
pub fn events_named(dir: &std::path::Path, name: &str) -> Vec<serde_json::Value> {
    events_where(&dir.join("maillog"), |e| e["event"] == name)
}

/// Whether an event named `name` satisfying `pred` was logged.
pub fn has_event(
    dir: &std::path::Path,
    name: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    events_named(dir, name).iter().any(pred)
}

/// Waits up to `secs` for an event named `name` satisfying `pred`: woken
/// by each batch of lines of a server in this process, and every 20 ms.
pub async fn wait_event(
    secs: u64,
    dir: &std::path::Path,
    name: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    wait_for_log(secs, dir, || has_event(dir, name, &pred)).await
}

/// Waits up to `secs` until `found()` says the mail log in `dir` holds
/// what is wanted: asked again at each batch of lines a server in this
/// process writes, and every 20 ms.
pub async fn wait_for_log(secs: u64, dir: &std::path::Path, found: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let live = live::of(&dir.join("maillog"));
    loop {
        let changed = live.as_ref().map(|l| l.changed.notified());
        let mut changed = std::pin::pin!(changed);
        if let Some(changed) = changed.as_mut().as_pin_mut() {
            changed.enable();
        }
        if found() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        let pause = Duration::from_millis(20);
        match changed.as_mut().as_pin_mut() {
            Some(changed) => {
                let _ = tokio::time::timeout(pause, changed).await;
            }
            None => tokio::time::sleep(pause).await,
        }
    }
}

/// The delivery events (one per recipient and attempt) of message `qid`,
/// or of every message when `qid` is empty.
pub fn deliveries(dir: &std::path::Path, qid: &str) -> Vec<serde_json::Value> {
    events_named(dir, "delivery")
        .into_iter()
        .filter(|e| qid.is_empty() || e["queue_id"] == qid)
        .collect()
}

/// The (to, orig_to) pairs, lower case, of `qid`'s deliveries that were
/// sent (orig_to is `to` when the log has none): what a differential test
/// holds to Postfix's [`postfix::sent_pairs`].
pub fn sent_pairs(
    dir: &std::path::Path,
    qid: &str,
) -> std::collections::BTreeSet<(String, String)> {
    deliveries(dir, qid)
        .iter()
        .filter(|e| e["status"] == "sent")
        .map(|e| {
            let to = e["to"].as_str().unwrap_or_default().to_ascii_lowercase();
            let orig = e["orig_to"]
                .as_str()
                .map_or(to.clone(), str::to_ascii_lowercase);
            (to, orig)
        })
        .collect()
}

/// Writes each (name, text) into `dir` and names it in `cfg`'s
/// `[tables]` as a static file table.
pub fn static_tables(
    cfg: &mut sluice::config::Config,
    dir: &std::path::Path,
    tables: &[(&str, &str)],
) {
    for (name, text) in tables {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let table = format!("kind = \"static\"\npath = {path:?}");
        cfg.tables
            .insert(name.to_string(), toml::from_str(&table).unwrap());
    }
}

/// How many deliveries were sent, in all.
pub fn sent_count(dir: &std::path::Path) -> usize {
    deliveries(dir, "")
        .iter()
        .filter(|e| e["status"] == "sent")
        .count()
}

/// A DKIM key entry for `domain` and `selector` with the key at `key_file`
/// (default headers and expiry).
pub fn dkim_key(
    domain: &str,
    selector: impl Into<String>,
    key_file: std::path::PathBuf,
) -> sluice::config::DkimKeyConfig {
    sluice::config::DkimKeyConfig {
        domain: domain.parse().unwrap(),
        selector: selector.into(),
        key_file,
        headers: None,
        expire_secs: None,
    }
}

/// A configuration file for the command-line clients (sendmail, mailq,
/// `sluice queue`) of the daemon whose data_dir is `data_dir`:
/// `dir/cli.toml`.
pub fn client_config(dir: &std::path::Path, data_dir: &std::path::Path) -> std::path::PathBuf {
    let conf = dir.join("cli.toml");
    std::fs::write(
        &conf,
        format!(
            "hostname = \"mx.test\"\ndata_dir = \"{}\"\n",
            data_dir.display()
        ),
    )
    .unwrap();
    conf
}
