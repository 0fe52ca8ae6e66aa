//! Putting it together: open the spool, recover, start the scheduler, listen.
//!
//! Listeners take a session permit before spawning a session task; past
//! `max_sessions` the client gets `421 4.3.2` and is closed. Shutdown is
//! explicit: stop accepting, abort sessions (no 250 is ever sent for an
//! unsynced message, so aborting loses nothing), stop the scheduler, then
//! flush and close the spool.

use std::net::SocketAddr;
use std::sync::Arc;

use sluice_spool::{Spool, SpoolConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::config::Config;
use crate::local::Local;
use crate::log;
use crate::log::Logger;
use crate::receive::Session;
use crate::route::RelayPolicy;
use crate::schedule::{Event, Incoming, Scheduler};

/// What every session shares.
pub struct Context {
    pub config: Arc<Config>,
    pub local: Arc<Local>,
    pub spool: Spool,
    pub logger: Logger,
    pub policy: RelayPolicy,
    pub scheduler: mpsc::UnboundedSender<Event>,
    /// Permits of 1 KiB for bodies being received (see `message_memory_budget_kib`).
    pub body_memory: Arc<Semaphore>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open log: {0}")]
    Log(std::io::Error),
    #[error("cannot open spool: {0}")]
    Spool(#[from] sluice_spool::SpoolError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("cannot listen on {0}: {1}")]
    Listen(String, std::io::Error),
}

/// A running server.
pub struct Server {
    /// The bound addresses (useful when the config said port 0).
    pub addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    listeners: Vec<JoinHandle<()>>,
    scheduler: mpsc::UnboundedSender<Event>,
    scheduler_task: JoinHandle<()>,
    spool: Spool,
    logger: Logger,
    local: Arc<Local>,
}

impl Server {
    pub async fn start(config: Config) -> Result<Server, StartError> {
        let logger = Logger::start(config.log_file.as_deref()).map_err(StartError::Log)?;
        let config = Arc::new(config);
        let segment_bytes = config.spool.segment_mib.max(1) << 20;
        let spool_config = SpoolConfig {
            dir: config.data_dir.join("spool"),
            sync: !config.spool.unsafe_ack_before_fsync,
            segment_bytes,
            reserve_bytes: SpoolConfig::default_reserve(segment_bytes),
        };
        let (spool, recovered, report) = tokio::task::block_in_place(|| Spool::open(spool_config))?;
        log!(
            logger,
            "master",
            "daemon started: spool {} segments, {} messages to deliver{}",
            report.segments,
            report.messages_pending,
            if config.spool.unsafe_ack_before_fsync {
                " (WARNING: unsafe_ack_before_fsync is on; acknowledged mail can be lost on power failure)"
            } else {
                ""
            }
        );
        for damage in &report.damage {
            log!(logger, "master", "spool recovery: {damage}");
        }
        let local = Arc::new(
            Local::build(&config.local, &config.tables, &config.data_dir, &logger)
                .map_err(StartError::Config)?,
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let scheduler = Scheduler::new(
            config.clone(),
            local.clone(),
            spool.clone(),
            logger.clone(),
            tx.clone(),
        );
        let scheduler_task = tokio::spawn(scheduler.run(rx));
        for msg in recovered {
            let _ = tx.send(Event::Incoming(Incoming {
                envelope: msg.envelope,
                body_ref: msg.body,
                body: None,
                done: msg.done,
            }));
        }
        let ctx = Arc::new(Context {
            policy: RelayPolicy::new(config.mynetworks(), &config.smtpd.relay_domains),
            config: config.clone(),
            local: local.clone(),
            spool: spool.clone(),
            logger: logger.clone(),
            scheduler: tx.clone(),
            body_memory: Arc::new(Semaphore::new(
                config.smtpd.message_memory_budget_kib as usize,
            )),
        });
        let (shutdown, _) = watch::channel(false);
        // Directory counters once a minute, for operators watching lookups.
        if !local.stats_lines().is_empty() {
            let (local, logger) = (local.clone(), logger.clone());
            let mut stop = shutdown.subscribe();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        _ = tick.tick() => {}
                    }
                    for line in local.stats_lines() {
                        log!(logger, "lookup", "{line}");
                    }
                }
            });
        }
        let sessions = Arc::new(Semaphore::new(config.smtpd.max_sessions.max(1)));
        let mut addrs = Vec::new();
        let mut listeners = Vec::new();
        for listen in &config.smtpd.listen {
            let listener = bind(listen).map_err(|e| StartError::Listen(listen.clone(), e))?;
            let addr = listener
                .local_addr()
                .map_err(|e| StartError::Listen(listen.clone(), e))?;
            log!(logger, "master", "listening on {addr}");
            addrs.push(addr);
            listeners.push(tokio::spawn(accept_loop(
                listener,
                ctx.clone(),
                sessions.clone(),
                shutdown.subscribe(),
            )));
        }
        Ok(Server {
            addrs,
            shutdown,
            listeners,
            scheduler: tx,
            scheduler_task,
            spool,
            logger,
            local,
        })
    }

    /// Reloads lookup tables (SIGHUP).
    pub fn reload(&self) {
        log!(self.logger, "master", "reload: lookup tables");
        self.local.reload();
    }

    /// Stops accepting, ends sessions and the scheduler, closes the spool.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for l in self.listeners {
            let _ = l.await;
        }
        let _ = self.scheduler.send(Event::Shutdown);
        let _ = self.scheduler_task.await;
        let spool = self.spool.clone();
        let _ = tokio::task::spawn_blocking(move || spool.shutdown()).await;
        let stats = self.spool.stats();
        let (messages, syncs) = (
            stats.messages.load(std::sync::atomic::Ordering::Relaxed),
            stats.syncs.load(std::sync::atomic::Ordering::Relaxed),
        );
        log!(
            self.logger,
            "master",
            "daemon stopped: spool stored {messages} messages with {syncs} disk syncs ({:.1} messages per sync)",
            messages as f64 / syncs.max(1) as f64
        );
    }
}

fn bind(listen: &str) -> std::io::Result<TcpListener> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"))?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    // A deep backlog: bursts of thousands of connects must not hit SYN retries.
    socket.listen(4096)
}

async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<Context>,
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
                sessions.spawn(async move {
                    Session::new(stream, peer, ctx).run().await;
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
