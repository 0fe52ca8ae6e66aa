//! The SMTP server: listeners and the state they share with every session.
//!
//! A listener counts a session before spawning its task; past
//! `max_sessions` the client gets `421 4.3.2` and is closed. Sessions are
//! stopped by the shutdown signal; a session stopped before its `250` was
//! written leaves at worst a message the client will send again. A
//! listener retired by a reload stops accepting and lets its sessions
//! finish.
//!
//! Listeners have a kind (`smtp`, `submission`, `submissions`) and may sit
//! behind a load balancer (PROXY protocol, `proxy.rs`); per-client limits
//! live in `anvil.rs`, TLS in `tls.rs`, AUTH in `auth.rs` (by Dovecot:
//! `sasl.rs`).
//!
//! Trust: peers are anonymous TCP clients; see `session.rs`.

pub mod anvil;
pub mod auth;
pub mod ccert;
mod commands;
mod delegate;
mod hash_pool;
mod password;
pub mod proxy;
mod rcpt;
mod restrictions;
mod sasl;
mod screen;
mod session;
mod srs;
pub mod tls;
mod transaction;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_spool::Spool;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinSet;

pub use session::Session;

use crate::accept::AcceptErrors;
use crate::config::listener::ListenerConfig;
use crate::config::Config;
use crate::log::Event;
use crate::log::Logger;
use crate::routing::mailboxes::VirtualMailboxes;
use crate::routing::policy::RelayPolicy;

/// What every session shares (all read-only but the spool
/// handle and the memory budget, which are safe to share).
/// Tests build one as the daemon does with `SessionContext::for_tests`
/// (`daemon/testing.rs`).
pub struct SessionContext {
    pub config: Arc<Config>,
    pub mailboxes: Arc<VirtualMailboxes>,
    /// The restriction lists (`receive/restrict`).
    pub restrictions: Arc<crate::receive::restrict::Restrictions>,
    /// The DNS checks, when a list needs them (`receive/dnscheck`).
    pub dnscheck: Option<Arc<crate::receive::dnscheck::DnsChecker>>,
    /// Address verification, when a list holds `reject_unverified_*`.
    pub verifier: Option<Arc<crate::deliver::verify::Verifier>>,
    pub spool: Spool,
    pub logger: Logger,
    pub policy: RelayPolicy,
    /// Permits of 1 KiB for bodies being received (see `message_memory_budget_kib`).
    pub body_memory: Arc<Semaphore>,
    /// Per-client limits.
    pub anvil: Arc<anvil::Anvil>,
    /// STARTTLS and `submissions`; None when `[tls]` is disabled.
    pub tls: Option<Arc<tls::ServerTls>>,
    /// AUTH users and password hashes; None when AUTH is not offered.
    pub credentials: Option<Arc<crate::tables::Table>>,
    /// AUTH decided by Dovecot (`[auth] type = "dovecot"`), instead.
    pub dovecot: Option<Arc<crate::receive::sasl_dovecot::DovecotAuth>>,
    /// The one way into the queue (checks, signing, spool).
    pub intake: Arc<crate::intake::Intake>,
    /// `smtpd.policy_service`, if set (`receive/policy.rs`).
    pub policy_service: Option<Arc<crate::receive::policy::PolicyClient>>,
    /// `smtpd.dnsbl_sites`, if any (`receive/dnsbl.rs`).
    pub dnsbl: Option<Arc<crate::receive::dnsbl::Dnsbl>>,
    /// The daemon is stopping behind a balancer: its health checks fail
    /// (`proxy.rs`). One flag for the process, kept across reloads.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
}

/// SMTP sessions open now, in this process (for `/metrics`).
pub fn open_sessions() -> u64 {
    session::OPEN_SESSIONS.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    // A deep backlog: bursts of thousands of connects must not hit SYN retries.
    socket.listen(4096)
}

/// Sessions open over all listeners, checked against `smtpd.max_sessions`
/// as configured at each accept (a reload may change it).
#[derive(Default)]
pub struct SessionCount(AtomicUsize);

/// One open session's place in the [`SessionCount`]; freed when dropped.
pub struct SessionTicket(Arc<SessionCount>);

impl SessionCount {
    fn open(self: &Arc<Self>, limit: usize) -> Option<SessionTicket> {
        if self.0.fetch_add(1, Ordering::AcqRel) >= limit.max(1) {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(SessionTicket(self.clone()))
    }
}

impl Drop for SessionTicket {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a listener's next session starts with: the shared context and
/// the listener's own settings, replaced together by a reload (so no
/// session sees new credentials with old settings, or the reverse).
pub struct Serving {
    pub ctx: Arc<SessionContext>,
    pub listener: Arc<ListenerConfig>,
}

/// What one listener's accept loop works with. What it serves is read at
/// each accept, so a reload applies to the next session; sessions already
/// running keep what they started with.
pub struct Listening {
    pub serving: Arc<ArcSwap<Serving>>,
    pub count: Arc<SessionCount>,
    /// Ends every session (daemon shutdown).
    pub shutdown: watch::Receiver<bool>,
    /// Stops accepting (the listener left the configuration); the sender
    /// given is told once the socket is closed. Its sessions finish.
    pub retire: oneshot::Receiver<oneshot::Sender<()>>,
}

pub async fn accept_loop(listener: TcpListener, mut l: Listening) {
    let mut sessions = JoinSet::new();
    let mut errors = AcceptErrors::new(
        l.serving.load().ctx.logger.clone(),
        "smtpd",
        listener
            .local_addr()
            .map_or_else(|e| e.to_string(), |a| a.to_string()),
    );
    let closed = loop {
        let accepted = tokio::select! {
            _ = l.shutdown.changed() => break None,
            ack = &mut l.retire => break ack.ok(),
            r = listener.accept() => r,
        };
        while sessions.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                errors.accepted();
                start_session(&l, &mut sessions, stream, peer)
            }
            // Out of descriptors and the like: back off, never give up.
            Err(err) => errors.failed(err).await,
        }
    };
    drop(listener);
    if let Some(ack) = closed {
        // Retired: no new sessions; these finish unless the daemon stops.
        let _ = ack.send(());
        loop {
            tokio::select! {
                _ = l.shutdown.changed() => break,
                next = sessions.join_next() => if next.is_none() { return },
            }
        }
    }
    sessions.abort_all();
    while sessions.join_next().await.is_some() {}
}

/// Starts a session for a new connection, or turns it away (421) past
/// `max_sessions`.
fn start_session(
    l: &Listening,
    sessions: &mut JoinSet<()>,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let serving = l.serving.load();
    let ctx = serving.ctx.clone();
    match l.count.open(ctx.config.smtpd.max_sessions) {
        Some(ticket) => {
            let lc = serving.listener.clone();
            let local = stream.local_addr().ok();
            sessions.spawn(async move {
                Session::new(stream, peer, ctx, lc)
                    .with_local(local)
                    .run()
                    .await;
                drop(ticket);
            });
        }
        None => {
            ctx.logger.emit(&Event::SessionsFull {
                client_ip: peer.ip(),
            });
            let hostname = ctx.config.hostname.clone();
            sessions.spawn(async move {
                let msg = format!(
                    "421 4.3.2 {hostname} Service not available: too many concurrent sessions\r\n"
                );
                let _ = stream.write_all(msg.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    }
}
