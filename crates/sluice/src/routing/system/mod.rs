//! System users (`[system]`, Postfix's `mydestination` and local(8)):
//! which domains they are, which recipients exist at RCPT
//! (`local_recipient_maps`: an account or an alias), and the aliases the
//! local delivery agent (`deliver/local`) expands.
//!
//! Trust: the aliases files are the administrator's and must not be
//! writable by anyone else (group or world writable is refused at load);
//! the passwd database is the system's. The address is the client's: its
//! local part is only ever a key (never a path: `/` is no account).

pub mod aliases;
pub mod passwd;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

use crate::config::system::{alias_file, SystemConfig};
use aliases::{Aliases, Warning};

/// Why `[system]` could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    #[error("system.alias_maps: cannot read {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("system.local_recipient_maps: {0:?} is not supported (the default, \"proxy:unix:passwd.byname\" and \"$alias_maps\", or [])")]
    RecipientMap(String),
    #[error("system.alias_maps: {0} is writable by others than its owner (refused, as a way to run commands as its owner)")]
    Unsafe(String),
}

/// The `[system]` domains, aliases and recipient check.
#[derive(Debug, Default)]
pub struct SystemUsers {
    domains: HashSet<String>,
    pub aliases: Aliases,
    /// `local_recipient_maps = []`: every local part exists.
    accept_all: bool,
    /// `recipient_delimiter`.
    delimiters: String,
    /// What loading the aliases files warned about.
    pub warnings: Vec<Warning>,
}

impl SystemUsers {
    pub fn load(config: &SystemConfig, delimiters: &str) -> Result<SystemUsers, SystemError> {
        let known = [
            "proxy:unix:passwd.byname",
            "unix:passwd.byname",
            "$alias_maps",
        ];
        let maps = config.local_recipient_maps.iter().flatten();
        if let Some(other) = maps.into_iter().find(|m| !known.contains(&m.as_str())) {
            return Err(SystemError::RecipientMap(other.clone()));
        }
        let (aliases, warnings) = read_aliases(&config.alias_maps)?;
        Ok(SystemUsers {
            domains: config
                .mydestination
                .iter()
                .map(|d| d.as_str().to_ascii_lowercase())
                .collect(),
            aliases,
            accept_all: config
                .local_recipient_maps
                .as_ref()
                .is_some_and(Vec::is_empty),
            delimiters: delimiters.to_string(),
            warnings,
        })
    }

    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.iter().map(String::as_str)
    }

    pub fn is_system_domain(&self, domain: &str) -> bool {
        !self.domains.is_empty() && self.domains.contains(&domain.to_ascii_lowercase())
    }

    /// `recipient_delimiter`'s first character ("" for none), for
    /// `${recipient_delimiter}`.
    pub fn delimiter(&self) -> &str {
        self.delimiters
            .get(..self.delimiters.chars().next().map_or(0, char::len_utf8))
            .unwrap_or("")
    }

    /// `user+ext` → (`user`, `Some("ext")`), at the first delimiter.
    pub fn split<'a>(&self, local: &'a str) -> (&'a str, Option<&'a str>) {
        if self.delimiters.is_empty() {
            return (local, None);
        }
        match local.find(|c| self.delimiters.contains(c)) {
            Some(i) if i > 0 => (&local[..i], Some(&local[i + 1..])),
            _ => (local, None),
        }
    }

    /// Whether the local part `local` exists (Postfix's default
    /// `local_recipient_maps`: an account, or an alias; with and without
    /// the extension).
    pub fn exists(&self, local: &str) -> std::io::Result<bool> {
        if self.accept_all {
            return Ok(true);
        }
        let local = local.to_ascii_lowercase();
        let (user, _) = self.split(&local);
        if self.aliases.get(&local).is_some() || self.aliases.get(user).is_some() {
            return Ok(true);
        }
        Ok(passwd::account(user)?.is_some())
    }
}

/// Reads every aliases file of `entries` (the first entry of a name wins,
/// as Postfix's maps search in order).
pub fn read_aliases(entries: &[String]) -> Result<(Aliases, Vec<Warning>), SystemError> {
    let mut aliases = Aliases::default();
    let mut warnings = Vec::new();
    for entry in entries {
        let path = alias_file(entry);
        let shown = path.display().to_string();
        let read = |err| SystemError::Read {
            path: shown.clone(),
            err,
        };
        let meta = std::fs::metadata(&path).map_err(read)?;
        if meta.mode() & 0o022 != 0 {
            return Err(SystemError::Unsafe(shown));
        }
        let text = std::fs::read_to_string(&path).map_err(read)?;
        warnings.extend(aliases.parse_owned(&path, &text, meta.uid()));
    }
    Ok((aliases, warnings))
}
