//! The holder's side of shadow copies: a listener that takes the peers'
//! copies into one spool per origin node and incarnation
//! (`<data_dir>/shadow/<node>@<incarnation>/`, the same group-committed
//! log as the main spool), drops them as their outcomes arrive, and
//! claims them when their origin is gone (`claim.rs`).
//!
//! Trusts: a peer at one of the `peers` addresses that presents a
//! certificate of the cluster's CA (`tls.rs`; every frame is then under
//! TLS) and proves the shared secret, and only as far as storing copies
//! in the area kept for its own name goes: the name in its hello must be
//! the one in its certificate, and not this node's. Every frame is
//! length-checked and limited (`wire.rs`). Connections from any other
//! address are closed unread, logged once per burst.
//! Invariants: a copy is acknowledged only once it is synced; at most
//! `IN_FLIGHT` copies per link are in memory (the link is not read further
//! until one is on disk).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_spool::{Spool, SpoolConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

use super::tls::LinkTls;
use super::wire::{self, WireError};
use super::{lock, random};
use crate::log::Logger;
use crate::log::{Event, Qid};

/// Copies of one link held in memory (read, not yet on disk), at most.
const IN_FLIGHT: usize = 256;
/// Time a peer has for the TLS handshake and its hello (two round trips).
const HELLO_WITHIN: Duration = Duration::from_secs(5);
/// Connections from strangers are logged at most once this often.
const STRANGERS_LOGGED: Duration = Duration::from_secs(60);
/// Links not yet proven, at most; more are closed unread.
const UNPROVEN: usize = 64;
/// A proven link silent this long is dead (origins send a keepalive every
/// 2 s): a peer that lost its power is not waited for.
const SILENT: Duration = Duration::from_secs(10);

/// The copies kept for one incarnation of one origin node.
pub(super) struct Copies {
    pub origin: String,
    pub incarnation: u64,
    pub dir: PathBuf,
    /// `None` while being claimed.
    pub spool: Mutex<Option<Spool>>,
    /// Since when the origin has been counted dead (`None`: alive).
    pub absent_since: Mutex<Option<Instant>>,
    /// Logged that its origin stopped cleanly and is waited for.
    pub waiting: std::sync::atomic::AtomicBool,
    /// Proven links from its origin open now: an origin talking to us is
    /// not claimed, whatever Redis says.
    pub links: AtomicUsize,
}

pub struct Holder {
    pub(super) node: String,
    pub(super) dir: PathBuf,
    secret: String,
    /// A frame may be this long (the largest message and its envelope).
    limit: usize,
    pub(super) spool: SpoolConfig,
    /// By origin and incarnation.
    pub(super) copies: Mutex<HashMap<(String, u64), Arc<Copies>>>,
    /// The incarnation each origin last said hello with.
    pub(super) current: Mutex<HashMap<String, u64>>,
    /// Permits for links not yet proven ([`UNPROVEN`]).
    unproven: Arc<Semaphore>,
    door: Door,
    /// Strangers turned away since the last log line, and when that was.
    strangers: Mutex<(u64, Option<Instant>)>,
    pub(super) logger: Logger,
}

/// Who may open a link: the peers' addresses, with the cluster's TLS.
pub struct Door {
    pub tls: Arc<LinkTls>,
    /// The addresses of `peers` (links come from a peer's `shadow_listen`
    /// address, `client.rs`).
    pub peers: Vec<std::net::IpAddr>,
}

impl Holder {
    /// Opens the copies kept from earlier runs (`<dir>/<node>@<hex>`).
    pub fn open(
        node: &str,
        secret: &str,
        door: Door,
        dir: PathBuf,
        spool: SpoolConfig,
        message_limit: usize,
        logger: Logger,
    ) -> std::io::Result<Arc<Holder>> {
        std::fs::create_dir_all(&dir)?;
        let holder = Arc::new(Holder {
            node: node.to_string(),
            dir: dir.clone(),
            secret: secret.to_string(),
            limit: message_limit + 4 * 1024 * 1024,
            spool,
            copies: Mutex::new(HashMap::new()),
            current: Mutex::new(HashMap::new()),
            unproven: Arc::new(Semaphore::new(UNPROVEN)),
            door,
            strangers: Mutex::new((0, None)),
            logger,
        });
        for entry in std::fs::read_dir(&dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            let Some((origin, inc)) = name.split_once('@') else {
                continue;
            };
            let Ok(inc) = u64::from_str_radix(inc, 16) else {
                continue;
            };
            if let Err(e) = holder.copies_for(origin, inc) {
                holder.logger.emit(&Event::ShadowCopiesUnreadable {
                    area: name.to_string().into(),
                    error: e.to_string().into(),
                });
            }
        }
        Ok(holder)
    }

    /// The copies of one origin incarnation, opened if need be.
    pub(super) fn copies_for(&self, origin: &str, inc: u64) -> std::io::Result<Arc<Copies>> {
        let key = (origin.to_string(), inc);
        if let Some(c) = lock(&self.copies).get(&key) {
            return Ok(c.clone());
        }
        let dir = self.dir.join(format!("{origin}@{inc:016x}"));
        let config = SpoolConfig {
            dir: dir.clone(),
            ..self.spool.clone()
        };
        let (spool, recovered, _) = Spool::open(config).map_err(std::io::Error::other)?;
        if !recovered.is_empty() {
            self.logger.emit(&Event::ShadowHolding {
                origin: origin.to_string().into(),
                incarnation: format!("{inc:016x}").into(),
                copies: recovered.len() as u64,
            });
        }
        let copies = Arc::new(Copies {
            origin: origin.to_string(),
            incarnation: inc,
            dir,
            spool: Mutex::new(Some(spool)),
            absent_since: Mutex::new(None),
            waiting: Default::default(),
            links: AtomicUsize::new(0),
        });
        let mut all = lock(&self.copies);
        Ok(all.entry(key).or_insert(copies).clone())
    }

    /// Takes peers' links until the runtime ends.
    pub fn serve(self: &Arc<Self>, listener: TcpListener) {
        let holder = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                // Not a peer's address: closed unread, so strangers never
                // hold the slots the peers need.
                if !holder.door.peers.contains(&peer.ip().to_canonical()) {
                    holder.stranger(peer);
                    continue;
                }
                // Beyond the cap, closed unread (and unlogged: a flood
                // would only fill the log).
                let Ok(permit) = holder.unproven.clone().try_acquire_owned() else {
                    continue;
                };
                let holder = holder.clone();
                tokio::spawn(async move {
                    if let Err(e) = holder.clone().link(stream, peer, permit).await {
                        holder.logger.emit(&Event::ShadowLinkEnded {
                            peer: peer.to_string().into(),
                            error: e.to_string().into(),
                        });
                    }
                });
            }
        });
    }

    /// A connection from an address not in `peers`: counted, and logged
    /// once per [`STRANGERS_LOGGED`] (a flood does not fill the log).
    fn stranger(&self, peer: SocketAddr) {
        let mut seen = lock(&self.strangers);
        seen.0 += 1;
        if seen.1.is_some_and(|t| t.elapsed() < STRANGERS_LOGGED) {
            return;
        }
        self.logger.emit(&Event::ShadowStrangersRefused {
            links: seen.0,
            last: peer.to_string().into(),
        });
        *seen = (0, Some(Instant::now()));
    }

    async fn link(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(), WireError> {
        let opening = async {
            stream.set_nodelay(true)?;
            let (mut stream, named) = self.door.tls.accept(stream).await?;
            let proven = self.handshake(&mut stream, peer, &named).await?;
            Ok::<_, WireError>((stream, proven))
        };
        let (stream, proven) = tokio::time::timeout(HELLO_WITHIN, opening)
            .await
            .map_err(|_| WireError::Malformed("no TLS handshake and hello in time"))??;
        drop(permit);
        let Some(copies) = proven else {
            return Ok(());
        };
        copies.links.fetch_add(1, Ordering::Relaxed);
        let served = self.take_copies(stream, &copies).await;
        copies.links.fetch_sub(1, Ordering::Relaxed);
        served
    }

    /// Our challenge, the origin's proven hello, our welcome (with our own
    /// proof); the origin's copies, or `None` when it was refused.
    async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
        self: &Arc<Self>,
        stream: &mut S,
        peer: SocketAddr,
        named: &str,
    ) -> Result<Option<Arc<Copies>>, WireError> {
        let nonce: [u8; wire::NONCE] = random();
        let challenge = wire::frame(wire::CHALLENGE, |o| o.extend_from_slice(&nonce));
        stream.write_all(&challenge).await?;
        let hello = match wire::read_frame(stream, wire::SMALL_FRAME).await? {
            (wire::HELLO, payload) => wire::decode_hello(&payload)?,
            _ => return Err(WireError::Malformed("not a hello")),
        };
        let (node, inc) = (hello.node.as_str(), hello.incarnation);
        let fields: [&[u8]; 4] = [&nonce, &hello.nonce, node.as_bytes(), &inc.to_be_bytes()];
        let why = if !wire::mac_ok(&self.secret, b"sluice-shadow-hello", &fields, &hello.mac) {
            Some("bad proof (another shadow_secret?)")
        } else if !crate::config::cluster::node_name_ok(node) {
            Some("bad node name")
        } else if node == self.node {
            Some("that is this node's own name")
        } else if node != named {
            Some("its hello names another node than its certificate")
        } else {
            None
        };
        if let Some(why) = why {
            self.logger.emit(&Event::ShadowLinkRefused {
                peer: peer.to_string().into(),
                reason: why.to_string().into(),
            });
            let refused = wire::frame(wire::REFUSED, |o| o.extend_from_slice(why.as_bytes()));
            stream.write_all(&refused).await?;
            return Ok(None);
        }
        let proof = wire::welcome_mac(&self.secret, &nonce, &hello.nonce, node, inc);
        let holder = self.clone();
        let copies = tokio::task::spawn_blocking(move || holder.welcome(&hello))
            .await
            .map_err(|_| WireError::Malformed("opening the copies' spool panicked"))??;
        stream
            .write_all(&wire::frame(wire::WELCOME, |o| o.extend_from_slice(&proof)))
            .await?;
        Ok(Some(copies))
    }

    /// A proven link: copies stored and acknowledged, outcomes applied,
    /// until it closes or falls silent.
    async fn take_copies<S>(&self, stream: S, copies: &Arc<Copies>) -> Result<(), WireError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut read, write) = tokio::io::split(stream);
        let (acks, rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT * 2);
        tokio::spawn(wire::write_frames(write, rx));
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        loop {
            let frame = tokio::time::timeout(SILENT, wire::read_frame(&mut read, self.limit));
            let (kind, payload) = frame.await.map_err(|_| WireError::Malformed("silent"))??;
            match kind {
                wire::STORE => {
                    let permit = permits.clone().acquire_owned().await.expect("never closed");
                    let copy = wire::decode_store(payload)?;
                    let (copies, acks) = (copies.clone(), acks.clone());
                    tokio::spawn(async move {
                        let spool = lock(&copies.spool).clone();
                        let ok = match spool {
                            Some(s) => s.store(copy.envelope, Arc::new(copy.body)).await.is_ok(),
                            None => false,
                        };
                        let _ = acks.send(wire::ack(copy.seq, ok)).await;
                        drop(permit);
                    });
                }
                wire::OUTCOMES => {
                    let spool = lock(&copies.spool).clone();
                    for o in wire::decode_outcomes(&payload)? {
                        let Some(s) = &spool else { continue };
                        if o.marks != 0 {
                            s.record_marks(o.id, o.marks);
                            self.marked(copies, o.id, o.marks);
                        }
                        if o.complete || !o.recipients.is_empty() {
                            s.record_outcome(o.id, o.recipients, o.complete);
                        }
                    }
                }
                _ => return Err(WireError::Malformed("unexpected frame kind")),
            }
        }
    }

    /// A hold or release of a copy on its origin (an administrator's act,
    /// so rare): said, since a claim would carry it.
    fn marked(&self, copies: &Copies, id: u64, marks: u32) {
        use crate::message::flags::{MARK_HELD, MARK_RELEASED};
        let (held, released) = (marks & MARK_HELD != 0, marks & MARK_RELEASED != 0);
        if held || released {
            self.logger.emit(&Event::CopyMarked {
                origin: copies.origin.as_str().into(),
                queue_id: Qid(id),
                held,
                released,
            });
        }
    }

    /// A proven peer: its copies' area, and a note when it came back as a
    /// new incarnation (it lost its spool: what it had is claimable now).
    fn welcome(&self, hello: &wire::Hello) -> Result<Arc<Copies>, WireError> {
        let before = lock(&self.current).insert(hello.node.clone(), hello.incarnation);
        if before.is_some_and(|b| b != hello.incarnation) {
            self.logger.emit(&Event::ShadowNewIncarnation {
                origin: hello.node.to_string().into(),
                incarnation: format!("{:016x}", hello.incarnation).into(),
            });
        }
        let copies = self.copies_for(&hello.node, hello.incarnation)?;
        *lock(&copies.absent_since) = None;
        Ok(copies)
    }
}
