//! The `sluice` command: `serve`, `check-config`, `queue`, `hash-password`
//! and `dkim-keygen`, and sendmail(1)/mailq when invoked by those names.
//! Arguments are parsed by clap (generated help, typed values, unknown
//! options refused). The load generator and sink are `sluice-bench`'s.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use sluice::admin::control::Control;
use sluice::config::source::Source;
use sluice::config::Config;
use sluice::daemon::Server;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Sluice mail transfer agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the MTA (the embedded default configuration without --config).
    Serve(SourceArgs),
    /// Check a configuration: parse it and build its tables and routes.
    CheckConfig(SourceArgs),
    /// Print the settings in force, like postconf (-n: only those set,
    /// -d: the defaults); KEYs are settings or sections (`smtpd.listen`).
    Config(ShowConfigArgs),
    /// Where an address goes, like sendmail -bv: RCPT's answer, aliases,
    /// the next hop and its TLS level. Nothing is sent.
    Address {
        #[command(flatten)]
        source: SourceArgs,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The addresses to explain.
        #[arg(required = true)]
        addresses: Vec<String>,
    },
    /// Look a key up in a table of `[tables]`, like postmap -q (exit 1:
    /// not found; 75: the table could not answer).
    Lookup {
        #[command(flatten)]
        source: SourceArgs,
        /// The table's name in `[tables]`.
        table: String,
        /// The key, as given (no address search order).
        key: String,
    },
    /// Make the running daemon read its configuration again (postfix
    /// reload); prints what it applied, or why it refused (exit 1).
    Reload(ConfigArg),
    /// Stop the running daemon (postfix stop): it drains and exits;
    /// returns once it has.
    Stop(ConfigArg),
    /// Is the daemon running (postfix status): pid, uptime, listeners
    /// (exit 1: not running).
    Status(ConfigArg),
    /// Read a password on stdin, print its argon2id hash for an `[auth]` table.
    HashPassword,
    /// Make a DKIM key pair: the private key to a file, the DNS record to stdout.
    DkimKeygen(KeygenArgs),
    /// Administer the queue of a running daemon (like postqueue/postsuper).
    Queue(QueueArgs),
    /// Make the cluster's own CA for the shadow link: DIR/ca.pem, DIR/ca.key.
    ClusterCa {
        /// Where to write them (never overwritten).
        dir: PathBuf,
    },
    /// Make a node's shadow-link key and certificate, signed by the cluster CA.
    ClusterCert {
        /// The CA's directory (`sluice cluster-ca`).
        #[arg(long)]
        ca: PathBuf,
        /// The node's name (`[cluster] node`).
        #[arg(long)]
        node: String,
        /// Where to write NODE.pem and NODE.key (never overwritten).
        out: PathBuf,
    },
}

#[derive(Args)]
struct QueueArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: QueueAction,
}

#[derive(Subcommand)]
enum QueueAction {
    /// The queue, mailq-style (filters combine).
    List {
        /// Only mail from this envelope sender (the whole address, any case).
        #[arg(long)]
        sender: Option<String>,
        /// Only mail to this recipient (the whole address, any case).
        #[arg(long)]
        recipient: Option<String>,
        /// Only mail with a recipient still to deliver in this domain.
        #[arg(long)]
        domain: Option<String>,
        /// active, deferred or hold.
        #[arg(long)]
        state: Option<String>,
    },
    /// One message: envelope, recipients, last reasons, attempts and the
    /// next retry, headers, log lines; with --body the whole message.
    Show {
        /// The queue ID.
        id: String,
        /// Print the whole message, header and body, after it (postcat -q).
        #[arg(long)]
        body: bool,
    },
    /// Retry deferred mail now (all, one message, or one domain's).
    Flush {
        /// The queue ID of one message.
        id: Option<String>,
        /// Only deferred mail with a recipient in this domain.
        #[arg(long)]
        domain: Option<String>,
    },
    /// Delete messages (no bounce): IDs, ALL, - (IDs on stdin), or a filter.
    Delete {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        ids: Vec<String>,
        /// Every deferred message (with --older-than: those older).
        #[arg(long)]
        all_deferred: bool,
        /// Seconds since arrival.
        #[arg(long)]
        older_than: Option<u64>,
    },
    /// Keep messages, do not deliver them (postsuper -h).
    Hold {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Deliver held messages again (postsuper -H).
    Release {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Return messages to their senders now.
    Bounce {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Deliver messages again from scratch now, out of hold, their attempt
    /// count and backoff forgotten (postsuper -r).
    Requeue {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

#[derive(Args)]
struct ShowConfigArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Only the settings the file and -o set (postconf -n).
    #[arg(short = 'n', conflicts_with = "defaults")]
    set: bool,
    /// The defaults (postconf -d).
    #[arg(short = 'd')]
    defaults: bool,
    /// JSON instead of TOML.
    #[arg(long)]
    json: bool,
    /// Print passwords and secrets instead of "(hidden)".
    #[arg(long)]
    show_secrets: bool,
    /// What the running daemon loaded (asked on its admin socket), with
    /// the addresses it listens on and its tables.
    #[arg(long, conflicts_with_all = ["set", "defaults", "show_secrets"])]
    running: bool,
    /// Settings (`hostname`, `smtpd.listen`) or sections (`smtpd`).
    keys: Vec<String>,
}

#[derive(Args)]
struct KeygenArgs {
    /// The signing domain (d=).
    #[arg(long)]
    domain: String,
    /// The selector (s=): the record is SELECTOR._domainkey.DOMAIN.
    #[arg(long)]
    selector: String,
    /// rsa or ed25519.
    #[arg(long, default_value = "rsa")]
    algorithm: String,
    /// RSA key size.
    #[arg(long, default_value_t = 2048)]
    bits: usize,
    /// Where to write the private key (PEM, mode 0600; never overwritten).
    #[arg(long)]
    out: PathBuf,
}

/// A configuration and `-o` overrides (`serve`, `check-config`, `config`).
#[derive(Args)]
struct SourceArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Override one setting, e.g. `-o smtpd.listen=127.0.0.1:2626` or
    /// `-o queue.minimal_backoff_secs=60` (TOML values; a list setting
    /// takes `a,b`). Repeatable; kept across reloads.
    #[arg(short = 'o', value_name = "KEY=VALUE")]
    overrides: Vec<sluice::config::source::Override>,
}

impl SourceArgs {
    fn source(&self) -> Source {
        Source::new(self.config.config.as_deref(), self.overrides.clone())
    }

    /// For an administrator's tool: the file postconf would read
    /// (`tools::locate::config_file`), else the embedded default.
    fn system_source(&self) -> Source {
        let path = sluice::tools::locate::config_file(self.config.config.as_deref());
        Source::new(path.as_deref(), self.overrides.clone())
    }
}

#[derive(Args)]
struct ConfigArg {
    /// The TOML configuration file (before or after a subcommand).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
}

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
fn fix_malloc_thresholds() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before
    // any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

fn main() -> ExitCode {
    fix_malloc_thresholds();
    // Invoked as `sendmail` or `mailq` (symlinks, as Postfix ships).
    let argv0 = std::env::args().next().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if name == "sendmail" || std::env::args().nth(1).as_deref() == Some("sendmail") {
        let skip = if name == "sendmail" { 1 } else { 2 };
        let args: Vec<String> = std::env::args().skip(skip).collect();
        return sendmail_main(&args);
    }
    if name == "newaliases" {
        // Postfix's newaliases is `sendmail -bi`.
        let args: Vec<String> = ["-bi".to_string()]
            .into_iter()
            .chain(std::env::args().skip(1))
            .collect();
        return sendmail_main(&args);
    }
    if name == "mailq" {
        // Postfix's mailq is `sendmail -bp`: the same -C and the same
        // default configuration (/etc/sluice/sluice.toml).
        // (`--config F`, as `sluice queue` takes it, is `-C F`.)
        let args: Vec<String> = ["-bp".to_string()]
            .into_iter()
            .chain(
                std::env::args()
                    .skip(1)
                    .map(|a| match a.strip_prefix("--config") {
                        Some("") => "-C".to_string(),
                        Some(v) if v.starts_with('=') => format!("-C{}", &v[1..]),
                        _ => a,
                    }),
            )
            .collect();
        return sendmail_main(&args);
    }
    // `sluice generate man|completions`, for packagers: not one of `Cli`'s
    // subcommands, so no page, completion or help lists it.
    if std::env::args().nth(1).as_deref() == Some("generate") {
        return sluice::tools::manual::main(Cli::command(), std::env::args().skip(1));
    }
    let cli = Cli::parse();
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
    let result = match cli.command {
        Command::Serve(c) => runtime.block_on(serve(c)),
        Command::CheckConfig(c) => check_config(c),
        Command::Config(a) => runtime.block_on(show_config(a)),
        Command::Address {
            source,
            json,
            addresses,
        } => runtime.block_on(address(source, json, addresses)),
        Command::Lookup { source, table, key } => {
            return runtime.block_on(lookup(source, table, key));
        }
        Command::Reload(c) => runtime.block_on(control(c, Control::Reload)),
        Command::Stop(c) => runtime.block_on(control(c, Control::Stop)),
        Command::Status(c) => runtime.block_on(control(c, Control::Status)),
        Command::HashPassword => hash_password(),
        Command::DkimKeygen(a) => dkim_keygen(a),
        Command::Queue(a) => runtime.block_on(queue(a)),
        Command::ClusterCa { dir } => made(sluice::tools::cluster_pki::make_ca(&dir)),
        Command::ClusterCert { ca, node, out } => {
            made(sluice::tools::cluster_pki::make_node(&ca, &node, &out))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why a command failed (printed as `sluice: <error>`).
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Config(#[from] sluice::config::ConfigError),
    #[error(transparent)]
    Build(#[from] sluice::daemon::BuildError),
    #[error(transparent)]
    Start(#[from] sluice::daemon::StartError),
    #[error(transparent)]
    Privilege(#[from] sluice::daemon::privilege::PrivilegeError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("{0}: no such setting or section (`sluice config` lists them)")]
    NoSetting(String),
    #[error("not running: nothing answers at {}", .0.display())]
    NotRunning(PathBuf),
    #[error("the daemon refused")]
    Refused,
    #[error("the daemon is still running after 300 s")]
    StillRunning,
    #[error("no password on stdin")]
    NoPassword,
    #[error("{0}")]
    Hash(argon2::password_hash::Error),
    #[error("--algorithm {0}: want rsa or ed25519")]
    Algorithm(String),
    #[error(transparent)]
    Keygen(#[from] sluice::tools::keygen::KeygenError),
    #[error(transparent)]
    Queue(#[from] sluice::tools::queue_cli::CallError),
    #[error(transparent)]
    Locate(#[from] sluice::tools::locate::LocateError),
    #[error(transparent)]
    Pki(#[from] sluice::tools::cluster_pki::PkiError),
}

fn load_config(arg: &SourceArgs) -> Result<Config, CliError> {
    Ok(arg.source().load()?)
}

/// `sluice reload`, `stop`, `status`: the admin socket's controls.
async fn control(arg: ConfigArg, action: Control) -> Result<(), CliError> {
    use sluice::admin::control::ControlReply;
    use sluice::admin::protocol::Request;
    use sluice::tools::queue_cli;
    let data_dir = sluice::tools::locate::data_dir(arg.config.as_deref())?;
    let request = Request::Control { action };
    let response = match queue_cli::call(&data_dir, &request).await {
        Err(queue_cli::CallError::Unreachable { path, .. }) if action == Control::Status => {
            return Err(CliError::NotRunning(path));
        }
        other => other?,
    };
    match response.control {
        Some(ControlReply::Reload(r)) => {
            println!("sluice: reload: {}", r.text);
            if r.result == "refused" {
                return Err(CliError::Refused);
            }
        }
        Some(ControlReply::Stopping) => {
            let socket = sluice::admin::socket_path(&data_dir);
            eprintln!("sluice: stopping (the daemon drains, then exits)");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
            while tokio::net::UnixStream::connect(&socket).await.is_ok() {
                if std::time::Instant::now() > deadline {
                    return Err(CliError::StillRunning);
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            println!("sluice: stopped");
        }
        Some(ControlReply::Status(s)) => {
            println!(
                "sluice: running, pid {}, version {}, up {} s, configuration {}{}",
                s.pid,
                s.version,
                s.uptime_secs,
                s.config,
                match s.overrides {
                    0 => String::new(),
                    n => format!(" with {n} -o override(s)"),
                }
            );
            println!("sluice: listening on {}", s.listeners.join(", "));
            if let Some(m) = s.metrics {
                println!("sluice: metrics and dashboard on http://{m}/");
            }
        }
        _ => return Err(CliError::Refused),
    }
    Ok(())
}

/// `sluice address`: sendmail -bv.
async fn address(source: SourceArgs, json: bool, addresses: Vec<String>) -> Result<(), CliError> {
    use sluice::tools::address::{explain, text};
    let config = source.system_source().load()?;
    for a in addresses {
        let report = explain(&config, &a).await?;
        match json {
            true => println!("{}", serde_json::to_string(&report)?),
            false => print!("{}", text(&report)),
        }
    }
    Ok(())
}

/// `sluice lookup`: postmap -q; exit 1 when the key is not there, 75 when
/// the table cannot answer (EX_TEMPFAIL).
async fn lookup(source: SourceArgs, table: String, key: String) -> ExitCode {
    use sluice::tools::address::{lookup, LookupCliError};
    let config = match source.system_source().load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(2);
        }
    };
    match lookup(&config, &table, &key).await {
        Ok(Some(values)) => {
            println!("{}", values.join(", "));
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::from(1),
        Err(e @ LookupCliError::TryLater(_)) => {
            eprintln!("sluice: {table}: {e}");
            ExitCode::from(75)
        }
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::from(2)
        }
    }
}

/// `sluice config`: postconf.
async fn show_config(a: ShowConfigArgs) -> Result<(), CliError> {
    use sluice::config::show::{select, settings, to_toml, Which};
    let which = match (a.set, a.defaults) {
        (true, _) => Which::Set,
        (_, true) => Which::Defaults,
        _ => Which::Effective,
    };
    let all = match a.running {
        true => match running_config(&a.source.config, a.json).await? {
            Some(settings) => settings,
            None => return Ok(()),
        },
        false => settings(&a.source.system_source(), which, a.show_secrets)?,
    };
    let mut shown = toml::Table::new();
    for key in &a.keys {
        let one = select(&all, key).ok_or_else(|| CliError::NoSetting(key.clone()))?;
        merge(&mut shown, one);
    }
    let shown = if a.keys.is_empty() { all } else { shown };
    match a.json {
        true => println!("{}", serde_json::to_string_pretty(&shown)?),
        false => print!("{}", to_toml(&shown)),
    }
    Ok(())
}

/// The running daemon's settings; with `json`, everything it said is
/// printed here (None); as TOML, its listeners and tables head the
/// settings as comments.
async fn running_config(arg: &ConfigArg, json: bool) -> Result<Option<toml::Table>, CliError> {
    use sluice::admin::control::ControlReply;
    use sluice::admin::protocol::Request;
    let data_dir = sluice::tools::locate::data_dir(arg.config.as_deref())?;
    let request = Request::Control {
        action: Control::Config,
    };
    let response = sluice::tools::queue_cli::call(&data_dir, &request).await?;
    let Some(ControlReply::Config(running)) = response.control else {
        return Err(CliError::Refused);
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&running)?);
        return Ok(None);
    }
    println!(
        "# the running daemon: listening on {}",
        running.listeners.join(", ")
    );
    for (name, kind) in &running.tables {
        println!("# table {name}: {kind}");
    }
    let settings: toml::Table = serde_json::from_value(running.settings)?;
    Ok(Some(settings))
}

/// Puts `more`'s keys into `into`, merging sections both have.
fn merge(into: &mut toml::Table, more: toml::Table) {
    for (key, value) in more {
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// `sluice hash-password`: one line on stdin (without its newline).
fn hash_password() -> Result<(), CliError> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(CliError::NoPassword);
    }
    let hash = sluice::receive::smtp::auth::hash_password(password).map_err(CliError::Hash)?;
    println!("{hash}");
    Ok(())
}

/// `sendmail …` (or `sluice sendmail …`): sendmail(1)'s interface.
fn sendmail_main(args: &[String]) -> ExitCode {
    use sluice::tools::sendmail as sm;
    let code = match sm::parse(args) {
        Err(e) => {
            eprintln!("sendmail: {e}");
            sm::EX_USAGE
        }
        Ok(opts) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Ok(rt) => rt.block_on(sm::run(opts)),
                Err(e) => {
                    eprintln!("sendmail: {e}");
                    sm::EX_SOFTWARE
                }
            }
        }
    };
    ExitCode::from(code as u8)
}

/// `sluice queue …`.
async fn queue(a: QueueArgs) -> Result<(), CliError> {
    use sluice::admin::protocol::Request;
    use sluice::tools::queue_cli;
    let data_dir = sluice::tools::locate::data_dir(a.config.config.as_deref())?;
    let request = queue_request(a.action)?;
    let listing = matches!(request, Request::List { .. });
    let show = matches!(request, Request::Show { .. } | Request::ShowMessage { .. });
    let response = queue_cli::call(&data_dir, &request).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&response)?);
    } else if show {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(queue_cli::show(&response).as_bytes())?;
        if let Some(message) = queue_cli::message(&response) {
            out.write_all(b"\nmessage:\n")?;
            out.write_all(&message)?;
        }
    } else if listing {
        print!("{}", queue_cli::mailq(&response.messages));
    } else {
        println!("{}", queue_cli::tally(&response));
    }
    Ok(())
}

/// The request a `sluice queue` command makes (IDs named `-` are read
/// from standard input).
fn queue_request(action: QueueAction) -> Result<sluice::admin::protocol::Request, CliError> {
    use sluice::admin::protocol::{Filter, Op, Request};
    use sluice::tools::queue_cli::targets;
    let apply = |op, ids: Vec<String>| -> Result<Request, CliError> {
        let (ids, all) = targets(ids, std::io::stdin().lock())?;
        Ok(Request::Apply { op, ids, all })
    };
    Ok(match action {
        QueueAction::List {
            sender,
            recipient,
            domain,
            state,
        } => Request::List {
            filter: Filter {
                sender,
                recipient,
                domain,
                state,
                older_than_secs: None,
            },
        },
        QueueAction::Show { id, body: false } => Request::Show { id },
        QueueAction::Show { id, body: true } => Request::ShowMessage { id },
        QueueAction::Flush { id, domain } => Request::Flush { id, domain },
        QueueAction::Delete {
            ids,
            all_deferred,
            older_than,
        } if ids.is_empty() => Request::Delete {
            ids,
            all_deferred,
            older_than_secs: older_than,
        },
        QueueAction::Delete { ids, .. } => apply(Op::Delete, ids)?,
        QueueAction::Hold { ids } => apply(Op::Hold, ids)?,
        QueueAction::Release { ids } => apply(Op::Release, ids)?,
        QueueAction::Bounce { ids } => apply(Op::Bounce, ids)?,
        QueueAction::Requeue { ids } => apply(Op::Requeue, ids)?,
    })
}

/// `sluice dkim-keygen`.
/// Names the files a `cluster-*` command wrote.
fn made(files: Result<Vec<PathBuf>, sluice::tools::cluster_pki::PkiError>) -> Result<(), CliError> {
    for file in files? {
        println!("{}", file.display());
    }
    Ok(())
}

fn dkim_keygen(a: KeygenArgs) -> Result<(), CliError> {
    use sluice::tools::keygen::{keygen, Algorithm};
    let algorithm = match a.algorithm.as_str() {
        "rsa" => Algorithm::Rsa(a.bits),
        "ed25519" => Algorithm::Ed25519,
        other => return Err(CliError::Algorithm(other.to_string())),
    };
    let record = keygen(algorithm, &a.domain, &a.selector, &a.out)?;
    eprintln!(
        "private key written to {}; publish this record:",
        a.out.display()
    );
    println!("{record}");
    Ok(())
}

/// Loads the config and builds what `serve` would build from it (tables,
/// routes, certificates, resolvers, keys), so a config that passes here
/// does not fail at start or reload.
fn check_config(arg: SourceArgs) -> Result<(), CliError> {
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

async fn serve(arg: SourceArgs) -> Result<(), CliError> {
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
async fn next_control(
    control: &mut Option<sluice::admin::control::ControlReceiver>,
) -> Option<sluice::admin::control::ControlCall> {
    match control {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Carries out one control; `Break` for stop (after answering).
async fn answer(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_may_come_before_or_after_the_queue_subcommand() {
        for args in [
            ["sluice", "queue", "list", "--config", "f.toml"],
            ["sluice", "queue", "--config", "f.toml", "list"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let Command::Queue(q) = cli.command else {
                panic!("{args:?}: not the queue command");
            };
            assert_eq!(q.config.config, Some(PathBuf::from("f.toml")), "{args:?}");
        }
    }

    /// Every argument shows help in `--help`, the man pages and the
    /// completions (newcomer review, friction 24).
    #[test]
    fn every_argument_and_subcommand_has_help() {
        let missing = sluice::tools::manual::undocumented(Cli::command());
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
