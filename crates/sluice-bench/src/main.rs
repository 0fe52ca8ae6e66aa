//! `sluice-bench`: the load generator (`bench`) and the counting sink
//! (`sink`) that `bench/*.sh` and the tests use, kept out of the
//! production binary. Arguments are parsed by clap.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use sluice_bench::{bench, sink};

#[derive(Parser)]
#[command(
    name = "sluice-bench",
    version,
    about = "Sluice's load generator and SMTP sink"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// An SMTP sink that accepts and discards (or records) mail.
    Sink(SinkArgs),
    /// An SMTP load generator.
    Bench(BenchArgs),
}

#[derive(Args)]
struct SinkArgs {
    #[arg(long, default_value = "127.0.0.1:2526")]
    listen: SocketAddr,
    /// Exit after this many messages.
    #[arg(long)]
    exit_after: Option<u64>,
    #[arg(long)]
    max_seconds: Option<u64>,
    /// Save every message as a file here.
    #[arg(long)]
    save_dir: Option<PathBuf>,
    /// Append every received Message-ID to this file.
    #[arg(long)]
    message_ids: Option<PathBuf>,
    /// Answer test addresses (reject-this@, defer-me@, ...) with errors.
    #[arg(long)]
    test_replies: bool,
    /// Offer STARTTLS (self-signed certificate made at start).
    #[arg(long)]
    starttls: bool,
    /// Listen here too (repeatable), counted with --listen.
    #[arg(long)]
    also_listen: Vec<SocketAddr>,
    /// A tarpit here (repeatable): every reply comes after --tarpit-ms.
    #[arg(long)]
    tarpit: Vec<SocketAddr>,
    #[arg(long, default_value_t = 5000)]
    tarpit_ms: u64,
    /// A dead host here (repeatable): listens, never accepts.
    #[arg(long)]
    blackhole: Vec<SocketAddr>,
}

#[derive(Args)]
struct BenchArgs {
    /// Use STARTTLS on every connection (any certificate accepted).
    #[arg(long)]
    starttls: bool,
    #[arg(long, default_value = "127.0.0.1:2525")]
    target: SocketAddr,
    #[arg(long, default_value_t = 10)]
    sessions: usize,
    #[arg(long, default_value_t = 1)]
    messages_per_session: u64,
    /// Messages per session drawn from messages-per-session..=this.
    #[arg(long, default_value_t = 0)]
    messages_per_session_max: u64,
    #[arg(long)]
    count: Option<u64>,
    /// Message size in octets, headers included.
    #[arg(long, default_value_t = 400)]
    size: usize,
    #[arg(long, default_value_t = 1)]
    recipients: usize,
    #[arg(long, default_value_t = 5)]
    domains: usize,
    /// Messages per second over all sessions (default: as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds per progress line.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    #[arg(long, conflicts_with = "duration")]
    max_seconds: Option<u64>,
    /// Run this long, however many messages that is (unless --count).
    #[arg(long)]
    duration: Option<u64>,
    #[arg(long)]
    from: Option<String>,
    /// Recipients from a template, `{n}` in 1..=recipient-count.
    #[arg(long)]
    recipient_template: Option<String>,
    #[arg(long)]
    recipient_count: Option<u64>,
    /// Share of recipients (percent) made unknown on purpose.
    #[arg(long, default_value_t = 0.0)]
    unknown_percent: f64,
    /// Append the Message-ID of every acknowledged message to this file.
    #[arg(long)]
    ack_log: Option<PathBuf>,
    /// Write an SVG chart of the per-interval rates here when done.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Pause of a session after a failed connection (ms).
    #[arg(long)]
    retry_pause_ms: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice-bench: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Sink(a) => runtime.block_on(run_sink(a)),
        Command::Bench(a) => runtime.block_on(run_bench(a)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why a tool stopped (printed as `sluice-bench: <error>`).
#[derive(Debug)]
enum ToolError {
    Io(std::io::Error),
    AckLog(std::io::Error),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::Io(e) => write!(f, "{e}"),
            ToolError::AckLog(e) => write!(f, "--ack-log: {e}"),
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> ToolError {
        ToolError::Io(e)
    }
}

async fn run_sink(a: SinkArgs) -> Result<(), ToolError> {
    let opts = sink::SinkOptions {
        listen: Some(a.listen),
        exit_after: a.exit_after,
        record: false,
        save_dir: a.save_dir,
        message_ids: a.message_ids,
        test_replies: a.test_replies,
        starttls: a.starttls,
        ..Default::default()
    };
    let extra = sink::Extra {
        listen: a.also_listen,
        tarpit: a.tarpit,
        tarpit_delay: Duration::from_millis(a.tarpit_ms),
        blackhole: a.blackhole,
    };
    Ok(sink::run_cli(opts, extra, a.max_seconds).await?)
}

async fn run_bench(a: BenchArgs) -> Result<(), ToolError> {
    let d = bench::BenchOptions::default();
    let mut opts = bench::BenchOptions {
        target: a.target,
        sessions: a.sessions,
        messages_per_session: a.messages_per_session.max(1),
        count: a.count.unwrap_or(d.count),
        size: a.size,
        recipients: a.recipients,
        domains: a.domains,
        rate: a.rate,
        interval: Duration::from_secs_f64(a.interval.max(0.1)),
        max_seconds: a.max_seconds,
        from: a.from.unwrap_or(d.from),
        messages_per_session_max: a.messages_per_session_max,
        recipient_template: a.recipient_template,
        recipient_count: a.recipient_count.unwrap_or(d.recipient_count),
        unknown_percent: a.unknown_percent,
        ack_log: a.ack_log,
        chart: a.chart,
        retry_pause: a
            .retry_pause_ms
            .map_or(d.retry_pause, Duration::from_millis),
        stop: None,
        starttls: a.starttls,
    };
    // --duration: run for that long, however many messages that is.
    if let Some(secs) = a.duration {
        opts.max_seconds = Some(secs);
        if a.count.is_none() {
            opts.count = u64::MAX / 2;
        }
    }
    // SIGTERM / SIGINT: stop gracefully (messages in flight finish, the ack
    // log is complete, the BENCH line is printed).
    let stop = std::sync::Arc::new(tokio::sync::Notify::new());
    opts.stop = Some(stop.clone());
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
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
        .map_err(ToolError::AckLog)?;
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
