//! The listening sockets, and how a reload changes them without dropping
//! a session: a listener is known by its `listen` address.
//!
//! - An address in both the old and the new configuration keeps its
//!   socket (no connection is refused in between); its settings (kind,
//!   PROXY protocol, AUTH, sender checks) apply from the next session.
//! - A new address is bound before anything changes, so a reload whose
//!   socket cannot be bound is refused whole.
//! - An address that left the configuration stops accepting (its socket
//!   is closed before the reload returns); its sessions finish.
//!
//! Invariant: every accept loop's retire sender is kept until the loop is
//! retired or the daemon stops (a dropped sender would end its sessions).

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::services::Contexts;
use crate::config::listener::ListenerConfig;
use crate::config::Config;
use crate::log::Event;
use crate::log::Logger;
use crate::receive::smtp::{accept_loop, bind, Listening, Serving, SessionContext, SessionCount};

struct Running {
    addr: SocketAddr,
    serving: Arc<ArcSwap<Serving>>,
    retire: oneshot::Sender<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Sockets a new configuration adds, bound and not yet serving.
pub(super) struct Bound(Vec<(ListenerConfig, TcpListener)>);

pub(super) struct Listeners {
    running: Vec<(SocketAddr, Running)>,
    /// Accept loops of retired listeners whose sessions may still run.
    retired: Vec<JoinHandle<()>>,
    count: Arc<SessionCount>,
    shutdown: watch::Receiver<bool>,
    reuse_port: bool,
}

impl Listeners {
    pub fn new(shutdown: watch::Receiver<bool>, reuse_port: bool) -> Listeners {
        Listeners {
            running: Vec::new(),
            retired: Vec::new(),
            count: Arc::new(SessionCount::default()),
            shutdown,
            reuse_port,
        }
    }

    /// The bound addresses, in configuration order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.running.iter().map(|(_, r)| r.addr).collect()
    }

    /// Binds the listeners of `config` not running yet; an error names
    /// the address, and nothing bound is kept.
    pub fn bind_new(&self, config: &Config) -> Result<Bound, (SocketAddr, std::io::Error)> {
        let mut bound = Vec::new();
        for lc in config.all_listeners() {
            if self.running.iter().any(|(listen, _)| *listen == lc.listen) {
                continue;
            }
            let socket = bind(lc.listen, self.reuse_port).map_err(|e| (lc.listen, e))?;
            bound.push((lc, socket));
        }
        Ok(Bound(bound))
    }

    /// Makes the running set that of `config`, each listener serving its
    /// context of `contexts`: the others retired first, then new settings
    /// for kept addresses and `bound` sockets started.
    pub async fn apply(
        &mut self,
        config: &Config,
        bound: Bound,
        contexts: &Contexts,
        logger: &Logger,
    ) {
        let wanted = config.all_listeners();
        let (mut keep, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|(listen, _)| wanted.iter().any(|lc| lc.listen == *listen));
        for (_, running) in gone {
            let (ack, closed) = oneshot::channel();
            if running.retire.send(ack).is_ok() {
                let _ = closed.await;
            }
            logger.emit(&Event::StoppedListening {
                addr: running.addr.to_string().into(),
            });
            self.retired.push(running.task);
        }
        self.retired.retain(|t| !t.is_finished());
        let mut fresh = bound.0;
        for (index, lc) in wanted.into_iter().enumerate() {
            let listen = lc.listen;
            if let Some(i) = keep.iter().position(|(l, _)| *l == listen) {
                let (l, running) = keep.remove(i);
                running.serving.store(Arc::new(Serving {
                    ctx: contexts.of(index).clone(),
                    listener: Arc::new(lc),
                }));
                self.running.push((l, running));
            } else if let Some(i) = fresh.iter().position(|(b, _)| b.listen == listen) {
                // In order: listeners on port 0 share the address.
                let (_, socket) = fresh.remove(i);
                match self.start(lc, socket, contexts.of(index), logger) {
                    Ok(running) => self.running.push((listen, running)),
                    Err(e) => logger.emit(&Event::ListenFailed {
                        addr: listen.to_string().into(),
                        error: e.to_string().into(),
                    }),
                }
            }
        }
    }

    /// Starts serving one bound socket.
    fn start(
        &self,
        lc: ListenerConfig,
        socket: TcpListener,
        ctx: &Arc<SessionContext>,
        logger: &Logger,
    ) -> std::io::Result<Running> {
        let addr = socket.local_addr()?;
        logger.emit(&Event::Listening {
            addr: addr.to_string().into(),
            kind: lc.kind.as_str().into(),
        });
        let serving = Arc::new(ArcSwap::from_pointee(Serving {
            ctx: ctx.clone(),
            listener: Arc::new(lc),
        }));
        let (retire, retired) = oneshot::channel();
        let task = tokio::spawn(accept_loop(
            socket,
            Listening {
                serving: serving.clone(),
                count: self.count.clone(),
                shutdown: self.shutdown.clone(),
                retire: retired,
            },
        ));
        Ok(Running {
            addr,
            serving,
            retire,
            task,
        })
    }

    /// Waits for every accept loop to end (after the shutdown signal).
    pub async fn join(self) {
        for (_, running) in self.running {
            let _ = running.task.await;
            drop(running.retire);
        }
        for task in self.retired {
            let _ = task.await;
        }
    }
}
