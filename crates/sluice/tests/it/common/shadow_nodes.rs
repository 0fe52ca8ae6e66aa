//! Nodes of a shadow-copy cluster for the tests (`tests/it/shadow*.rs`):
//! `sluice serve` processes in network namespaces of their own
//! (`netns.rs`), a real redis-server, certificates of a cluster CA made
//! as `sluice cluster-ca` and `cluster-cert` make them, and the raw SMTP
//! client and sink helpers those tests share.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::Duration;

use sluice_bench::sink::{Sink, SinkOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::netns::Lan;
use super::redis::Redis;
use super::*;

pub const SECRET: &str = "test-shadow-secret-0123";

/// How a test sets its nodes up.
pub struct Setup {
    /// The next hop (the sink's address).
    pub hop: SocketAddr,
    /// Behind the balancer (a PROXY listener) or reached directly.
    pub proxied: bool,
    pub claim_secs: u64,
    pub required: bool,
    /// Every node's only peer is this address (a relay), not the others.
    pub relay: Option<std::net::IpAddr>,
}

/// Node `i`'s configuration: a listener on its own address (taking PROXY
/// headers from the lan's balancer when `proxied`), the sink as relayhost,
/// shadow copies to the other nodes (or to `relay`).
pub fn node_config(
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
pub fn node_pki(dir: &std::path::Path, name: &str) -> [std::path::PathBuf; 3] {
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

pub fn spawn_node(lan: &Lan, i: usize, config: &std::path::Path) -> Child {
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
pub async fn send_one(lan: &Lan, to: SocketAddr, subject: &str) -> Result<(), String> {
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

pub async fn read_reply(
    s: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> Result<String, String> {
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
/// How many copies of node `origin` the node logging to `dir` claimed
/// (its `shadow_claimed` events).
pub fn claimed_from(dir: &std::path::Path, origin: &str) -> usize {
    count_logged(
        dir,
        |e| matches!(e, Event::ShadowClaimed { origin: o, .. } if o == origin),
    )
}

pub fn received(sink: &Sink) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for m in sink.messages() {
        let text = String::from_utf8_lossy(&m.body);
        if let Some(subject) = text.lines().find_map(|l| l.strip_prefix("Subject: ")) {
            *seen.entry(subject.to_string()).or_insert(0) += 1;
        }
    }
    seen
}

pub struct Nodes(pub Vec<Option<Child>>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.0.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Two nodes reached directly (no balancer), relaying to a next hop that
/// is down (bound, not listening) until [`Pair::hop_back`]. Fields drop in
/// order: the nodes are stopped before their namespaces go.
pub struct Pair {
    pub nodes: Nodes,
    pub configs: Vec<std::path::PathBuf>,
    pub held: Option<tokio::net::TcpSocket>,
    pub _redis: Redis,
    pub lan: Lan,
    pub dir: TestDir,
}

impl Pair {
    pub fn start(name: &str, claim_secs: u64) -> Pair {
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
    pub async fn send_to_n1(&self, tag: &str, n: usize) {
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
    pub fn restart_n1(&mut self) {
        self.nodes.0[0] = Some(spawn_node(&self.lan, 0, &self.configs[0]));
    }

    pub fn log(&self, node: &str) -> String {
        read_log(&self.dir.join(node))
    }

    /// How many copies of `origin` `node` claimed ([`claimed_from`]).
    pub fn claimed(&self, node: &str, origin: &str) -> usize {
        claimed_from(&self.dir.join(node), origin)
    }

    /// Whether `node` logged an event that satisfies `pred`.
    pub fn said(&self, node: &str, pred: impl Fn(&Event) -> bool) -> bool {
        any_logged(&self.dir.join(node), pred)
    }

    /// The next hop comes back: waits until `<tag>-0..n` have arrived,
    /// each exactly once.
    pub async fn hop_back_and_receive_once(&mut self, tag: &str, n: usize, secs: u64) {
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
