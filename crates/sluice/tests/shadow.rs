//! Shadow copies (issue 23): three `sluice serve` processes, each in a
//! network namespace of its own, behind a real HAProxy, sharing a real
//! redis-server. A node SIGKILLed mid-load with its spool deleted loses no
//! acknowledged message: its peers claim their copies and deliver them;
//! new sessions flow through the other nodes within 10 s.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::haproxy::Balancer;
use common::netns::Lan;
use common::redis::Redis;
use common::*;
use sluice_bench::sink::{Sink, SinkOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "test-shadow-secret-0123";

/// Node `i`'s configuration: a PROXY listener on its own address taking
/// headers from the lan's balancer, the sink as relayhost, shadow copies
/// to the other nodes.
/// How a test sets its nodes up.
struct Setup {
    /// The next hop (the sink's address).
    hop: SocketAddr,
    /// Behind the balancer (a PROXY listener) or reached directly.
    proxied: bool,
    claim_secs: u64,
    required: bool,
    /// Every node's only peer is this address (a relay), not the others.
    relay: Option<std::net::IpAddr>,
}

fn node_config(
    dir: &std::path::Path,
    lan: &Lan,
    i: usize,
    redis: &Redis,
    setup: &Setup,
) -> std::path::PathBuf {
    let me = lan.node_ip(i);
    let peers: Vec<String> = match setup.relay {
        Some(relay) => vec![format!("\"{relay}:2526\"")],
        None => (0..lan.nodes.len())
            .filter(|&j| j != i)
            .map(|j| format!("\"{}:2526\"", lan.node_ip(j)))
            .collect(),
    };
    let pki = node_pki(dir, &format!("n{}", i + 1));
    let dir = dir.join(format!("n{}", i + 1));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            r#"hostname = "n{n}.test"
data_dir = "{data}"
run_as_root = true
log_file = "{log}"
log_format = "json"
[smtpd]
listen = []
mynetworks = ["{hub}/32"]
[[smtpd.listeners]]
listen = "{me}:25"
kind = "smtp"
proxy_protocol = {proxied}
proxy_protocol_from = ["{hub}/32"]
[queue]
minimal_backoff_secs = 1
maximal_backoff_secs = 1
[delivery]
relayhost = "smtp:[{sink_ip}]:{sink_port}"
default_concurrency = 2
initial_concurrency = 2
dead_host_secs = 1
[dns]
nameservers = ["127.0.0.1:9"]
timeout_ms = 300
attempts = 1
[cluster]
node = "n{n}"
redis_url = "{redis}"
heartbeat_ms = 200
node_dead_secs = 2
lease_secs = 2
shadow = true
shadow_listen = "{me}:2526"
shadow_secret = "{SECRET}"
shadow_ca = "{ca}"
shadow_cert = "{cert}"
shadow_key = "{key}"
shadow_claim_secs = {claim_secs}
shadow_required = {required}
peers = [{peers}]
"#,
            n = i + 1,
            data = dir.join("var").display(),
            log = dir.join("maillog").display(),
            hub = lan.hub(),
            sink_ip = setup.hop.ip(),
            sink_port = setup.hop.port(),
            proxied = setup.proxied,
            claim_secs = setup.claim_secs,
            required = setup.required,
            redis = redis.url(),
            peers = peers.join(", "),
            ca = pki[0].display(),
            cert = pki[1].display(),
            key = pki[2].display(),
        ),
    )
    .unwrap();
    path
}

/// The cluster CA (made once per test directory) and node `name`'s
/// certificate and key, as `sluice cluster-ca` and `cluster-cert` make
/// them: [ca.pem, name.pem, name.key].
fn node_pki(dir: &std::path::Path, name: &str) -> [std::path::PathBuf; 3] {
    use sluice::tools::cluster_pki::{make_ca, make_node};
    let pki = dir.join("pki");
    if !pki.join("ca.pem").exists() {
        make_ca(&pki).unwrap();
    }
    if !pki.join(format!("{name}.pem")).exists() {
        make_node(&pki, name, &pki).unwrap();
    }
    [
        pki.join("ca.pem"),
        pki.join(format!("{name}.pem")),
        pki.join(format!("{name}.key")),
    ]
}

fn spawn_node(lan: &Lan, i: usize, config: &std::path::Path) -> Child {
    let stderr = std::fs::File::create(config.with_file_name("daemon.stderr")).unwrap();
    Lan::command(&lan.nodes[i], env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// One message through the balancer; `Ok` only on the final `250`. Any
/// error (a node dying mid-session) is an `Err`: the client tries again.
async fn send_one(lan: &Lan, to: SocketAddr, subject: &str) -> Result<(), String> {
    let socket = lan.socket(SocketAddr::new(lan.hub(), 0));
    let talk = async {
        let mut s = socket.connect(to).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let script = [
            (None, "220"),
            (Some("EHLO client.test\r\n".to_string()), "250"),
            (Some("MAIL FROM:<a@b.test>\r\n".into()), "250"),
            (Some("RCPT TO:<x@dest.test>\r\n".into()), "250"),
            (Some("DATA\r\n".into()), "354"),
            (Some(format!("{}.\r\n", body(subject))), "250"),
        ];
        for (line, want) in script {
            if let Some(line) = line {
                s.write_all(line.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let reply = read_reply(&mut s, &mut buf).await?;
            if !reply.starts_with(want) {
                return Err(reply);
            }
        }
        let _ = s.write_all(b"QUIT\r\n").await;
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(10), talk)
        .await
        .map_err(|_| "timed out".to_string())?
}

async fn read_reply(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Result<String, String> {
    loop {
        if let Some(reply) = take_reply(buf) {
            return Ok(reply);
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Subjects the sink received, with their counts.
fn received(sink: &Sink) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for m in sink.messages() {
        let text = String::from_utf8_lossy(&m.body);
        if let Some(subject) = text.lines().find_map(|l| l.strip_prefix("Subject: ")) {
            *seen.entry(subject.to_string()).or_insert(0) += 1;
        }
    }
    seen
}

struct Nodes(Vec<Option<Child>>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.0.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_with_its_spool_loses_no_acknowledged_message() {
    let dir = temp_dir("shadow-kill");
    let lan = Lan::create(3);
    let redis = Redis::start(&dir);
    // A next hop slow enough that mail waits in each node's queue.
    let sink = Sink::start_on(
        lan.socket(SocketAddr::new(lan.hub(), 0)),
        SinkOptions {
            record: true,
            reply_delay: Some(Duration::from_millis(20)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let setup = Setup {
        hop: sink.addr,
        proxied: true,
        claim_secs: 1,
        required: false,
        relay: None,
    };
    let configs: Vec<_> = (0..3)
        .map(|i| node_config(&dir, &lan, i, &redis, &setup))
        .collect();
    let mut nodes = Nodes(
        (0..3)
            .map(|i| Some(spawn_node(&lan, i, &configs[i])))
            .collect(),
    );
    let backends: Vec<(String, SocketAddr)> = (0..3)
        .map(|i| (format!("n{}", i + 1), SocketAddr::new(lan.node_ip(i), 25)))
        .collect();
    let named: Vec<(&str, SocketAddr)> = backends.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    let lb = Balancer::start_in(Some(&lan), &dir, &named);
    // Every node answers through the balancer before the load starts.
    let ready = async {
        while send_one(&lan, lb.front, "warm-up").await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("cluster up");

    const TOTAL: usize = 600;
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let lan = Arc::new(lan);
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let first_after_kill: Arc<Mutex<Option<Instant>>> = Arc::default();
    let mut senders = tokio::task::JoinSet::new();
    for w in 0..6 {
        let (lan, acked, front) = (lan.clone(), acked.clone(), lb.front);
        let (killed, first) = (killed_at.clone(), first_after_kill.clone());
        senders.spawn(async move {
            for k in (w..TOTAL).step_by(6) {
                let subject = format!("m-{k}");
                for _attempt in 0..20 {
                    if send_one(&lan, front, &subject).await.is_ok() {
                        acked.lock().unwrap().push(subject.clone());
                        if killed.lock().unwrap().is_some() {
                            first.lock().unwrap().get_or_insert_with(Instant::now);
                        }
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    // Mid-load: node 1 dies with its disk.
    let third = || acked.lock().unwrap().len() >= TOTAL / 3;
    assert!(wait_until(60, third).await, "load did not start");
    let mut n1 = nodes.0[0].take().unwrap();
    n1.kill().unwrap();
    n1.wait().unwrap();
    *killed_at.lock().unwrap() = Some(Instant::now());
    let acked_before = acked.lock().unwrap().len();
    std::fs::remove_dir_all(dir.join("n1/var/spool")).unwrap();
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }
    let acked: Vec<String> = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= TOTAL * 95 / 100,
        "only {} of {TOTAL} acknowledged",
        acked.len()
    );
    let resumed = first_after_kill.lock().unwrap().unwrap() - killed_at.lock().unwrap().unwrap();
    assert!(
        resumed < Duration::from_secs(10),
        "flow resumed {resumed:?} after the kill"
    );

    // Every acknowledged message arrives, those node 1 held included.
    let all_in = || {
        let seen = received(&sink);
        acked.iter().all(|s| seen.contains_key(s))
    };
    let arrived = wait_until(120, all_in).await;
    let seen = received(&sink);
    let missing: Vec<&String> = acked.iter().filter(|s| !seen.contains_key(*s)).collect();
    assert!(
        arrived,
        "{} acknowledged messages lost: {:?}\n{}",
        missing.len(),
        &missing[..missing.len().min(20)],
        read_log(&dir.join("n2"))
    );
    let claimed: usize = ["n2", "n3"]
        .iter()
        .map(|n| {
            read_log(&dir.join(n))
                .matches("claimed from node n1")
                .count()
        })
        .sum();
    assert!(
        claimed > 0,
        "nothing claimed from n1; the test did not test the copies"
    );
    let dups: usize = seen.values().map(|c| c - 1).sum();
    eprintln!("acked {} ({} before the kill), claimed {claimed}, duplicates {dups}, resumed after {resumed:?}", acked.len(), acked_before);
    assert!(
        dups * 100 <= acked.len(),
        "{dups} duplicates of {} messages",
        acked.len()
    );
}

/// A raw TCP connection to a holder from `from` (inside the lan): what it
/// reads before the holder closes it (empty: closed unread).
async fn stranger_reads(lan: &Lan, from: std::net::IpAddr, holder: SocketAddr) -> Vec<u8> {
    let socket = lan.socket(SocketAddr::new(from, 0));
    let mut s = socket.connect(holder).await.unwrap();
    let _ = s.write_all(&[0xff, 0xff, 0xff, 0xf0, 1]).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the holder kept a stranger's connection open");
    got
}

/// Two nodes reached directly (no balancer), relaying to a next hop that
/// is down (bound, not listening) until [`Pair::hop_back`]. Fields drop in
/// order: the nodes are stopped before their namespaces go.
struct Pair {
    nodes: Nodes,
    configs: Vec<std::path::PathBuf>,
    held: Option<tokio::net::TcpSocket>,
    _redis: Redis,
    lan: Lan,
    dir: TestDir,
}

impl Pair {
    fn start(name: &str, claim_secs: u64) -> Pair {
        let dir = temp_dir(name);
        let lan = Lan::create(2);
        let redis = Redis::start(&dir);
        let held = lan.socket(SocketAddr::new(lan.hub(), 0));
        let setup = Setup {
            hop: held.local_addr().unwrap(),
            proxied: false,
            claim_secs,
            required: true,
            relay: None,
        };
        let configs: Vec<_> = (0..2)
            .map(|i| node_config(&dir, &lan, i, &redis, &setup))
            .collect();
        let nodes = Nodes(
            (0..2)
                .map(|i| Some(spawn_node(&lan, i, &configs[i])))
                .collect(),
        );
        Pair {
            nodes,
            configs,
            held: Some(held),
            _redis: redis,
            lan,
            dir,
        }
    }

    /// `n` messages to n1, subjects `<tag>-0`..: the first once n1 is up,
    /// every one acknowledged.
    async fn send_to_n1(&self, tag: &str, n: usize) {
        let n1 = SocketAddr::new(self.lan.node_ip(0), 25);
        let first = format!("{tag}-0");
        let up = async {
            while send_one(&self.lan, n1, &first).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), up)
            .await
            .expect("n1 up");
        for k in 1..n {
            let sent = send_one(&self.lan, n1, &format!("{tag}-{k}")).await;
            assert!(sent.is_ok(), "{tag}-{k}: {sent:?}");
        }
    }

    /// n1 started again on its configuration.
    fn restart_n1(&mut self) {
        self.nodes.0[0] = Some(spawn_node(&self.lan, 0, &self.configs[0]));
    }

    fn log(&self, node: &str) -> String {
        read_log(&self.dir.join(node))
    }

    /// The next hop comes back: waits until `<tag>-0..n` have arrived,
    /// each exactly once.
    async fn hop_back_and_receive_once(&mut self, tag: &str, n: usize, secs: u64) {
        let held = self.held.take().expect("the hop comes back once");
        let opts = SinkOptions {
            record: true,
            ..Default::default()
        };
        let sink = Sink::start_on(held, opts).await.unwrap();
        let all = || received(&sink).len() >= n;
        assert!(wait_until(secs, all).await, "{:?}", received(&sink));
        let seen = received(&sink);
        for k in 0..n {
            assert_eq!(seen.get(&format!("{tag}-{k}")), Some(&1), "{seen:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_without_its_spool_has_its_copies_delivered_by_its_peer() {
    // Claims far beyond the test: only the new incarnation can set one off.
    let mut pair = Pair::start("shadow-incarnation", 600);
    pair.send_to_n1("s", 10).await;
    let (lan, dir) = (&pair.lan, &pair.dir);

    // A stranger (the lan's own address, not in n2's peers) gets nothing
    // from n2's holder: closed unread, whatever it sends; logged once.
    let holder = SocketAddr::new(lan.node_ip(1), 2526);
    for _ in 0..3 {
        assert!(stranger_reads(lan, lan.hub(), holder).await.is_empty());
    }
    let refusals = || {
        pair.log("n2")
            .matches("from addresses not in peers")
            .count()
    };
    assert!(
        wait_until(5, || refusals() >= 1).await,
        "{}",
        pair.log("n2")
    );
    assert_eq!(refusals(), 1, "one line per burst: {}", pair.log("n2"));
    let areas: Vec<String> = std::fs::read_dir(dir.join("n2/var/shadow"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(areas.len(), 1, "only n1's real copies: {areas:?}");
    assert!(areas[0].starts_with("n1@"), "{areas:?}");

    // n1 dies with its spool and comes back empty.
    let mut first = pair.nodes.0[0].take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    std::fs::remove_dir_all(pair.dir.join("n1/var/spool")).unwrap();
    pair.restart_n1();
    let claimed = || pair.log("n2").matches("claimed from node n1").count() >= 10;
    assert!(wait_until(30, claimed).await, "{}", pair.log("n2"));
    assert!(pair.log("n2").contains("new incarnation"));

    // The next hop is back: each message arrives once, from n2.
    pair.hop_back_and_receive_once("s", 10, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_cleanly_is_waited_for_not_claimed() {
    let mut pair = Pair::start("shadow-away", 1);
    pair.send_to_n1("a", 5).await;

    // A clean stop (SIGTERM), its spool kept: n2 sees it gone, and waits.
    let mut first = pair.nodes.0[0].take().unwrap();
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    first.wait().unwrap();
    let waits = || pair.log("n2").contains("node n1 stopped cleanly");
    assert!(wait_until(30, waits).await, "{}", pair.log("n2"));
    assert!(!pair.log("n2").contains("claimed from node n1"));

    // Back with its spool, n1 delivers its own mail, once.
    pair.restart_n1();
    pair.hop_back_and_receive_once("a", 5, 60).await;
    assert!(!pair.log("n2").contains("claimed from node n1"));
}

/// A relay the two links pass through, in the third namespace (the
/// address the nodes know as their peer: an attacker who took it over).
/// It forwards both ways; once `inject` is set, it writes a STORE (a
/// forged message), an ACK and an OUTCOMES frame into each direction of
/// every link. Returns how many injections it made.
async fn relay(
    lan: &Lan,
    to: SocketAddr,
    inject: Arc<std::sync::atomic::AtomicBool>,
) -> Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ns = lan.nodes[2].clone();
    let (me, origin) = (lan.node_ip(2), lan.node_ip(0));
    let listener = Lan::within(&ns, || {
        let l = std::net::TcpListener::bind(SocketAddr::new(me, 2526)).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    });
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let injected = Arc::new(AtomicUsize::new(0));
    let count = injected.clone();
    let forged = sluice::cluster::shadow::forged_frames(
        "ceo@victim.test",
        "victim@elsewhere.test",
        b"From: CEO <ceo@victim.test>\r\nSubject: injected\r\n\r\npay now\r\n",
    );
    let forged = Arc::new(forged);
    tokio::spawn(async move {
        while let Ok((inbound, from)) = listener.accept().await {
            // Only n1's links (n2's own, to itself through here, are not
            // the link under attack).
            if from.ip() != origin {
                continue;
            }
            let socket = Lan::within(&ns, || tokio::net::TcpSocket::new_v4().unwrap());
            let Ok(outbound) = socket.connect(to).await else {
                continue;
            };
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            for (r, w) in [(ri, wo), (ro, wi)].map(|(r, w)| {
                (
                    Box::new(r) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
                    Box::new(w) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                )
            }) {
                let (inject, count, forged) = (inject.clone(), count.clone(), forged.clone());
                tokio::spawn(async move {
                    let (mut r, mut w) = (r, w);
                    let mut buf = vec![0u8; 65536];
                    let mut done = false;
                    while let Ok(n) = r.read(&mut buf).await {
                        if n == 0 || w.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        if !done && inject.load(Ordering::Relaxed) {
                            done = true;
                            count.fetch_add(1, Ordering::Relaxed);
                            if w.write_all(&forged).await.is_err() {
                                break;
                            }
                        }
                    }
                });
            }
        }
    });
    injected
}

/// H2 of the 2026-11-27 review: a host that took over the peer's address
/// relays the link, and injects a STORE, an ACK and an OUTCOMES frame.
/// Through an honest relay copies flow (TLS end to end, the relay sees
/// nothing); once it injects, every frame is refused with the link (TLS
/// records it cannot make), no `250` is given without a real copy
/// (`shadow_required`: 451), and when n1 dies, n2 delivers the real copy
/// once and never the forged message (before, with the HMAC proof of the
/// handshake only: the forged copy was claimed and delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_the_shadow_link_cannot_inject_frames() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = temp_dir("shadow-relay");
    let lan = Lan::create(3);
    let redis = Redis::start(&dir);
    let held = lan.socket(SocketAddr::new(lan.hub(), 0));
    let setup = Setup {
        hop: held.local_addr().unwrap(),
        proxied: false,
        claim_secs: 1,
        required: true,
        relay: Some(lan.node_ip(2)),
    };
    let configs: Vec<_> = (0..2)
        .map(|i| node_config(&dir, &lan, i, &redis, &setup))
        .collect();
    let inject = Arc::new(AtomicBool::new(false));
    let injected = relay(&lan, SocketAddr::new(lan.node_ip(1), 2526), inject.clone()).await;
    let mut nodes = Nodes(
        (0..2)
            .map(|i| Some(spawn_node(&lan, i, &configs[i])))
            .collect(),
    );
    let n1 = SocketAddr::new(lan.node_ip(0), 25);
    let up = async {
        while send_one(&lan, n1, "real-0").await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), up)
        .await
        .expect("n1 up, its copy on n2 through the relay");
    inject.store(true, Ordering::Relaxed);
    // The live link carries keepalives both ways within 2 s: the relay
    // injects into each direction then.
    let broken = || injected.load(Ordering::Relaxed) >= 2;
    assert!(
        wait_until(15, broken).await,
        "nothing went through the relay"
    );
    let refused = send_one(&lan, n1, "real-1").await;
    assert!(
        refused.as_ref().is_err_and(|r| r.starts_with("451")),
        "a 250 without a real copy: {refused:?}"
    );
    let n2_log = read_log(&dir.join("n2"));
    assert!(n2_log.contains("link from"), "{n2_log}");
    // n1 dies: n2 claims what it really holds.
    let mut first = nodes.0[0].take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let claimed = || read_log(&dir.join("n2")).contains("claimed from node n1");
    assert!(
        wait_until(30, claimed).await,
        "{}",
        read_log(&dir.join("n2"))
    );
    let sink = Sink::start_on(
        held,
        SinkOptions {
            record: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(wait_until(30, || received(&sink).contains_key("real-0")).await);
    let seen = received(&sink);
    assert_eq!(seen.get("real-0"), Some(&1), "{seen:?}");
    assert!(
        !seen.contains_key("injected") && !seen.contains_key("real-1"),
        "{seen:?}"
    );
    drop(nodes);
}

/// `sluice queue` against a node's configuration: its JSON answer.
fn queue_json(config: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("queue")
        .arg("--json")
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// L4 of the 2026-11-27 review: a message an administrator held on its
/// origin stays held when its peer claims the copy (before: the claim
/// delivered it), and the other one is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_message_stays_held_when_its_copy_is_claimed() {
    let mut pair = Pair::start("shadow-hold", 1);
    pair.send_to_n1("h", 2).await;
    let listed = queue_json(&pair.configs[0], &["list"]);
    let ids: Vec<String> = listed["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    let held = queue_json(&pair.configs[0], &["hold", &ids[0]]);
    assert_eq!(held["count"], 1, "{held}");
    // The hold reaches n2 with the outcomes (every 100 ms).
    let n2_log = pair.dir.join("n2/maillog");
    let marked = || {
        events_in(&n2_log)
            .iter()
            .any(|e| e["event"] == "copy_marked" && e["held"] == true)
    };
    assert!(wait_until(10, marked).await, "{}", pair.log("n2"));
    // n1 dies; n2 claims both copies.
    let mut first = pair.nodes.0[0].take().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let claimed = || pair.log("n2").matches("claimed from node n1").count() >= 2;
    assert!(wait_until(30, claimed).await, "{}", pair.log("n2"));
    let on_hold = queue_json(&pair.configs[1], &["list", "--state", "hold"]);
    assert_eq!(
        on_hold["messages"].as_array().map(Vec::len),
        Some(1),
        "the held message is not held on n2: {on_hold}"
    );
    // The next hop comes back: one of the two arrives, the held one waits.
    let held = pair.held.take().unwrap();
    let sink = Sink::start_on(
        held,
        SinkOptions {
            record: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        wait_until(30, || sink.count() == 1).await,
        "{}",
        pair.log("n2")
    );
    let on_hold = queue_json(&pair.configs[1], &["list", "--state", "hold"]);
    assert_eq!(
        on_hold["messages"].as_array().map(Vec::len),
        Some(1),
        "{on_hold}"
    );
}
