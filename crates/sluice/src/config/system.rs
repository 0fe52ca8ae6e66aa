//! `[system]`: system accounts and Postfix's local(8) delivery, with
//! Postfix's parameter names: `mydestination` domains whose recipients
//! are the accounts of the passwd database, their aliases(5) file, their
//! `~/.forward`, and the mailbox each one's mail lands in.
//!
//! Trust: the administrator's. Nothing here is a user's.

use std::path::PathBuf;

use serde::Deserialize;

/// Postfix's default command_expansion_filter and
/// execution_directory_expansion_filter.
pub const SAFE_CHARS: &str =
    "1234567890!@%-_=+:,./abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// `[system]` in the config.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SystemConfig {
    /// Domains whose recipients are system accounts (Postfix:
    /// mydestination). Empty (the default): no local(8) delivery.
    pub mydestination: Vec<super::names::Domain>,
    /// Which recipients exist (Postfix: local_recipient_maps). `None`
    /// (the default, Postfix's `proxy:unix:passwd.byname $alias_maps`):
    /// an account of the passwd database or a name in `alias_maps`; an
    /// empty list: every local part is accepted at RCPT.
    pub local_recipient_maps: Option<Vec<String>>,
    /// aliases(5) files (`hash:/etc/aliases` or a plain path: the text
    /// file itself is read; Postfix reads the `.db` newaliases made).
    pub alias_maps: Vec<String>,
    /// What `sluice newaliases` checks (default: `alias_maps`).
    pub alias_database: Option<Vec<String>>,
    /// `Maildir/` (ends in `/`): a Maildir in the home directory; another
    /// name: an mbox file in the home directory; empty (the default): the
    /// mbox `mail_spool_directory/USER`.
    pub home_mailbox: String,
    pub mail_spool_directory: PathBuf,
    /// Where a user's forwarding file is looked for, the first one found
    /// (`$home`, `$user`, `${extension}`, `${recipient_delimiter}`).
    pub forward_path: Vec<String>,
    /// Where `/file` targets are allowed: `alias`, `forward`, `include`.
    pub allow_mail_to_files: Vec<String>,
    /// Where `|command` targets are allowed (as Postfix): an allowed one
    /// runs (`deliver/local/command.rs`).
    pub allow_mail_to_commands: Vec<String>,
    /// A `|command` is killed after this long (Postfix:
    /// command_time_limit, 1000 s).
    pub command_time_limit_secs: u64,
    /// The characters a command's environment values may hold; others
    /// become `_` (Postfix: command_expansion_filter).
    pub command_expansion_filter: String,
    /// A `|command`'s working directory, `$home`, `$user`, `$shell`,
    /// `$recipient`, `$extension`, `$domain`, `$local`,
    /// `$recipient_delimiter` expanded (Postfix:
    /// command_execution_directory); empty: `/` (Postfix: its queue
    /// directory).
    pub command_execution_directory: String,
    /// The characters those expansions may hold; others become `_`
    /// (Postfix: execution_directory_expansion_filter).
    pub execution_directory_expansion_filter: String,
    /// `fcntl`, `dotlock` (Postfix: mailbox_delivery_lock; Debian's
    /// default is both).
    pub mailbox_delivery_lock: Vec<String>,
    /// Refuse an existing mailbox not owned by its user (Postfix:
    /// strict_mailbox_ownership).
    pub strict_mailbox_ownership: bool,
    /// The account `/file` targets of root's aliases files are written
    /// as (Postfix: default_privs).
    pub default_privs: String,
    /// Most addresses one recipient's aliases, includes and forwards may
    /// expand to (Sluice's own: Postfix has no such limit for local(8)).
    pub expansion_limit: usize,
}

impl Default for SystemConfig {
    fn default() -> Self {
        SystemConfig {
            mydestination: Vec::new(),
            local_recipient_maps: None,
            alias_maps: Vec::new(),
            alias_database: None,
            home_mailbox: String::new(),
            mail_spool_directory: PathBuf::from("/var/mail"),
            forward_path: vec![
                "$home/.forward${recipient_delimiter}${extension}".into(),
                "$home/.forward".into(),
            ],
            allow_mail_to_files: vec!["alias".into(), "forward".into()],
            allow_mail_to_commands: vec!["alias".into(), "forward".into()],
            command_time_limit_secs: 1000,
            command_expansion_filter: SAFE_CHARS.into(),
            command_execution_directory: String::new(),
            execution_directory_expansion_filter: SAFE_CHARS.into(),
            mailbox_delivery_lock: vec!["fcntl".into(), "dotlock".into()],
            strict_mailbox_ownership: true,
            default_privs: "nobody".into(),
            expansion_limit: 1000,
        }
    }
}

impl SystemConfig {
    pub fn enabled(&self) -> bool {
        !self.mydestination.is_empty()
    }

    /// What an operator should hear about: local(8) writes as each user,
    /// which needs the daemon to stay root.
    pub fn warnings(&self, run_as_root: bool) -> Vec<String> {
        match self.enabled() && !run_as_root {
            true => vec![
                "warning: system.mydestination is set but run_as_root is not: a daemon \
                          that gives root up cannot deliver as the system users, and their mail \
                          is deferred (4.3.0)"
                    .into(),
            ],
            false => Vec::new(),
        }
    }

    /// The files `sluice newaliases` reads.
    pub fn alias_database(&self) -> &[String] {
        self.alias_database.as_deref().unwrap_or(&self.alias_maps)
    }
}

/// The file an `alias_maps` entry names: `type:/path` or `/path`.
pub fn alias_file(entry: &str) -> PathBuf {
    match entry.split_once(':') {
        Some((kind, path)) if !kind.contains('/') => PathBuf::from(path),
        _ => PathBuf::from(entry),
    }
}
