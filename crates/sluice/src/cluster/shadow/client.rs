//! The origin's side of shadow copies: before a message is acknowledged,
//! a copy goes to one peer and waits for that peer's disk; afterwards the
//! message's outcomes follow, batched, so the peer can drop its copy.
//!
//! Trusts: a peer that proved the shared secret (its acknowledgement says
//! the copy is synced on its disk). Invariants: a copy is reported held
//! only on the peer's acknowledgement; a peer that fails or is slow is set
//! aside for a second and the next one tried, and no wait on a peer lasts
//! longer than `shadow_timeout_ms` (nothing is sent under a lock);
//! outcomes waiting for a peer that is away are bounded (the oldest are
//! dropped, logged once: the copies they would have discarded stay until
//! their origin dies and they are claimed, a duplicate at worst, never a
//! loss); a peer must prove the secret in its welcome before its
//! acknowledgements count.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_spool::Envelope;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::tls::LinkTls;
use super::wire::{self, Outcome, WireError};
use super::{lock, random};
use crate::log::Event;
use crate::log::Logger;

/// Outcomes kept for one peer while it is away, at most.
const BACKLOG: usize = 200_000;
/// Outcomes per frame.
const BATCH: usize = 4096;
/// How often outcomes go out.
const FLUSH: Duration = Duration::from_millis(100);
/// A peer that failed is not tried again for this long, doubled after
/// each failure in a row up to `MAX_BACKOFF`: a peer that swallows
/// packets costs the sessions that try it `shadow_timeout_ms` only now and
/// then, not two times out of three.
const BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ShadowError {
    #[error("no peer took the copy ({0})")]
    NoPeer(String),
}

/// This node's shadowing, shared by every intake.
pub struct Shadow {
    node: String,
    incarnation: u64,
    secret: String,
    /// The link's TLS (the cluster CA's certificates, both ways).
    tls: Arc<LinkTls>,
    /// The address links leave from: `shadow_listen`'s, so a holder
    /// that takes links only from its peers' addresses knows this one.
    source: Option<std::net::IpAddr>,
    timeout: Duration,
    required: bool,
    links: Vec<Link>,
    /// The peer tried first (the last one that took a copy).
    current: AtomicUsize,
    seq: AtomicU64,
    outbox: Mutex<Vec<Outcome>>,
    logger: Logger,
}

struct Link {
    addr: String,
    conn: tokio::sync::Mutex<Option<Conn>>,
    /// The last failure, and how long the peer is set aside after it.
    failed_at: Mutex<Option<(Instant, Duration)>>,
    backlog: Mutex<VecDeque<Outcome>>,
    /// Logged that this peer is away (once until it is back).
    away: AtomicBool,
    /// Logged that outcomes for it were dropped.
    dropped: AtomicBool,
    /// The node its certificate names, once linked.
    node: Mutex<Option<String>>,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<bool>>>>;

struct Conn {
    tx: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    alive: Arc<AtomicBool>,
    /// Its reader and writer, ended with it (a peer that stopped reading
    /// or answering must not keep them, and their frames, forever).
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Shadow {
    pub fn new(
        config: &crate::config::cluster::ClusterConfig,
        node: &str,
        incarnation: u64,
        tls: Arc<LinkTls>,
        logger: Logger,
    ) -> Arc<Shadow> {
        let links = (config.peers.iter())
            .map(|addr| Link::new(addr))
            .collect::<Vec<_>>();
        // Nodes start at different peers, so copies spread.
        let start = node.bytes().map(usize::from).sum::<usize>() % links.len().max(1);
        let shadow = Arc::new(Shadow {
            node: node.to_string(),
            incarnation,
            secret: config.shadow_secret.clone(),
            tls,
            source: (config.shadow_listen)
                .map(|a| a.ip())
                .filter(|ip| !ip.is_unspecified()),
            timeout: Duration::from_millis(config.shadow_timeout_ms),
            required: config.shadow_required,
            links,
            current: AtomicUsize::new(start),
            seq: AtomicU64::new(1),
            outbox: Mutex::new(Vec::new()),
            logger,
        });
        tokio::spawn(flush_outcomes(Arc::downgrade(&shadow)));
        shadow
    }

    /// Whether a message no peer copied is refused (`shadow_required`).
    pub fn required(&self) -> bool {
        self.required
    }

    /// Hands a copy to a peer; returns once one has it on disk.
    pub async fn copy(&self, env: &Envelope, body: &[u8]) -> Result<(), ShadowError> {
        let n = self.links.len();
        let start = self.current.load(Ordering::Relaxed);
        let mut last = String::from("all peers set aside after failures");
        for k in 0..n {
            let i = (start + k) % n;
            let link = &self.links[i];
            if set_aside(link) {
                continue;
            }
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            // Encoded per attempt (usually one): the frame is handed to the
            // link's writer, and a second attempt needs its own seq.
            let frame = wire::store(seq, env, body);
            match tokio::time::timeout(self.timeout, self.send(link, seq, frame)).await {
                Ok(Ok(())) => {
                    *lock(&link.failed_at) = None;
                    if link.away.swap(false, Ordering::Relaxed) {
                        self.logger.emit(&Event::ShadowPeerBack {
                            peer: link.addr.to_string().into(),
                        });
                    }
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(());
                }
                Ok(Err(e)) => last = format!("{}: {e}", link.addr),
                Err(_) => last = format!("{}: no answer in {:?}", link.addr, self.timeout),
            }
            failed(link);
            // Never waited for: the lock may be held by a send to this very
            // peer, stuck (the next one must be tried now).
            if let Ok(mut conn) = link.conn.try_lock() {
                *conn = None;
            }
            if !link.away.swap(true, Ordering::Relaxed) {
                self.logger.emit(&Event::ShadowPeerAway {
                    peer: link.addr.to_string().into(),
                    error: last.to_string().into(),
                });
            }
        }
        Err(ShadowError::NoPeer(last))
    }

    async fn send(&self, link: &Link, seq: u64, frame: Vec<u8>) -> Result<(), WireError> {
        let (tx, rx) = oneshot::channel();
        // The lock covers connecting only, never a send that may wait.
        let (sender, pending) = {
            let mut guard = link.conn.lock().await;
            if !guard
                .as_ref()
                .is_some_and(|c| c.alive.load(Ordering::Relaxed))
            {
                *guard = Some(self.connect(&link.addr).await?);
            }
            let conn = guard.as_ref().expect("just connected");
            (conn.tx.clone(), conn.pending.clone())
        };
        lock(&pending).insert(seq, tx);
        let _unclaimed = Unclaimed(&pending, seq);
        if sender.send(frame).await.is_err() {
            return Err(WireError::Malformed("link closed"));
        }
        match rx.await {
            Ok(true) => Ok(()),
            Ok(false) => Err(WireError::Malformed("peer could not store the copy")),
            Err(_) => Err(WireError::Malformed("link closed before the answer")),
        }
    }

    /// Opens a link: the peer's challenge, our proof, its welcome; then a
    /// task writes frames and another reads acknowledgements.
    async fn connect(&self, addr: &str) -> Result<Conn, WireError> {
        let tcp = connect_from(self.source, addr).await?;
        tcp.set_nodelay(true)?;
        let (mut stream, holder) = self.tls.connect(tcp).await?;
        let (kind, theirs) = wire::read_frame(&mut stream, wire::SMALL_FRAME).await?;
        if kind != wire::CHALLENGE || theirs.len() != wire::NONCE {
            return Err(WireError::Malformed("no challenge"));
        }
        let ours: [u8; wire::NONCE] = random();
        let (node, inc) = (self.node.as_str(), self.incarnation);
        let hello = wire::Hello {
            node: node.to_string(),
            incarnation: inc,
            nonce: ours.to_vec(),
            mac: wire::hello_mac(&self.secret, &theirs, &ours, node, inc),
        };
        stream.write_all(&wire::hello(&hello)).await?;
        let (kind, why) = wire::read_frame(&mut stream, wire::SMALL_FRAME).await?;
        let fields: [&[u8]; 4] = [&theirs, &ours, node.as_bytes(), &inc.to_be_bytes()];
        if kind == wire::WELCOME
            && !wire::mac_ok(&self.secret, b"sluice-shadow-welcome", &fields, &why)
        {
            self.logger.emit(&Event::ShadowPeerUnproven {
                peer: addr.to_string().into(),
            });
            return Err(WireError::Malformed("peer's welcome not proven"));
        }
        if kind != wire::WELCOME {
            let why = String::from_utf8_lossy(&why).into_owned();
            self.logger.emit(&Event::ShadowRefusedByPeer {
                peer: addr.to_string().into(),
                reason: why.to_string().into(),
            });
            return Err(WireError::Malformed("peer refused the hello"));
        }
        if !self.linked_to(addr, &holder) {
            self.logger.emit(&Event::ShadowPeerLinked {
                peer: addr.to_string().into(),
                node: holder.to_string().into(),
            });
        }
        let (mut read, write) = tokio::io::split(stream);
        let (tx, rx) = mpsc::channel::<Vec<u8>>(1024);
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<bool>>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (p, a) = (pending.clone(), alive.clone());
        let reader = tokio::spawn(async move {
            while let Ok((wire::ACK, payload)) =
                wire::read_frame(&mut read, wire::SMALL_FRAME).await
            {
                let Ok((seq, ok)) = wire::decode_ack(&payload) else {
                    break;
                };
                if let Some(tx) = lock(&p).remove(&seq) {
                    let _ = tx.send(ok);
                }
            }
            a.store(false, Ordering::Relaxed);
            lock(&p).clear();
        });
        let a = alive.clone();
        let writer = tokio::spawn(async move {
            wire::write_frames(write, rx).await;
            a.store(false, Ordering::Relaxed);
        });
        Ok(Conn {
            tx,
            pending,
            alive,
            tasks: [reader, writer],
        })
    }

    /// Whether the peer at `addr` was already known as node `name` (it is
    /// logged when first seen or when it changes).
    fn linked_to(&self, addr: &str, name: &str) -> bool {
        let link = self.links.iter().find(|l| l.addr == addr);
        link.is_some_and(|l| {
            let mut known = lock(&l.node);
            let same = known.as_deref() == Some(name);
            *known = Some(name.to_string());
            same
        })
    }

    /// Notes an outcome for the peers (the spool's observer).
    /// With `marks` (bits recorded after the store: held, released), so a
    /// claimed copy is held or released as the origin had it.
    pub fn outcome(&self, id: u64, recipients: &[u16], complete: bool, marks: u32) {
        lock(&self.outbox).push(Outcome {
            id,
            recipients: recipients.to_vec(),
            complete,
            marks,
        });
    }
}

/// Drops a copy's entry from the link's pending answers however its wait
/// ended (answered, timed out, cancelled).
struct Unclaimed<'a>(&'a Pending, u64);

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        lock(self.0).remove(&self.1);
    }
}

impl Link {
    fn new(addr: &str) -> Link {
        Link {
            addr: addr.to_string(),
            conn: tokio::sync::Mutex::new(None),
            failed_at: Mutex::new(None),
            backlog: Mutex::new(VecDeque::new()),
            away: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            node: Mutex::new(None),
        }
    }
}

/// A TCP connection to `addr`, from `source` when one is set.
async fn connect_from(source: Option<std::net::IpAddr>, addr: &str) -> std::io::Result<TcpStream> {
    let Some(ip) = source else {
        return TcpStream::connect(addr).await;
    };
    let mut last = None;
    for target in tokio::net::lookup_host(addr).await? {
        let socket = match target {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        if socket.bind(std::net::SocketAddr::new(ip, 0)).is_err() {
            return TcpStream::connect(target).await;
        }
        match socket.connect(target).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::ErrorKind::NotFound.into()))
}

/// A peer that failed within its backoff is not tried.
fn set_aside(link: &Link) -> bool {
    (lock(&link.failed_at)).is_some_and(|(t, backoff)| t.elapsed() < backoff)
}

/// Sets a peer aside: for `BACKOFF` after a success, twice as long as
/// last time after a failure.
fn failed(link: &Link) {
    let mut at = lock(&link.failed_at);
    let backoff = at.map_or(BACKOFF, |(_, b)| (b * 2).min(MAX_BACKOFF));
    *at = Some((Instant::now(), backoff));
}

/// Every `FLUSH`: the outcomes noted go to every peer (a peer holding no
/// copy of a message ignores them); a peer away keeps them in its backlog.
async fn flush_outcomes(shadow: std::sync::Weak<Shadow>) {
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(FLUSH).await;
        tick += 1;
        // At the first tick, then every 2 s, a link with nothing to say says
        // so: at start a node back without its spool tells its peers at
        // once (its hello), and a holder takes a link silent for 10 s as
        // dead (its origin may have lost power).
        let keepalive = tick % 20 == 1;
        let Some(shadow) = shadow.upgrade() else {
            return;
        };
        let fresh = std::mem::take(&mut *lock(&shadow.outbox));
        for link in &shadow.links {
            let frames = {
                let mut backlog = lock(&link.backlog);
                backlog.extend(fresh.iter().cloned());
                let over = backlog.len().saturating_sub(BACKLOG);
                if over > 0 {
                    backlog.drain(..over);
                    if !link.dropped.swap(true, Ordering::Relaxed) {
                        shadow.logger.emit(&Event::ShadowOutcomesDropped {
                            peer: link.addr.to_string().into(),
                            kept: BACKLOG as u64,
                        });
                    }
                }
                if (backlog.is_empty() && !keepalive) || set_aside(link) {
                    continue;
                }
                match backlog.is_empty() {
                    true => vec![wire::outcomes(&[])],
                    false => {
                        let all = backlog.make_contiguous();
                        let some = &all[..all.len().min(BATCH * 8)];
                        some.chunks(BATCH).map(wire::outcomes).collect::<Vec<_>>()
                    }
                }
            };
            let sent = frames.len();
            if send_all(&shadow, link, frames).await {
                let mut backlog = lock(&link.backlog);
                let n = backlog.len().min(sent * BATCH);
                backlog.drain(..n);
            }
        }
    }
}

/// Sends frames on a peer's link, connecting if it is not set aside.
async fn send_all(shadow: &Shadow, link: &Link, frames: Vec<Vec<u8>>) -> bool {
    let mut guard = link.conn.lock().await;
    if !guard
        .as_ref()
        .is_some_and(|c| c.alive.load(Ordering::Relaxed))
    {
        match tokio::time::timeout(shadow.timeout, shadow.connect(&link.addr)).await {
            Ok(Ok(conn)) => *guard = Some(conn),
            _ => {
                failed(link);
                return false;
            }
        }
    }
    let conn = guard.as_ref().expect("connected");
    // Never waits: a peer that stopped reading keeps its backlog instead.
    for frame in frames {
        if conn.tx.try_send(frame).is_err() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "holder" with a certificate of the cluster's CA (`tls`) that
    /// does not know the secret: it challenges, then welcomes anything and
    /// acknowledges every copy.
    async fn impostor(tls: Arc<LinkTls>) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tls = tls.clone();
                tokio::spawn(async move {
                    let (mut s, _) = tls.accept(tcp).await?;
                    let challenge = wire::frame(wire::CHALLENGE, |o| o.extend_from_slice(&[1; 32]));
                    s.write_all(&challenge).await?;
                    wire::read_frame(&mut s, wire::SMALL_FRAME).await.ok();
                    let welcome = wire::frame(wire::WELCOME, |o| o.extend_from_slice(&[0; 32]));
                    s.write_all(&welcome).await?;
                    while let Ok((kind, p)) = wire::read_frame(&mut s, 1 << 20).await {
                        if kind == wire::STORE {
                            let seq = u64::from_be_bytes(p[..8].try_into().unwrap());
                            s.write_all(&wire::ack(seq, true)).await?;
                        }
                    }
                    Ok::<_, std::io::Error>(())
                });
            }
        });
        addr
    }

    #[test]
    fn a_peer_failing_again_and_again_is_set_aside_longer_each_time() {
        let link = Link::new("192.0.2.1:2526");
        assert!(!set_aside(&link));
        let mut seen = Vec::new();
        for _ in 0..7 {
            failed(&link);
            assert!(set_aside(&link));
            seen.push(lock(&link.failed_at).unwrap().1.as_secs());
        }
        assert_eq!(seen, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[tokio::test]
    async fn a_peer_that_cannot_prove_the_secret_gets_no_copy() {
        let ca = crate::cluster::shadow::pki::new_ca().unwrap();
        let addr = impostor(super::super::tls::for_test(&ca, "n2")).await;
        let config: crate::config::cluster::ClusterConfig = toml::from_str(&format!(
            "redis_url = \"redis://127.0.0.1:9/\"\nshadow = true\n\
             shadow_secret = \"0123456789abcdef\"\nshadow_timeout_ms = 2000\npeers = [\"{addr}\"]"
        ))
        .unwrap();
        let tls = super::super::tls::for_test(&ca, "n1");
        let shadow = Shadow::new(&config, "n1", 1, tls, Logger::disabled());
        let env = Envelope {
            id: 1,
            recipients: vec!["b@example.net".into()],
            ..Envelope::default()
        };
        // Its acknowledgement would count without the welcome's proof.
        assert!(shadow.copy(&env, b"body\r\n").await.is_err());
    }
}
