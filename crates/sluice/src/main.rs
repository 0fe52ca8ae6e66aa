//! The `sluice` command: `serve`, plus the `bench` and `sink` tools.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use sluice::config::Config;
use sluice::daemon::Server;
use sluice::tools::{bench, sink};

const USAGE: &str = "usage:
  sluice serve [--config FILE]       run the MTA (embedded defaults without --config)
  sluice check-config [--config FILE]
  sluice sink --listen ADDR [--exit-after N] [--max-seconds S] [--save-dir DIR]
              [--message-ids FILE] [--test-replies]
  sluice bench --target ADDR [--sessions S] [--messages-per-session M] [--count N]
              [--size BYTES] [--recipients R] [--domains D] [--rate MSG_PER_S]
              [--interval SECS] [--max-seconds S] [--duration S] [--from ADDR]
              [--messages-per-session-max M2] [--recipient-template 'user{n}@example.com'
              --recipient-count U] [--unknown-percent P] [--ack-log FILE]
              [--retry-pause-ms MS]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let flags = match Flags::parse(&args[1..]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sluice: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cmd.as_str() {
        "serve" => runtime.block_on(serve(&flags)),
        "check-config" => check_config(&flags),
        "sink" => runtime.block_on(run_sink(&flags)),
        "bench" => runtime.block_on(run_bench(&flags)),
        "--version" | "version" => {
            println!("sluice {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command {other:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--name value` pairs and bare `--switch`es.
struct Flags(Vec<(String, Option<String>)>);

impl Flags {
    fn parse(args: &[String]) -> Result<Flags, String> {
        const SWITCHES: &[&str] = &["--test-replies"];
        let mut out = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if !a.starts_with("--") {
                return Err(format!("unexpected argument {a:?}"));
            }
            if SWITCHES.contains(&a.as_str()) {
                out.push((a.clone(), None));
            } else {
                let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
                out.push((a.clone(), Some(v.clone())));
            }
        }
        Ok(Flags(out))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{name}: bad number {v:?}")),
        }
    }

    fn allow_only(&self, names: &[&str]) -> Result<(), String> {
        for (n, _) in &self.0 {
            if !names.contains(&n.as_str()) {
                return Err(format!("unknown option {n}"));
            }
        }
        Ok(())
    }
}

fn load_config(flags: &Flags) -> Result<Config, String> {
    flags.allow_only(&["--config"])?;
    match flags.get("--config") {
        Some(path) => Config::load(&PathBuf::from(path)).map_err(|e| e.to_string()),
        None => Ok(Config::default()),
    }
}

/// Loads the config and builds what `serve` would build from it (tables,
/// routes), so a config that passes here does not fail at start.
fn check_config(flags: &Flags) -> Result<(), String> {
    let config = load_config(flags)?;
    let logger = sluice::log::Logger::disabled();
    let mailboxes = sluice::routing::mailboxes::VirtualMailboxes::build(
        &config.local,
        &config.tables,
        &config.data_dir,
        &logger,
    )?;
    sluice::routing::Router::new(
        &config.transport,
        config.delivery.relayhost.as_deref(),
        mailboxes.domains(),
    )?;
    println!("configuration ok");
    Ok(())
}

async fn serve(flags: &Flags) -> Result<(), String> {
    let config = load_config(flags)?;
    // Past a file size limit, writes must fail with EFBIG (a full spool,
    // answered 452) instead of the default SIGXFSZ killing the server.
    // SAFETY: setting a signal to SIG_IGN has no memory effects.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    raise_fd_limit();
    let server = Server::start(config).await.map_err(|e| e.to_string())?;
    for addr in &server.addrs {
        eprintln!("sluice: listening on {addr}");
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut hup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => server.reload(),
        }
    }
    eprintln!("sluice: shutting down");
    server.shutdown().await;
    Ok(())
}

/// Thousands of sessions need thousands of descriptors: lift the soft
/// limit to the hard limit (the default soft limit is often 1024).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

async fn run_sink(flags: &Flags) -> Result<(), String> {
    flags.allow_only(&[
        "--listen",
        "--exit-after",
        "--max-seconds",
        "--save-dir",
        "--message-ids",
        "--test-replies",
    ])?;
    let listen = flags.get("--listen").unwrap_or("127.0.0.1:2526");
    let opts = sink::SinkOptions {
        listen: Some(
            listen
                .parse()
                .map_err(|_| format!("--listen: bad address {listen:?}"))?,
        ),
        exit_after: flags
            .get("--exit-after")
            .map(|v| v.parse())
            .transpose()
            .map_err(|_| "--exit-after: bad number")?,
        record: false,
        save_dir: flags.get("--save-dir").map(PathBuf::from),
        message_ids: flags.get("--message-ids").map(PathBuf::from),
        test_replies: flags.has("--test-replies"),
    };
    let max_seconds = flags
        .get("--max-seconds")
        .map(|v| v.parse())
        .transpose()
        .map_err(|_| "--max-seconds: bad number")?;
    sink::run_cli(opts, max_seconds)
        .await
        .map_err(|e| e.to_string())
}

async fn run_bench(flags: &Flags) -> Result<(), String> {
    flags.allow_only(&[
        "--target",
        "--sessions",
        "--messages-per-session",
        "--count",
        "--size",
        "--recipients",
        "--domains",
        "--rate",
        "--interval",
        "--max-seconds",
        "--duration",
        "--from",
        "--messages-per-session-max",
        "--recipient-template",
        "--recipient-count",
        "--unknown-percent",
        "--ack-log",
        "--retry-pause-ms",
    ])?;
    let d = bench::BenchOptions::default();
    let target = flags.get("--target").unwrap_or("127.0.0.1:2525");
    let opts = bench::BenchOptions {
        target: target
            .parse()
            .map_err(|_| format!("--target: bad address {target:?}"))?,
        sessions: flags.num("--sessions", d.sessions)?,
        messages_per_session: flags
            .num("--messages-per-session", d.messages_per_session)?
            .max(1),
        count: flags.num("--count", d.count)?,
        size: flags.num("--size", d.size)?,
        recipients: flags.num("--recipients", d.recipients)?,
        domains: flags.num("--domains", d.domains)?,
        rate: flags
            .get("--rate")
            .map(|v| v.parse())
            .transpose()
            .map_err(|_| "--rate: bad number")?,
        interval: Duration::from_secs_f64(flags.num("--interval", 1.0f64)?.max(0.1)),
        max_seconds: flags
            .get("--max-seconds")
            .map(|v| v.parse())
            .transpose()
            .map_err(|_| "--max-seconds: bad number")?,
        from: flags.get("--from").unwrap_or(&d.from).to_string(),
        messages_per_session_max: flags.num("--messages-per-session-max", 0)?,
        recipient_template: flags.get("--recipient-template").map(str::to_string),
        recipient_count: flags.num("--recipient-count", d.recipient_count)?,
        unknown_percent: flags.num("--unknown-percent", 0.0)?,
        ack_log: flags.get("--ack-log").map(PathBuf::from),
        retry_pause: Duration::from_millis(
            flags.num("--retry-pause-ms", d.retry_pause.as_millis() as u64)?,
        ),
        stop: None,
    };
    // --duration: run for that long, however many messages that is.
    let mut opts = opts;
    if let Some(secs) = flags.get("--duration") {
        let secs: u64 = secs.parse().map_err(|_| "--duration: bad number")?;
        opts.max_seconds = Some(secs);
        if flags.get("--count").is_none() {
            opts.count = u64::MAX / 2;
        }
    }
    // SIGTERM / SIGINT: stop gracefully (messages in flight finish, the ack
    // log is complete, the BENCH line is printed).
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    opts.stop = Some(stop.clone());
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("bench: stopping (signal): no new messages, waiting for those in flight");
            stop.notify_one();
        });
    }
    let report = bench::run(opts, std::io::stdout())
        .await
        .map_err(|e| format!("--ack-log: {e}"))?;
    println!(
        "BENCH messages={} errors={} seconds={:.3} msgs_per_s={:.1} rejected_5xx={} temp_4xx={}",
        report.messages,
        report.errors,
        report.seconds,
        report.messages as f64 / report.seconds.max(1e-9),
        report.rejected_5xx,
        report.temp_4xx
    );
    Ok(())
}
