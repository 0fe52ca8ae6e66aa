//! `sluice serve` and `check-config`: the daemon's main loop (signals and
//! the admin socket's controls) and the check that builds what it would.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use sluice::config::source::Source;
use sluice::config::Config;
use sluice::daemon::Server;

use crate::args::SourceArgs;
use crate::CliError;

/// Fixes glibc's malloc thresholds instead of letting them adapt.
///
/// By default glibc raises its mmap threshold to the size of every large
/// block freed (up to 32 MiB) and its trim threshold to twice that. After
/// the first big table is freed or reallocated (a recovered backlog, the
/// queue's tables growing), freed memory then stays in the process: a
/// drain of 1,000,000 recovered messages peaked at 246 MB of RSS and
/// kept 142 MB after the queue was empty; with fixed thresholds, 178 MB
/// and 70 MB (`bench/backlog.sh`, issue 22). Blocks of 256 KiB and more
/// are mapped on their own and returned when freed; a heap keeps at most
/// 1 MiB free at its top.
pub(crate) fn fix_malloc_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before
    // any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

pub(crate) fn load_config(arg: &SourceArgs) -> Result<Config, CliError> {
    Ok(arg.source().load()?)
}

/// Loads the config and builds what `serve` would build from it (tables,
/// routes, certificates, resolvers, keys), so a config that passes here
/// does not fail at start or reload.
pub(crate) fn check_config(arg: SourceArgs) -> Result<(), CliError> {
    use sluice::daemon::privilege;
    let config = load_config(&arg)?;
    // As `serve` would run it: a root start with a file drops to `user`,
    // who must be able to read every key.
    // (A root start that `serve` would refuse is refused here too.)
    if privilege::is_root() && arg.config.config.is_some() {
        if let Some(account) = privilege::target(config.user.as_deref(), config.run_as_root)? {
            privilege::keys_readable(&config, &account)?;
            privilege::maildir_group(&config, Some(&account))?;
        }
    }
    for warning in sluice::daemon::check(config)? {
        eprintln!("sluice: {warning}");
    }
    println!("configuration ok");
    Ok(())
}

pub(crate) async fn serve(arg: SourceArgs) -> Result<(), CliError> {
    let config = load_config(&arg)?;
    // Past a file size limit, writes must fail with EFBIG (a full spool,
    // answered 452) instead of the default SIGXFSZ killing the server.
    // SAFETY: setting a signal to SIG_IGN has no memory effects.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // Thousands of sessions need thousands of descriptors: lift the soft
    // limit to the hard limit (the default soft limit is often 1024).
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    // Everything the daemon creates is its own only (0600/0700); the log
    // is made 0640 explicitly, Maildirs as `local.maildir_owner` says
    // (`deliver::maildir::owner`).
    // SAFETY: umask only sets the process's file mode creation mask.
    unsafe {
        libc::umask(0o077);
    }
    use sluice::daemon::privilege;
    // The embedded default (no --config: the quick start, loopback only,
    // spool under ./var) runs as whoever started it; a configuration file
    // must name an account, or say `run_as_root = true`.
    let account = match privilege::is_root() && arg.config.config.is_some() {
        true => privilege::target(config.user.as_deref(), config.run_as_root)?,
        false => None,
    };
    if privilege::is_root() && account.is_none() {
        eprintln!("sluice: warning: running as root (run_as_root = true)");
    }
    // The handlers go in before the daemon says it listens: a SIGHUP or
    // SIGTERM sent as soon as the `listening` event appears must reload or
    // stop it cleanly, not kill it by the signal's default action.
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let source = arg.source();
    let mut server = Server::start_as(config, account).await?;
    let mut control = server.take_control();
    for addr in &server.addrs {
        eprintln!("sluice: listening on {addr}");
    }
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => {
                server.reload(&source).await;
            }
            Some(call) = next_control(&mut control) => {
                if answer(&mut server, &source, call).await.is_break() {
                    break;
                }
            }
            _ = usr1.recv() => server.reopen_log(),
        }
    }
    eprintln!("sluice: shutting down");
    server.shutdown().await;
    Ok(())
}

/// The next control from the admin socket (never, without a channel).
pub(crate) async fn next_control(
    control: &mut Option<sluice::admin::control::ControlReceiver>,
) -> Option<sluice::admin::control::ControlCall> {
    match control {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Carries out one control; `Break` for stop (after answering).
pub(crate) async fn answer(
    server: &mut Server,
    source: &Source,
    call: sluice::admin::control::ControlCall,
) -> std::ops::ControlFlow<()> {
    use sluice::admin::control::{Control, ControlReply};
    let (reply, flow) = match call.action {
        Control::Reload => (
            ControlReply::Reload(server.reload(source).await),
            std::ops::ControlFlow::Continue(()),
        ),
        Control::Stop => (ControlReply::Stopping, std::ops::ControlFlow::Break(())),
        Control::Status => (
            ControlReply::Status(server.status(source)),
            std::ops::ControlFlow::Continue(()),
        ),
        Control::Config => (
            ControlReply::Config(server.running_config()),
            std::ops::ControlFlow::Continue(()),
        ),
    };
    let _ = call.reply.send(reply);
    flow
}
