//! The daemon: the only module that knows every stage. It opens the spool,
//! recovers what it holds, builds tables, routing, the queue and the
//! delivery agents, and starts the listeners.
//!
//! Shutdown drains (like Postfix's `postfix stop` waiting for its agents):
//! stop accepting and end sessions, let deliveries in flight finish until a
//! deadline and record their outcomes, then flush and close the spool. A
//! clean stop therefore re-delivers nothing that had been delivered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_spool::{Spool, SpoolConfig};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::config::hop::NextHop;
use crate::config::Config;
use crate::log;
use crate::log::Logger;
use crate::maildir::dirs::MaildirPolicy;
use crate::maildir::MaildirAgent;
use crate::queue::{DeliveryAgent, QueueHandle, Scheduler, WorkerStart};
use crate::routing::dns::Dns;
use crate::routing::mailboxes::VirtualMailboxes;
use crate::routing::policy::RelayPolicy;
use crate::routing::Router;
use crate::smtp::client::dane::Dane;
use crate::smtp::client::dead::DeadHosts;
use crate::smtp::client::mta_sts::MtaSts;
use crate::smtp::client::tls::ClientTls;
use crate::smtp::client::SmtpAgent;
use crate::smtp::server::anvil::{self, Anvil};
use crate::smtp::server::tls::ServerTls;
use crate::smtp::server::{accept_loop, bind, SessionContext};

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

/// Picks the agent for a next hop.
struct Agents {
    smtp: SmtpAgent,
    maildir: MaildirAgent,
}

impl DeliveryAgent for Agents {
    fn spawn(&self, start: WorkerStart) {
        match &*start.hop {
            NextHop::Maildir => self.maildir.spawn(start),
            // Discard never reaches an agent (the queue handles it); SMTP
            // refuses anything that is not SMTP with a deferral.
            _ => self.smtp.spawn(start),
        }
    }
}

impl Agents {
    fn new(
        config: &Arc<Config>,
        spool: &Spool,
        logger: &Logger,
        mailboxes: &Arc<VirtualMailboxes>,
        tls: Arc<ClientTls>,
        dns: Arc<Dns>,
        dane: Option<Arc<Dane>>,
    ) -> Agents {
        let d = &config.delivery;
        let sts = match (d.mta_sts, tls.verifying()) {
            (true, Some(verifying)) => Some(Arc::new(MtaSts::new(
                dns.clone(),
                verifying,
                d.mta_sts_port,
                Duration::from_secs(d.connect_timeout_secs.max(1)),
            ))),
            _ => None,
        };
        let policy = MaildirPolicy::new(
            mailboxes.base().to_path_buf(),
            config.local.maildir_allow_absolute,
        );
        Agents {
            smtp: SmtpAgent {
                config: config.clone(),
                spool: spool.clone(),
                logger: logger.clone(),
                tls,
                dns,
                dead: Arc::new(DeadHosts::new(Duration::from_secs(
                    config.delivery.dead_host_secs,
                ))),
                sts,
                dane,
            },
            maildir: MaildirAgent {
                config: config.clone(),
                mailboxes: mailboxes.clone(),
                spool: spool.clone(),
                policy: Arc::new(policy),
            },
        }
    }
}

/// A running server.
pub struct Server {
    /// The bound addresses (useful when the config said port 0).
    pub addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    listeners: Vec<JoinHandle<()>>,
    queue: QueueHandle,
    scheduler_task: JoinHandle<()>,
    spool: Spool,
    logger: Logger,
    mailboxes: Arc<VirtualMailboxes>,
    tls: Option<Arc<ServerTls>>,
    /// The configuration the daemon runs with.
    config: Arc<Config>,
    /// The admin socket's task (`sluice queue`), and its path.
    admin: JoinHandle<()>,
    admin_socket: std::path::PathBuf,
    /// Where /metrics and the dashboard are served, if they are.
    pub metrics_addr: Option<SocketAddr>,
    observe: Option<JoinHandle<()>>,
    drain_deadline: Duration,
}

impl Server {
    pub async fn start(config: Config) -> Result<Server, StartError> {
        config
            .validate()
            .map_err(|e| StartError::Config(e.to_string()))?;
        // (validate() has checked it is "text" or "json".)
        let json = config.log_format == "json";
        let logger = Logger::start_as(config.log_file.as_deref(), json).map_err(StartError::Log)?;
        crate::log::route_crate_logs(&logger);
        let config = Arc::new(config);
        let (spool, recovered) = open_spool(&config, &logger).await?;
        let mailboxes = Arc::new(
            VirtualMailboxes::build(
                &config.local,
                &config.smtpd.relay_recipient_table,
                &config.auth.table,
                &config.tables,
                &config.data_dir,
                &logger,
            )
            .map_err(StartError::Config)?,
        );
        let router = Router::new(
            &config.transport,
            config.delivery.relayhost.as_deref(),
            mailboxes.domains(),
        )
        .map_err(StartError::Config)?;
        let tls = ServerTls::load(&config).map_err(StartError::Config)?;
        let client_tls = Arc::new(ClientTls::build(&config.delivery).map_err(StartError::Config)?);
        let dns = Arc::new(Dns::new(&config.dns).map_err(StartError::Config)?);
        let dane = match config.delivery.dane {
            true => Some(Arc::new(
                Dane::new(&config.dns, config.dns.trust_anchor_file.as_deref())
                    .map_err(StartError::Config)?,
            )),
            false => None,
        };
        let sender_auth = match config.all_listeners().iter().any(|l| l.sender_auth) {
            true => Some(Arc::new(
                crate::smtp::server::sender_auth::SenderAuth::new(&config.dns, &config.hostname)
                    .map_err(StartError::Config)?,
            )),
            false => None,
        };
        let dkim = Arc::new(
            crate::smtp::server::dkim::Signers::load(&config.dkim.keys)
                .map_err(StartError::Config)?,
        );
        let agents = Arc::new(Agents::new(
            &config,
            &spool,
            &logger,
            &mailboxes,
            client_tls,
            dns.clone(),
            dane,
        ));
        let (queue, rx) = QueueHandle::channel();
        let mut scheduler = Scheduler::new(
            config.clone(),
            router,
            spool.clone(),
            logger.clone(),
            agents,
            &queue,
        );
        scheduler.set_resolver(dns);
        let scheduler_task = tokio::spawn(scheduler.run(rx));
        spawn_recovered(&queue, recovered);
        let ctx = Arc::new(SessionContext {
            policy: RelayPolicy::new(config.mynetworks(), &config.smtpd.relay_domains),
            config: config.clone(),
            mailboxes: mailboxes.clone(),
            spool: spool.clone(),
            logger: logger.clone(),
            queue: queue.clone(),
            body_memory: Arc::new(Semaphore::new(
                config.smtpd.message_memory_budget_kib as usize,
            )),
            anvil: Anvil::new(anvil::Limits::from_config(&config.smtpd)),
            tls: tls.clone(),
            credentials: mailboxes.credentials(),
            dkim,
            sender_auth,
        });
        let (shutdown, _) = watch::channel(false);
        spawn_lookup_stats(&mailboxes, &logger, shutdown.subscribe());
        spawn_table_watcher(&mailboxes, shutdown.subscribe());
        // The admin socket before the SMTP listeners: a daemon that cannot
        // be administered does not start taking mail.
        let submitter = crate::admin::submit::Submitter {
            hostname: config.hostname.clone(),
            mailboxes: mailboxes.clone(),
            spool: spool.clone(),
            queue: queue.clone(),
            logger: logger.clone(),
            size_limit: config.smtpd.message_size_limit,
        };
        let admin = crate::admin::spawn(&config.data_dir, submitter, config.log_file.clone())
            .map_err(|e| {
                let why = format!("admin socket in {}: {e}", config.data_dir.display());
                log!(logger, "master", "fatal: {why}");
                StartError::Config(why)
            })?;
        let observe = match &config.metrics.listen {
            Some(listen) => {
                let addr: SocketAddr = listen.parse().map_err(|_| {
                    StartError::Config(format!("metrics.listen: bad address {listen:?}"))
                })?;
                let (bound, task) = crate::admin::http::spawn(
                    addr,
                    queue.clone(),
                    spool.clone(),
                    mailboxes.clone(),
                )
                .await
                .map_err(StartError::Config)?;
                log!(logger, "master", "metrics and dashboard on http://{bound}/");
                Some((bound, task))
            }
            None => None,
        };
        let (addrs, listeners) = listen(&config, &ctx, &shutdown, &logger)?;
        Ok(Server {
            config: config.clone(),
            admin_socket: crate::admin::socket_path(&config.data_dir),
            metrics_addr: observe.as_ref().map(|(a, _)| *a),
            observe: observe.map(|(_, t)| t),
            admin,
            addrs,
            shutdown,
            listeners,
            queue,
            scheduler_task,
            spool,
            logger,
            mailboxes,
            tls,
            drain_deadline: Duration::from_secs(config.queue.shutdown_drain_secs),
        })
    }

    /// Reopens the log file (SIGUSR1, after logrotate renamed it).
    pub fn reopen_log(&self) {
        self.logger.reopen();
    }

    /// Reloads lookup tables and the TLS certificate (SIGHUP).
    ///
    /// With the configuration file's `path`, the file is read and checked
    /// first: a bad one is refused (its error, with the line, is logged)
    /// and nothing changes. A good one reloads tables and certificates
    /// now, and the log names the sections whose changes wait for a
    /// restart (listeners, routes and limits are built once, at start).
    pub fn reload(&self, path: Option<&std::path::Path>) {
        if let Some(path) = path {
            match Config::load(path) {
                Err(e) => {
                    let why = e.to_string().replace('\n', " | ");
                    log!(
                        self.logger,
                        "master",
                        "reload: {why}; keeping the running configuration"
                    );
                    return;
                }
                Ok(new) => {
                    let changed = sections_changed(&self.config, &new);
                    if !changed.is_empty() {
                        log!(
                            self.logger,
                            "master",
                            "reload: changes to {} take effect at the next restart",
                            changed.join(", ")
                        );
                    }
                }
            }
        }
        log!(self.logger, "master", "reload: lookup tables");
        self.mailboxes.reload();
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => log!(
                    self.logger,
                    "master",
                    "reload: TLS certificate {}",
                    tls.cert_path().display()
                ),
                Err(err) => log!(
                    self.logger,
                    "master",
                    "reload: {err}; keeping the previous certificate"
                ),
            }
        }
    }

    /// Stops accepting, ends sessions, drains deliveries in flight, then
    /// flushes and closes the spool.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        // No more administration: the socket goes first, so a client
        // finds no daemon rather than a half-closed one.
        self.admin.abort();
        let _ = (&mut self.admin).await;
        let _ = std::fs::remove_file(&self.admin_socket);
        if let Some(t) = &self.observe {
            t.abort();
        }
        for l in self.listeners {
            let _ = l.await;
        }
        let deadline = tokio::time::Instant::now() + self.drain_deadline;
        let drained = self.queue.drain(deadline).await;
        log!(
            self.logger,
            "master",
            "drained: {} deliveries finished, {} abandoned at the deadline (delivered again after restart)",
            drained.finished_jobs,
            drained.abandoned_jobs
        );
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
        let logger = self.logger.clone();
        let _ = tokio::task::spawn_blocking(move || logger.flush()).await;
    }
}

/// Hands the mail found in the spool to the queue, in batches (the queue
/// parks it on disk and brings it in as room frees up).
fn spawn_recovered(queue: &QueueHandle, recovered: Vec<sluice_spool::Recovered>) {
    let queue = queue.clone();
    tokio::spawn(async move {
        let mut recovered = recovered.into_iter().peekable();
        while recovered.peek().is_some() {
            let batch = recovered.by_ref().take(4096).collect();
            queue.recovered(batch).await;
        }
    });
}

type Listening = (Vec<SocketAddr>, Vec<JoinHandle<()>>);

/// Binds every listener and starts its accept loop.
fn listen(
    config: &Config,
    ctx: &Arc<SessionContext>,
    shutdown: &watch::Sender<bool>,
    logger: &Logger,
) -> Result<Listening, StartError> {
    let sessions = Arc::new(Semaphore::new(config.smtpd.max_sessions.max(1)));
    let mut addrs = Vec::new();
    let mut listeners = Vec::new();
    for lc in config.all_listeners() {
        let listen = &lc.listen;
        let listener = bind(listen, config.smtpd.reuse_port)
            .map_err(|e| StartError::Listen(listen.clone(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| StartError::Listen(listen.clone(), e))?;
        log!(logger, "master", "listening on {addr} ({:?})", lc.kind);
        addrs.push(addr);
        listeners.push(tokio::spawn(accept_loop(
            listener,
            ctx.clone(),
            Arc::new(lc),
            sessions.clone(),
            shutdown.subscribe(),
        )));
    }
    Ok((addrs, listeners))
}

/// Opens the spool (blocking recovery on the blocking pool) and logs it.
async fn open_spool(
    config: &Config,
    logger: &Logger,
) -> Result<(Spool, Vec<sluice_spool::Recovered>), StartError> {
    let segment_bytes = config.spool.segment_mib.max(1) << 20;
    let reserve_bytes = match config.spool.reserve_mib {
        Some(mib) => mib << 20,
        None => SpoolConfig::default_reserve(segment_bytes),
    };
    let spool_config = SpoolConfig {
        dir: config.data_dir.join("spool"),
        sync: !config.spool.unsafe_ack_before_fsync,
        segment_bytes,
        reserve_bytes,
    };
    let (spool, recovered, report) = tokio::task::spawn_blocking(move || Spool::open(spool_config))
        .await
        .map_err(|e| StartError::Config(format!("spool recovery panicked: {e}")))??;
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
    if report.known_damage > 0 {
        log!(
            logger,
            "master",
            "spool recovery: {} damaged ranges already quarantined in spool/corrupt/",
            report.known_damage
        );
    }
    if !report.pinned.is_empty() {
        log!(
            logger,
            "master",
            "spool recovery: WARNING: segments {:?} hold damaged bytes that could not be quarantined; they are kept (no space is reclaimed behind them) until a start-up can copy them to spool/corrupt/",
            report.pinned
        );
    }
    Ok((spool, recovered))
}

/// Static tables whose files changed are reloaded within a second, off
/// the lookup path (a lookup never touches the file system).
fn spawn_table_watcher(mailboxes: &Arc<VirtualMailboxes>, mut stop: watch::Receiver<bool>) {
    let mailboxes = mailboxes.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {}
            }
            let m = mailboxes.clone();
            let _ = tokio::task::spawn_blocking(move || m.reload_changed()).await;
        }
    });
}

/// Directory counters once a minute, for operators watching lookups.
/// The top-level settings that differ between two configurations.
fn sections_changed(old: &Config, new: &Config) -> Vec<&'static str> {
    sections(old)
        .into_iter()
        .zip(sections(new))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((name, _), _)| name)
        .collect()
}

/// Each top-level setting, named, in a comparable form.
fn sections(c: &Config) -> [(&'static str, String); 15] {
    [
        ("hostname", format!("{:?}", c.hostname)),
        ("data_dir", format!("{:?}", c.data_dir)),
        ("log_file", format!("{:?}{:?}", c.log_file, c.log_format)),
        ("postmaster", format!("{:?}", c.postmaster)),
        ("smtpd", format!("{:?}", c.smtpd)),
        ("tls", format!("{:?}", c.tls)),
        ("auth", format!("{:?}", c.auth)),
        ("spool", format!("{:?}", c.spool)),
        ("queue", format!("{:?}", c.queue)),
        ("delivery", format!("{:?}", c.delivery)),
        ("transport", format!("{:?}", c.transport)),
        ("local and tables", format!("{:?}{:?}", c.local, c.tables)),
        ("dns", format!("{:?}", c.dns)),
        ("dkim", format!("{:?}", c.dkim)),
        ("metrics", format!("{:?}", c.metrics)),
    ]
}

fn spawn_lookup_stats(
    mailboxes: &Arc<VirtualMailboxes>,
    logger: &Logger,
    mut stop: watch::Receiver<bool>,
) {
    if mailboxes.stats_lines().is_empty() {
        return;
    }
    let (mailboxes, logger) = (mailboxes.clone(), logger.clone());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {}
            }
            for line in mailboxes.stats_lines() {
                log!(logger, "lookup", "{line}");
            }
        }
    });
}
