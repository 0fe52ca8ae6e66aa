//! Where a client tool (`sendmail`, `mailq`, `sluice queue`) finds the
//! running daemon's sockets: the data_dir of the configuration it names,
//! else a fixed, absolute place, as Postfix's sendmail finds
//! `public/pickup` under its queue directory.
//!
//! Trust: the current directory and the environment of the user are the
//! user's; a directory others can write (`/tmp`, an upload directory) may
//! hold a planted `./var/public/submit.sock`. So the tools never use a
//! relative data_dir and never fall back to built-in defaults: the order
//! is `-C`/`--config`, `$SLUICE_CONFIG`, /etc/sluice/sluice.toml (readable
//! by root and the daemon's group only), /etc/sluice/client.toml (a
//! one-line, world-readable file naming data_dir, for a site whose spool
//! is elsewhere), then the package's spool, /var/spool/sluice.
//!
//! Invariant: every path returned is absolute; a configuration named
//! explicitly that cannot be read is an error, never skipped.

use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError};

/// The system configuration (the package's).
pub const SYSTEM_CONFIG: &str = "/etc/sluice/sluice.toml";
/// A world-readable file that names data_dir for unprivileged clients.
pub const CLIENT_CONFIG: &str = "/etc/sluice/client.toml";
/// The package's data_dir: where the sockets are when nothing else says.
pub const PACKAGE_DATA_DIR: &str = "/var/spool/sluice";

/// Why the daemon's data_dir cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "{}: data_dir {} is relative; client tools use only an absolute data_dir (a relative one names whatever the current directory holds)",
        config.display(),
        data_dir.display()
    )]
    Relative { config: PathBuf, data_dir: PathBuf },
    #[error("{}: {why}", path.display())]
    Client { path: PathBuf, why: String },
}

/// The client file's one setting.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    data_dir: PathBuf,
}

/// The daemon's data_dir for a client given `explicit` (`-C`/`--config`).
pub fn data_dir(explicit: Option<&Path>) -> Result<PathBuf, LocateError> {
    let named = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLUICE_CONFIG").map(PathBuf::from));
    if let Some(path) = named {
        return absolute(&path, data_dir_of(&path)?);
    }
    match data_dir_of(Path::new(SYSTEM_CONFIG)) {
        Ok(data_dir) => return absolute(Path::new(SYSTEM_CONFIG), data_dir),
        Err(ConfigError::Read { err, .. }) if skippable(&err) => {}
        Err(e) => return Err(e.into()),
    }
    from_client_file(Path::new(CLIENT_CONFIG))
}

/// A configuration file's data_dir, the only setting a client needs: the
/// rest may be what a reload is about to refuse (`sluice reload` must
/// still reach the daemon to hear why), so only the TOML syntax and this
/// one value are checked here.
fn data_dir_of(path: &Path) -> Result<PathBuf, ConfigError> {
    #[derive(serde::Deserialize)]
    struct DataDirOnly {
        data_dir: Option<PathBuf>,
    }
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    let only: DataDirOnly = toml::from_str(&text).map_err(|err| ConfigError::Parse {
        path: path.to_path_buf(),
        line: None,
        column: None,
        err: Box::new(err),
    })?;
    Ok(only.data_dir.unwrap_or_else(|| Config::default().data_dir))
}

/// The configuration file an administrator's tool reads (`sluice config`,
/// `address`, `lookup`, `sendmail -bv`), as postconf reads main.cf:
/// `explicit`, `$SLUICE_CONFIG`, /etc/sluice/sluice.toml when it exists;
/// None: the embedded default. (They open no socket, so the current
/// directory gains nothing here.)
pub fn config_file(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLUICE_CONFIG").map(PathBuf::from))
        .or_else(|| Some(PathBuf::from(SYSTEM_CONFIG)).filter(|p| p.exists()))
}

/// A system file that is absent or not for this user is skipped.
fn skippable(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
    )
}

fn absolute(config: &Path, data_dir: PathBuf) -> Result<PathBuf, LocateError> {
    match data_dir.is_absolute() {
        true => Ok(data_dir),
        false => Err(LocateError::Relative {
            config: config.to_path_buf(),
            data_dir,
        }),
    }
}

/// The client file's data_dir, or the package's when there is no file.
fn from_client_file(path: &Path) -> Result<PathBuf, LocateError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if skippable(&e) => return Ok(PathBuf::from(PACKAGE_DATA_DIR)),
        Err(e) => {
            return Err(LocateError::Client {
                path: path.to_path_buf(),
                why: e.to_string(),
            })
        }
    };
    let file: ClientFile = toml::from_str(&text).map_err(|e| LocateError::Client {
        path: path.to_path_buf(),
        why: e.message().to_string(),
    })?;
    absolute(path, file.data_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_file_names_an_absolute_data_dir_or_is_refused() {
        let dir = std::env::temp_dir().join(format!("sluice-locate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("client.toml");
        assert_eq!(
            from_client_file(&file).unwrap(),
            PathBuf::from(PACKAGE_DATA_DIR),
            "no file: the package's spool"
        );
        std::fs::write(&file, "data_dir = \"/srv/mail/spool\"\n").unwrap();
        assert_eq!(
            from_client_file(&file).unwrap(),
            PathBuf::from("/srv/mail/spool")
        );
        std::fs::write(&file, "data_dir = \"./var\"\n").unwrap();
        assert!(matches!(
            from_client_file(&file),
            Err(LocateError::Relative { .. })
        ));
        std::fs::write(&file, "data_dir = 3\n").unwrap();
        assert!(matches!(
            from_client_file(&file),
            Err(LocateError::Client { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_named_config_with_a_relative_data_dir_is_refused() {
        let dir = std::env::temp_dir().join(format!("sluice-locate2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("sluice.toml");
        std::fs::write(&conf, "data_dir = \"var\"\n").unwrap();
        assert!(matches!(
            data_dir(Some(&conf)),
            Err(LocateError::Relative { .. })
        ));
        assert!(matches!(
            data_dir(Some(&dir.join("missing.toml"))),
            Err(LocateError::Config(ConfigError::Read { .. }))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
