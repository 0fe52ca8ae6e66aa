//! The daemon: the only module that knows every stage. It opens the spool,
//! recovers what it holds, builds tables, routing, the queue and the
//! delivery agents (`build.rs`), and starts the listeners
//! (`listeners.rs`). A reload builds all of it again from the file and
//! swaps it in without dropping anything in flight (`reload.rs`).
//!
//! Shutdown drains (like Postfix's `postfix stop` waiting for its agents):
//! stop accepting and end sessions, let deliveries in flight finish until a
//! deadline and record their outcomes, then flush and close the spool. A
//! clean stop therefore re-delivers nothing that had been delivered.

pub mod acme;
mod build;
mod cluster;
mod control;
mod listeners;
pub mod privilege;
mod reload;
mod reuse;
mod services;
mod spool_size;
mod start;
#[doc(hidden)]
pub mod testing;

pub use build::{check, routing, BuildError};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_spool::{Spool, SpoolConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::intake::Intake;
use crate::log::Event;
use crate::log::Logger;
use crate::queue::QueueHandle;
use crate::receive::local::Submitter;
use crate::receive::smtp::SessionContext;
use crate::routing::mailboxes::VirtualMailboxes;
use build::Parts;
use listeners::Listeners;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open log: {0}")]
    Log(std::io::Error),
    #[error("cannot open spool: {0}")]
    Spool(#[from] sluice_spool::SpoolError),
    #[error("configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("configuration: {0}")]
    Build(#[from] build::BuildError),
    #[error("configuration: {0}")]
    Privilege(#[from] privilege::PrivilegeError),
    #[error("configuration: admin socket in {}: {err}", dir.display())]
    Admin {
        dir: std::path::PathBuf,
        err: crate::admin::socket::BindError,
    },
    #[error("configuration: {0}")]
    Metrics(#[from] crate::admin::http::MetricsError),
    #[error("configuration: spool recovery panicked: {0}")]
    Recovery(tokio::task::JoinError),
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("cannot start the queue manager's thread: {0}")]
    Queue(std::io::Error),
    #[error("cannot start the launcher (commands as other accounts): {0}")]
    Launcher(std::io::Error),
}

/// A running server.
pub struct Server {
    /// The bound addresses (useful when the config said port 0).
    pub addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    listeners: Listeners,
    queue: QueueHandle,
    scheduler_task: tokio::sync::oneshot::Receiver<()>,
    spool: Spool,
    logger: Logger,
    /// What the running configuration built (replaced by a reload).
    parts: Parts,
    /// What sessions, submissions and the watchers use; swapped by a reload.
    ctx: Arc<SessionContext>,
    submitter: Arc<ArcSwap<Submitter>>,
    /// The intake claimed shadow copies go into; swapped by a reload.
    intake: Arc<ArcSwap<Intake>>,
    mailboxes: Arc<ArcSwap<VirtualMailboxes>>,
    /// The admin socket's task (`sluice queue`), and its path.
    admin: JoinHandle<()>,
    admin_socket: std::path::PathBuf,
    /// Where /metrics and the dashboard are served, if they are.
    pub metrics_addr: Option<SocketAddr>,
    observe: Option<JoinHandle<()>>,
    drain_deadline: Duration,
    /// The admin socket's controls, until the main loop takes them.
    control: Option<crate::admin::control::ControlReceiver>,
    /// When the daemon started (`sluice status`).
    started: std::time::Instant,
}

impl Server {
    pub async fn start(config: Config) -> Result<Server, StartError> {
        Server::start_as(config, None).await
    }

    /// Starts the daemon; with `account` (a root start), the listening
    /// sockets are bound first, then the state directory and log are
    /// handed to the account and root is given up (`privilege.rs`) before
    /// anything else is opened.
    pub async fn start_as(
        config: Config,
        account: Option<privilege::Account>,
    ) -> Result<Server, StartError> {
        Server::open(config, account, None).await
    }

    /// As [`Server::start`], logging through `logger` instead of opening
    /// `log_file` (a test's, which it subscribed to: [`Logger::subscribe`]).
    pub async fn start_logging_to(config: Config, logger: Logger) -> Result<Server, StartError> {
        Server::open(config, None, Some(logger)).await
    }

    /// Reopens the log file (SIGUSR1, after logrotate renamed it).
    pub fn reopen_log(&self) {
        self.logger.reopen();
    }

    /// Stops accepting, ends sessions, drains deliveries in flight, then
    /// flushes and closes the spool.
    pub async fn shutdown(mut self) {
        let config = &self.parts.config;
        let balanced = config.all_listeners().iter().any(|l| l.proxy_protocol);
        let drain = Duration::from_secs(config.smtpd.balancer_drain_secs);
        if balanced && !drain.is_zero() {
            // Behind a balancer: fail its health checks first, serving
            // everyone, until it has stopped sending sessions here.
            self.ctx
                .stopping
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.logger.emit(&Event::BalancerDrain {
                secs: drain.as_secs(),
            });
            tokio::time::sleep(drain).await;
        }
        let _ = self.shutdown.send(true);
        // No more administration: the socket goes first, so a client
        // finds no daemon rather than a half-closed one.
        self.admin.abort();
        let _ = (&mut self.admin).await;
        let _ = std::fs::remove_file(&self.admin_socket);
        if let Some(t) = &self.observe {
            t.abort();
        }
        self.listeners.join().await;
        let deadline = tokio::time::Instant::now() + self.drain_deadline;
        let drained = self.queue.drain(deadline).await;
        self.logger.emit(&Event::Drained {
            finished: drained.finished_jobs as u64,
            abandoned: drained.abandoned_jobs as u64,
        });
        let _ = self.scheduler_task.await;
        if let Some(cluster) = &self.parts.cluster {
            // Deliveries are over: no connection is held any more.
            cluster.release(Duration::from_secs(2)).await;
        }
        let spool = self.spool.clone();
        let _ = tokio::task::spawn_blocking(move || spool.shutdown()).await;
        let stats = self.spool.stats();
        let (messages, syncs) = (
            stats.messages.load(std::sync::atomic::Ordering::Relaxed),
            stats.syncs.load(std::sync::atomic::Ordering::Relaxed),
        );
        self.logger.emit(&Event::Stopped { messages, syncs });
        for line in self.parts.mailboxes.stats_lines() {
            self.logger.emit(&Event::LookupStats { line: line.into() });
        }
        let md = &self.parts.maildir_stats;
        let (files, syncs) = (
            md.files.load(std::sync::atomic::Ordering::Relaxed),
            md.syncs.load(std::sync::atomic::Ordering::Relaxed),
        );
        if files > 0 {
            self.logger.emit(&Event::MaildirStats { files, syncs });
        }
        let logger = self.logger.clone();
        let _ = tokio::task::spawn_blocking(move || logger.flush()).await;
    }
}

/// Hands the mail found in the spool to the queue, in batches (the queue
/// parks it on disk and brings it in as room frees up).
/// The list is handed over from its end (reversed first, so still oldest
/// first) and shrunk as it goes, so that a million recovered messages are
/// not held twice, once here and once parked in the queue.
fn spawn_recovered(queue: &QueueHandle, mut recovered: Vec<sluice_spool::Recovered>) {
    const BATCH: usize = 4096;
    let queue = queue.clone();
    recovered.reverse();
    tokio::spawn(async move {
        while !recovered.is_empty() {
            let mut batch = recovered.split_off(recovered.len().saturating_sub(BATCH));
            batch.reverse();
            if recovered.capacity() > recovered.len() + 16 * BATCH {
                recovered.shrink_to_fit();
            }
            queue.recovered(batch).await;
        }
    });
}

/// The metrics and dashboard listener, when configured.
async fn observe(
    config: &Config,
    queue: &QueueHandle,
    spool: &Spool,
    mailboxes: &Arc<ArcSwap<VirtualMailboxes>>,
    logger: &Logger,
) -> Result<Option<(SocketAddr, JoinHandle<()>)>, StartError> {
    let Some(listen) = &config.metrics.listen else {
        return Ok(None);
    };
    let addr: SocketAddr = *listen;
    let access = crate::admin::http::Access {
        hostname: config.hostname.to_string(),
        max_connections: config.metrics.max_connections,
    };
    let (bound, task) = crate::admin::http::spawn(
        addr,
        access,
        queue.clone(),
        spool.clone(),
        mailboxes.clone(),
        logger.clone(),
    )
    .await?;
    logger.emit(&Event::Listening {
        addr: bound.to_string().into(),
        kind: "metrics".into(),
    });
    Ok(Some((bound, task)))
}

/// Opens the spool (blocking recovery on the blocking pool) and logs it.
async fn open_spool(
    config: &Config,
    logger: &Logger,
) -> Result<(Spool, Vec<sluice_spool::Recovered>, SpoolConfig), StartError> {
    let dir = config.data_dir.join("spool");
    let fs = match spool_size::space_for(&dir) {
        Ok(fs) => fs,
        Err(err) => return Err(build::BuildError::SpoolSpace { dir, err }.into()),
    };
    let size = spool_size::fit(&config.spool, fs);
    if let Some(warning) = spool_size::shortage(&dir, size, fs) {
        eprintln!("sluice: {warning}");
        logger.emit(&Event::Warning {
            kind: "spool_space".into(),
            open: None,
            line: warning.to_string().into(),
        });
    }
    let spool_config = SpoolConfig {
        dir,
        sync: !config.spool.unsafe_ack_before_fsync,
        segment_bytes: size.segment_bytes,
        reserve_bytes: size.reserve_bytes,
    };
    let kept = spool_config.clone();
    let (spool, recovered, report) = tokio::task::spawn_blocking(move || Spool::open(spool_config))
        .await
        .map_err(StartError::Recovery)??;
    logger.emit(&Event::Started {
        segments: report.segments as u64,
        to_deliver: report.messages_pending as u64,
        segment_mib: size.segment_bytes >> 20,
        reserve_mib: size.reserve_bytes >> 20,
        unsafe_ack: config.spool.unsafe_ack_before_fsync,
    });
    for damage in &report.damage {
        logger.emit(&Event::SpoolDamage {
            damage: damage.to_string().into(),
        });
    }
    if report.known_damage > 0 {
        logger.emit(&Event::SpoolQuarantined {
            ranges: report.known_damage as u64,
        });
    }
    if !report.pinned.is_empty() {
        logger.emit(&Event::SpoolPinned {
            segments: report.pinned.clone(),
        });
    }
    Ok((spool, recovered, kept))
}

/// Static tables whose files changed are reloaded within a second, off
/// the lookup path (a lookup never touches the file system).
fn spawn_table_watcher(
    mailboxes: &Arc<ArcSwap<VirtualMailboxes>>,
    mut stop: watch::Receiver<bool>,
) {
    let mailboxes = mailboxes.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {}
            }
            let m = mailboxes.load_full();
            let _ = tokio::task::spawn_blocking(move || m.reload_changed()).await;
        }
    });
}

/// Directory counters once a minute, for operators watching lookups.
fn spawn_lookup_stats(
    mailboxes: &Arc<ArcSwap<VirtualMailboxes>>,
    logger: &Logger,
    mut stop: watch::Receiver<bool>,
) {
    let (mailboxes, logger) = (mailboxes.clone(), logger.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {}
            }
            for line in mailboxes.load().stats_lines() {
                logger.emit(&Event::LookupStats { line: line.into() });
            }
        }
    });
}
