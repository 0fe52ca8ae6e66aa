//! The `sluice` command: `serve`, `check-config`, `config`, `address`,
//! `lookup`, `reload`, `stop`, `status`, `queue`, `hash-password`,
//! `dkim-keygen` and the cluster's PKI, and sendmail(1)/mailq/newaliases
//! when invoked by those names. `args.rs` is the command line, the other
//! modules what the commands do. The load generator and sink are
//! `sluice-bench`'s.

mod args;
mod ask;
mod queue;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use sluice::admin::control::Control;

use args::{Cli, Command, KeygenArgs};
use ask::{address, control, lookup, newaliases, show_config};
use queue::queue;
use serve::{check_config, fix_malloc_thresholds, serve};

pub(crate) fn main() -> ExitCode {
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
    if let Some(code) = hidden() {
        return code;
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
        Command::Newaliases(c) => runtime.block_on(newaliases(c)),
        Command::Stop(c) => runtime.block_on(control(c, Control::Stop)),
        Command::Status(c) => runtime.block_on(control(c, Control::Status)),
        Command::HashPassword => hash_password(),
        Command::DkimKeygen(a) => dkim_keygen(a),
        Command::ImportPostfix { dir, out, hostname } => {
            return import_postfix(&dir, &out, hostname);
        }
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

/// `sluice import-postfix`: the report's summary on stdout; exit 1 when
/// the translation does not load, 2 when it could not be made.
fn import_postfix(dir: &Path, out: &Path, hostname: Option<String>) -> ExitCode {
    use sluice::tools::import;
    let host = hostname.unwrap_or_else(sluice::config::source::system_hostname);
    let made = import::translate(dir, &host).and_then(|i| import::write(&i, out).map(|()| i));
    match made {
        Ok(imported) => {
            println!("{}", imported.report.summary());
            println!(
                "wrote {}/sluice.toml and {}/report.txt",
                out.display(),
                out.display()
            );
            match imported.load_error {
                None => ExitCode::SUCCESS,
                Some(e) => {
                    eprintln!("sluice: the translated configuration does not load: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::from(2)
        }
    }
}

/// The subcommands that are not `Cli`'s, so no page, completion or help
/// lists them: `sluice generate man|completions`, for packagers; `sluice
/// launcher`, the root process `serve` starts before it gives root up
/// (`deliver::launch`; no runtime: it forks).
fn hidden() -> Option<ExitCode> {
    match std::env::args().nth(1).as_deref() {
        Some("generate") => Some(sluice::tools::manual::main(
            Cli::command(),
            std::env::args().skip(1),
        )),
        Some("launcher") => Some(sluice::deliver::launch::server::main()),
        _ => None,
    }
}

/// Why a command failed (printed as `sluice: <error>`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
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

/// `sluice hash-password`: one line on stdin (without its newline).
pub(crate) fn hash_password() -> Result<(), CliError> {
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
pub(crate) fn sendmail_main(args: &[String]) -> ExitCode {
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

/// `sluice dkim-keygen`.
/// Names the files a `cluster-*` command wrote.
pub(crate) fn made(
    files: Result<Vec<PathBuf>, sluice::tools::cluster_pki::PkiError>,
) -> Result<(), CliError> {
    for file in files? {
        println!("{}", file.display());
    }
    Ok(())
}

pub(crate) fn dkim_keygen(a: KeygenArgs) -> Result<(), CliError> {
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
