//! Start-up, in the order it must happen: bind the listening sockets
//! (and the ACME port) while we may still be root, start the launcher if
//! the configuration needs one (`deliver::launch`), then give root up;
//! open the log; start the pipeline (spool and recovery, the cluster's
//! parts, the delivery agents, the intake, the scheduler); then serve
//! (the admin socket before the SMTP listeners: a daemon that cannot be
//! administered does not start taking mail; metrics; ACME).
//!
//! Trust: the configuration is validated first; nothing is opened as
//! root but the sockets, and the state directory and log are handed to
//! the account before root is given up (`privilege.rs`).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_spool::Spool;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::build::{Parts, Purpose};
use super::listeners::{Bound, Listeners};
use super::{acme, cluster, privilege, Server, StartError};
use crate::config::Config;
use crate::intake::Intake;
use crate::log::Event;
use crate::log::Logger;
use crate::queue::{QueueHandle, Scheduler};

/// What was bound while root could still be given up.
struct Sockets {
    listeners: Listeners,
    bound: Bound,
    /// The ACME challenge port (80, usually), if ACME is on.
    acme: Option<TcpListener>,
    /// The launcher's pid, if one was started (logged once the log is open).
    launcher: Option<u32>,
}

/// The message path, started: what the listeners hand mail to.
struct Pipeline {
    spool: Spool,
    parts: Parts,
    node: Option<cluster::Node>,
    queue: QueueHandle,
    intake: Arc<Intake>,
    scheduler_task: tokio::sync::oneshot::Receiver<()>,
}

impl Server {
    pub(super) async fn open(
        config: Config,
        account: Option<privilege::Account>,
        logger: Option<Logger>,
    ) -> Result<Server, StartError> {
        config.validate()?;
        let (shutdown, _) = watch::channel(false);
        let sockets = bind(&config, account.as_ref(), &shutdown).await?;
        let logger = start_log(&config, logger)?;
        if let Some(pid) = sockets.launcher {
            logger.emit(&Event::LauncherStarted { pid });
        }
        let config = Arc::new(config);
        let pipeline = start_pipeline(&config, &logger).await?;
        serve(config, account, logger, shutdown, sockets, pipeline).await
    }
}

/// Binds the listeners and the ACME port, then (a root start) hands the
/// state directory and log to the account and becomes it.
async fn bind(
    config: &Config,
    account: Option<&privilege::Account>,
    shutdown: &watch::Sender<bool>,
) -> Result<Sockets, StartError> {
    if let Some(account) = account {
        privilege::keys_readable(config, account)?;
    }
    let maildir_group = privilege::maildir_group(config, account)?;
    let listeners = Listeners::new(shutdown.subscribe(), config.smtpd.reuse_port);
    let bound = listeners
        .bind_new(config)
        .map_err(|(listen, e)| StartError::Listen(listen, e))?;
    let acme = match &config.acme {
        Some(acme) => Some(
            TcpListener::bind(acme.http_listen)
                .await
                .map_err(|e| StartError::Listen(acme.http_listen, e))?,
        ),
        None => None,
    };
    let mut launcher = None;
    if let Some(account) = account {
        let log = config.log_file.as_deref();
        privilege::hand_over(&config.data_dir, log, account)?;
        launcher = start_launcher(config, account)?;
        privilege::drop_to(account, maildir_group)?;
    }
    Ok(Sockets {
        listeners,
        bound,
        acme,
        launcher,
    })
}

/// Starts the launcher (still root) when `config` runs commands as
/// accounts other than `account`, and keeps it for the pipe runner.
fn start_launcher(
    config: &Config,
    account: &privilege::Account,
) -> Result<Option<u32>, StartError> {
    use crate::deliver::launch::{self, Launcher, Policy};
    if !launch::needed(config, account.uid, account.gid) {
        return Ok(None);
    }
    let launcher = Launcher::start(
        std::path::Path::new("/proc/self/exe"),
        &Policy::for_config(config),
    )
    .map_err(StartError::Launcher)?;
    let pid = launcher.pid();
    launch::install(launcher);
    Ok(Some(pid))
}

/// The mail log (`log_file`, or the caller's), with the configuration's
/// warnings as its first lines.
fn start_log(config: &Config, logger: Option<Logger>) -> Result<Logger, StartError> {
    let json = config.log_format == crate::config::LogFormat::Json;
    let logger = match logger {
        Some(logger) => logger,
        None => Logger::start_as(config.log_file.as_deref(), json).map_err(StartError::Log)?,
    };
    crate::log::route_crate_logs(&logger);
    for warning in config.warnings() {
        logger.emit(&Event::Warning {
            kind: "config".into(),
            open: None,
            line: warning.to_string().into(),
        });
    }
    Ok(logger)
}

/// Opens the spool (recovering what it holds), starts the cluster's
/// parts, the agents, the intake and the scheduler, and queues the
/// recovered mail.
async fn start_pipeline(config: &Arc<Config>, logger: &Logger) -> Result<Pipeline, StartError> {
    let (spool, recovered, spool_config) = super::open_spool(config, logger).await?;
    let mut parts = Parts::build(config.clone(), logger, None, Purpose::Serve)?;
    let node = cluster::start(config, &spool, &spool_config, logger).await?;
    parts.cluster = node.as_ref().map(|n| n.cluster.clone());
    parts.shadow = node.as_ref().and_then(|n| n.shadow.clone());
    if let Some(cluster) = &config.cluster {
        parts.limits = cluster::limits(&cluster.redis_url, &config.data_dir, logger);
    }
    parts.agents(&spool, logger, None);
    let (queue, rx) = QueueHandle::channel();
    let intake = parts.intake(&spool, logger, &queue);
    let mut scheduler = Scheduler::new(
        config.clone(),
        parts.router.clone(),
        spool.clone(),
        logger.clone(),
        parts.agents.clone().expect("agents just built"),
        &queue,
        intake.clone(),
    );
    scheduler.set_resolver(
        parts.dns.clone(),
        super::build::secure_mx(parts.dane.as_ref()),
    );
    if let Some(cluster) = &parts.cluster {
        scheduler.set_cluster(cluster.clone());
    }
    let scheduler_task = scheduler.spawn(rx).map_err(StartError::Queue)?;
    super::spawn_recovered(&queue, recovered);
    Ok(Pipeline {
        spool,
        parts,
        node,
        queue,
        intake,
        scheduler_task,
    })
}

/// Opens the doors: the admin socket first, then metrics, the SMTP
/// listeners and the ACME responder.
async fn serve(
    config: Arc<Config>,
    account: Option<privilege::Account>,
    logger: Logger,
    shutdown: watch::Sender<bool>,
    sockets: Sockets,
    pipeline: Pipeline,
) -> Result<Server, StartError> {
    let Sockets {
        mut listeners,
        bound,
        acme,
        ..
    } = sockets;
    let ctx = Arc::new(pipeline.parts.session_context(&pipeline.intake, None));
    let mailboxes = Arc::new(ArcSwap::new(pipeline.parts.mailboxes.clone()));
    super::spawn_lookup_stats(&mailboxes, &logger, shutdown.subscribe());
    super::spawn_table_watcher(&mailboxes, shutdown.subscribe());
    let submitter = Arc::new(ArcSwap::from_pointee(
        pipeline.parts.submitter(&pipeline.intake),
    ));
    let current = Arc::new(ArcSwap::new(pipeline.intake.clone()));
    if let Some(node) = &pipeline.node {
        cluster::start_claims(node, &current);
    }
    let (control, control_rx) = crate::admin::control::channel();
    let admin = crate::admin::spawn(
        &config.data_dir,
        &pipeline.queue,
        submitter.clone(),
        config.log_file.clone(),
        control,
    )
    .map_err(|err| {
        let dir = config.data_dir.clone();
        logger.emit(&Event::AdminSocketFailed {
            dir: dir.display().to_string().into(),
            error: err.to_string().into(),
        });
        StartError::Admin { dir, err }
    })?;
    let observe = super::observe(
        &config,
        &pipeline.queue,
        &pipeline.spool,
        &mailboxes,
        &logger,
    )
    .await?;
    let contexts = pipeline.parts.contexts(ctx.clone());
    listeners.apply(&config, bound, &contexts, &logger).await;
    if let (Some(listener), Some(tls)) = (acme, &pipeline.parts.tls) {
        serve_acme(&config, listener, tls, &logger, &shutdown)?;
    }
    if let Some(account) = &account {
        logger.emit(&Event::RunningAs {
            user: account.name.as_str().into(),
            uid: account.uid,
        });
    }
    pipeline.parts.own_addrs.set(listeners.addrs());
    Ok(Server {
        addrs: listeners.addrs(),
        admin_socket: crate::admin::socket_path(&config.data_dir),
        metrics_addr: observe.as_ref().map(|(a, _)| *a),
        observe: observe.map(|(_, t)| t),
        admin,
        shutdown,
        listeners,
        queue: pipeline.queue,
        scheduler_task: pipeline.scheduler_task,
        spool: pipeline.spool,
        logger,
        parts: pipeline.parts,
        ctx,
        submitter,
        intake: current,
        mailboxes,
        drain_deadline: Duration::from_secs(config.queue.shutdown_drain_secs),
        control: Some(control_rx),
        started: std::time::Instant::now(),
    })
}

/// The ACME client and its http-01 responder on the port bound at start.
fn serve_acme(
    config: &Config,
    listener: TcpListener,
    tls: &Arc<crate::receive::smtp::tls::ServerTls>,
    logger: &Logger,
    shutdown: &watch::Sender<bool>,
) -> Result<(), StartError> {
    let Some(acme) = &config.acme else {
        return Ok(());
    };
    let addr = listener
        .local_addr()
        .map_err(|e| StartError::Listen(acme.http_listen, e))?;
    logger.emit(&Event::Listening {
        addr: addr.to_string().into(),
        kind: "acme".into(),
    });
    acme::spawn(
        acme.clone(),
        &config.data_dir,
        tls.clone(),
        listener,
        logger.clone(),
        shutdown.subscribe(),
    );
    Ok(())
}
