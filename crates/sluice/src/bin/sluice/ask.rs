//! The administrator's questions: `sluice config` (postconf), `address`
//! (sendmail -bv), `lookup` (postmap -q), and the running daemon's
//! controls `reload`, `stop`, `status` (postfix reload/stop/status).

use std::process::ExitCode;

use sluice::admin::control::Control;

use crate::args::{ConfigArg, ShowConfigArgs, SourceArgs};
use crate::CliError;

/// `sluice reload`, `stop`, `status`: the admin socket's controls.
pub(crate) async fn control(arg: ConfigArg, action: Control) -> Result<(), CliError> {
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
pub(crate) async fn address(
    source: SourceArgs,
    json: bool,
    addresses: Vec<String>,
) -> Result<(), CliError> {
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
pub(crate) async fn lookup(source: SourceArgs, table: String, key: String) -> ExitCode {
    use sluice::tools::address::{lookup, LookupCliError};
    let config = match source.system_source().load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(2);
        }
    };
    match lookup(&config, &table, &key).await {
        Ok(Some(value)) => {
            println!("{value}");
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
pub(crate) async fn show_config(a: ShowConfigArgs) -> Result<(), CliError> {
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
pub(crate) async fn running_config(
    arg: &ConfigArg,
    json: bool,
) -> Result<Option<toml::Table>, CliError> {
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
pub(crate) fn merge(into: &mut toml::Table, more: toml::Table) {
    for (key, value) in more {
        match (into.get_mut(&key), value) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// `sluice newaliases`: every file of `alias_database` read as the
/// daemon reads it, postalias's warnings printed; a running daemon then
/// reloads (not running: nothing more to do).
pub(crate) async fn newaliases(arg: ConfigArg) -> Result<(), CliError> {
    let path = sluice::tools::locate::config_file(arg.config.as_deref());
    let config = match &path {
        Some(p) => sluice::config::Config::load(p)?,
        None => sluice::config::Config::default(),
    };
    let files = config.system.alias_database().to_vec();
    let (aliases, warnings) = sluice::routing::system::read_aliases(&files)
        .map_err(|e| CliError::Io(std::io::Error::other(e.to_string())))?;
    for w in &warnings {
        eprintln!("sluice: {w}");
    }
    println!(
        "sluice: newaliases: {} aliases in {} file(s)",
        aliases.len(),
        files.len()
    );
    let running = match sluice::tools::locate::data_dir(arg.config.as_deref()) {
        Ok(dir) => {
            let socket = sluice::admin::socket_path(&dir);
            tokio::net::UnixStream::connect(&socket).await.is_ok()
        }
        Err(_) => false,
    };
    match running {
        true => control(arg, Control::Reload).await,
        false => Ok(()),
    }
}
