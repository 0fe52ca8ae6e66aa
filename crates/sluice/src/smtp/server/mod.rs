//! The SMTP server: listeners and the state they share with every session.
//!
//! A listener takes a session permit before spawning a session task; past
//! `max_sessions` the client gets `421 4.3.2` and is closed. Sessions are
//! stopped by the shutdown signal; a session stopped before its `250` was
//! written leaves at worst a message the client will send again.
//!
//! Listeners have a kind (`smtp`, `submission`, `submissions`) and may sit
//! behind a load balancer (PROXY protocol, `proxy.rs`); per-client limits
//! live in `anvil.rs`, TLS in `tls.rs`, AUTH in `auth.rs`.
//!
//! Trust: peers are anonymous TCP clients; see `session.rs`.

pub mod anvil;
pub mod auth;
mod commands;
pub mod dkim;
pub mod proxy;
pub mod sender_auth;
mod session;
pub mod tls;
mod transaction;

use std::net::SocketAddr;
use std::sync::Arc;

use sluice_spool::Spool;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

pub use session::Session;

use crate::config::listener::ListenerConfig;
use crate::config::Config;
use crate::log;
use crate::log::Logger;
use crate::queue::QueueHandle;
use crate::routing::mailboxes::VirtualMailboxes;
use crate::routing::policy::RelayPolicy;

/// What every session shares (all read-only but the spool, the queue
/// handle and the memory budget, which are safe to share).
pub struct SessionContext {
    pub config: Arc<Config>,
    pub mailboxes: Arc<VirtualMailboxes>,
    pub spool: Spool,
    pub logger: Logger,
    pub policy: RelayPolicy,
    pub queue: QueueHandle,
    /// Permits of 1 KiB for bodies being received (see `message_memory_budget_kib`).
    pub body_memory: Arc<Semaphore>,
    /// Per-client limits.
    pub anvil: Arc<anvil::Anvil>,
    /// STARTTLS and `submissions`; None when `[tls]` is disabled.
    pub tls: Option<Arc<tls::ServerTls>>,
    /// AUTH users and password hashes; None when AUTH is not offered.
    pub credentials: Option<Arc<crate::tables::Table>>,
    /// DKIM keys for mail from clients that may relay.
    pub dkim: Arc<dkim::Signers>,
    /// SPF/DKIM/DMARC checks, when a listener asks for them.
    pub sender_auth: Option<Arc<sender_auth::SenderAuth>>,
}

pub fn bind(listen: &str, reuse_port: bool) -> std::io::Result<TcpListener> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"))?;
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

pub async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<SessionContext>,
    listener_config: Arc<ListenerConfig>,
    permits: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut sessions = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            r = listener.accept() => r,
        };
        while sessions.try_join_next().is_some() {}
        let (mut stream, peer) = match accepted {
            Ok(x) => x,
            Err(err) => {
                // Out of descriptors and the like: back off briefly.
                log!(ctx.logger, "smtpd", "accept failed: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                let ctx = ctx.clone();
                let lc = listener_config.clone();
                sessions.spawn(async move {
                    Session::new(stream, peer, ctx, lc).run().await;
                    drop(permit);
                });
            }
            Err(_) => {
                log!(
                    ctx.logger,
                    "smtpd",
                    "NOQUEUE: reject: connect from [{}]: 421 4.3.2 too many sessions",
                    peer.ip()
                );
                let hostname = ctx.config.hostname.clone();
                sessions.spawn(async move {
                    let msg = format!("421 4.3.2 {hostname} Service not available: too many concurrent sessions\r\n");
                    let _ = stream.write_all(msg.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        }
    }
    sessions.abort_all();
    while sessions.join_next().await.is_some() {}
}
