//! Local (virtual mailbox) domains: recipient validation, alias expansion
//! and Maildir delivery.
//!
//! At RCPT time an address in a local domain is resolved: an alias (exact,
//! then the mailbox itself, then the `@domain` catch-all) expands to its
//! targets, recursively; `.` or `discard` as a target drops the mail; a
//! mailbox must exist in the mailbox table. Unknown → `550 5.1.1`; a table
//! that cannot answer → `451 4.3.0` (never a 550 for a directory problem).
//!
//! Maildir delivery follows the Maildir rules: a unique name in `tmp/`,
//! data synced, rename into `new/`, directory synced. `Return-Path:` and
//! `Delivered-To:` are prepended. A full disk or an unwritable Maildir is a
//! temporary failure: the message stays queued and is retried.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Deserialize;

use crate::log::Logger;
use crate::lookup::{LookupError, Table, TableConfig};
use crate::route::domain_of;

/// `[local]` in the config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// Domains whose mail is delivered here, to virtual mailboxes.
    pub domains: Vec<String>,
    /// Table (from `[tables]`) of valid mailboxes; its value, if any, is the
    /// Maildir path (relative to `maildir_base`, or absolute). Without a
    /// table every address in a local domain is accepted.
    pub mailbox_table: Option<String>,
    /// Table of aliases: address (or `@domain`) → addresses.
    pub alias_table: Option<String>,
    /// A static table whose keys are more local domains (value ignored).
    pub domain_table: Option<String>,
    /// A static table of routes, domain → next hop (`smtp:[host]:port`,
    /// `discard`), consulted before `[transport]`.
    pub transport_table: Option<String>,
    /// Default: `<data_dir>/mail`.
    pub maildir_base: Option<PathBuf>,
    /// Path of a mailbox when the table gives none.
    pub maildir_template: String,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            domains: Vec::new(),
            mailbox_table: None,
            alias_table: None,
            domain_table: None,
            transport_table: None,
            maildir_base: None,
            maildir_template: "{base}/{domain}/{localpart}/Maildir".into(),
        }
    }
}

/// What an address in a local domain resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Not one of our domains.
    NotLocal,
    /// Deliver to these addresses (local mailboxes or remote addresses).
    Accept(Vec<String>),
    /// Accepted and dropped (alias to `.` or `discard`).
    Discard,
    /// No such user.
    Unknown,
}

pub struct Local {
    domains: HashSet<String>,
    domain_table: Option<Arc<Table>>,
    /// Routes from a static table (see [`crate::route::Router`]).
    pub transport_table: Option<Arc<Table>>,
    mailboxes: Option<Arc<Table>>,
    aliases: Option<Arc<Table>>,
    base: PathBuf,
    template: String,
}

impl Local {
    pub fn build(
        config: &LocalConfig,
        tables: &std::collections::BTreeMap<String, TableConfig>,
        data_dir: &Path,
        logger: &Logger,
    ) -> Result<Local, String> {
        let mut built = std::collections::HashMap::new();
        let mut get = |name: &Option<String>, what: &str| -> Result<Option<Arc<Table>>, String> {
            let Some(name) = name else { return Ok(None) };
            if let Some(t) = built.get(name) {
                return Ok(Some(Arc::clone(t)));
            }
            let cfg = tables
                .get(name)
                .ok_or_else(|| format!("local.{what}: no table named {name:?} in [tables]"))?;
            let t = Arc::new(Table::build(name, cfg, logger)?);
            built.insert(name.clone(), t.clone());
            Ok(Some(t))
        };
        let domain_table = get(&config.domain_table, "domain_table")?;
        let transport_table = get(&config.transport_table, "transport_table")?;
        for (t, what) in [
            (&domain_table, "domain_table"),
            (&transport_table, "transport_table"),
        ] {
            if t.as_ref().is_some_and(|t| !t.is_static()) {
                return Err(format!(
                    "local.{what}: must be a static table (it is consulted without I/O)"
                ));
            }
        }
        Ok(Local {
            domains: config
                .domains
                .iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
            domain_table,
            transport_table,
            mailboxes: get(&config.mailbox_table, "mailbox_table")?,
            aliases: get(&config.alias_table, "alias_table")?,
            base: config
                .maildir_base
                .clone()
                .unwrap_or_else(|| data_dir.join("mail")),
            template: config.maildir_template.clone(),
        })
    }

    pub fn is_local_domain(&self, domain: &str) -> bool {
        if self.domains.is_empty() && self.domain_table.is_none() {
            return false;
        }
        let domain = domain.to_ascii_lowercase();
        self.domains.contains(&domain)
            || self
                .domain_table
                .as_ref()
                .and_then(|t| t.lookup_now(&domain))
                .is_some_and(|hit| hit.is_some())
    }

    /// Resolves a recipient at RCPT time.
    pub async fn resolve(&self, address: &str) -> Result<Resolution, LookupError> {
        if !self.is_local_domain(domain_of(address)) {
            return Ok(Resolution::NotLocal);
        }
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut discard = false;
        self.expand(address, 0, &mut out, &mut seen, &mut discard)
            .await?;
        Ok(if !out.is_empty() {
            Resolution::Accept(out)
        } else if discard {
            Resolution::Discard
        } else {
            Resolution::Unknown
        })
    }

    /// Expands aliases depth-first (at most 8 levels, each address once).
    fn expand<'a>(
        &'a self,
        address: &'a str,
        depth: usize,
        out: &'a mut Vec<String>,
        seen: &'a mut HashSet<String>,
        discard: &'a mut bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), LookupError>> + Send + 'a>>
    {
        Box::pin(async move {
            let address = address.to_ascii_lowercase();
            if !seen.insert(address.clone()) || depth > 8 {
                return Ok(());
            }
            let domain = domain_of(&address).to_string();
            if !self.is_local_domain(&domain) {
                out.push(address);
                return Ok(());
            }
            if let Some(aliases) = &self.aliases {
                if let Some(targets) = aliases.lookup(&address).await? {
                    return self
                        .expand_targets(&targets, depth, out, seen, discard)
                        .await;
                }
            }
            if self.mailbox_exists(&address).await? {
                out.push(address);
                return Ok(());
            }
            if let Some(aliases) = &self.aliases {
                if let Some(targets) = aliases.lookup(&format!("@{domain}")).await? {
                    return self
                        .expand_targets(&targets, depth, out, seen, discard)
                        .await;
                }
            }
            Ok(())
        })
    }

    async fn expand_targets(
        &self,
        targets: &[String],
        depth: usize,
        out: &mut Vec<String>,
        seen: &mut HashSet<String>,
        discard: &mut bool,
    ) -> Result<(), LookupError> {
        for target in targets {
            if target == "." || target.eq_ignore_ascii_case("discard") {
                *discard = true;
            } else if target.contains('@') {
                self.expand(target, depth + 1, out, seen, discard).await?;
            }
        }
        Ok(())
    }

    async fn mailbox_exists(&self, address: &str) -> Result<bool, LookupError> {
        match &self.mailboxes {
            Some(t) => Ok(t.lookup(address).await?.is_some()),
            None => Ok(true),
        }
    }

    /// The Maildir of a local address, or None if there is no such mailbox.
    pub async fn maildir_of(&self, address: &str) -> Result<Option<PathBuf>, LookupError> {
        let address = address.to_ascii_lowercase();
        let value = match &self.mailboxes {
            Some(t) => match t.lookup(&address).await? {
                Some(values) => values.first().cloned().filter(|v| *v != address),
                None => return Ok(None),
            },
            None => None,
        };
        Ok(Some(match value {
            Some(v) if v.starts_with('/') => PathBuf::from(v),
            Some(v) => self.base.join(v),
            None => self.template_path(&address),
        }))
    }

    fn template_path(&self, address: &str) -> PathBuf {
        let (local, domain) = address.rsplit_once('@').unwrap_or((address, ""));
        // Path separators in an address must not climb out of the base.
        let clean = |s: &str| s.replace(['/', '\0'], "_").replace("..", "_");
        PathBuf::from(
            self.template
                .replace("{base}", &self.base.display().to_string())
                .replace("{domain}", &clean(domain))
                .replace("{localpart}", &clean(local)),
        )
    }

    /// Reloads static tables and clears LDAP caches (SIGHUP).
    pub fn reload(&self) {
        for t in self.tables() {
            t.reload();
        }
    }

    fn tables(&self) -> impl Iterator<Item = &Arc<Table>> {
        [
            &self.mailboxes,
            &self.aliases,
            &self.domain_table,
            &self.transport_table,
        ]
        .into_iter()
        .flatten()
    }

    /// Counter lines for LDAP tables (logged periodically).
    pub fn stats_lines(&self) -> Vec<String> {
        self.tables().filter_map(|t| t.stats_line()).collect()
    }
}

/// Why a Maildir delivery failed (both are temporary).
#[derive(Debug, thiserror::Error)]
pub enum MaildirError {
    #[error("4.2.2 mailbox full or no space left: {0}")]
    Full(std::io::Error),
    #[error("4.3.0 cannot write to maildir {0}: {1}")]
    Io(String, std::io::Error),
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Delivers one message into `maildir` (blocking: call from a blocking task).
pub fn deliver_maildir(
    maildir: &Path,
    hostname: &str,
    sender: &str,
    recipient: &str,
    body: &[u8],
) -> Result<String, MaildirError> {
    let fail = |e: std::io::Error| {
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
        ) {
            MaildirError::Full(e)
        } else {
            MaildirError::Io(maildir.display().to_string(), e)
        }
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    for sub in ["tmp", "new", "cur"] {
        builder.create(maildir.join(sub)).map_err(fail)?;
    }
    let header = format!("Return-Path: <{sender}>\r\nDelivered-To: {recipient}\r\n");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let name = format!(
        "{}.M{}P{}Q{}.{},S={}",
        now.as_secs(),
        now.subsec_micros(),
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed),
        hostname.replace(['/', ':'], "_"),
        header.len() + body.len()
    );
    let tmp = maildir.join("tmp").join(&name);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(header.as_bytes())?;
        file.write_all(body)?;
        file.sync_data()?;
        std::fs::rename(&tmp, maildir.join("new").join(&name))?;
        std::fs::File::open(maildir.join("new"))?.sync_all()
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maildir_delivery_writes_new_with_headers() {
        let dir = std::env::temp_dir().join(format!("sluice-maildir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let md = dir.join("a/Maildir");
        let name = deliver_maildir(&md, "mx", "s@x", "a@y", b"Subject: t\r\n\r\nhi\r\n").unwrap();
        let text = std::fs::read_to_string(md.join("new").join(&name)).unwrap();
        assert_eq!(
            text,
            "Return-Path: <s@x>\r\nDelivered-To: a@y\r\nSubject: t\r\n\r\nhi\r\n"
        );
        assert!(std::fs::read_dir(md.join("tmp")).unwrap().next().is_none());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(md.join("new"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        // An unwritable place is an error, not a panic or a lost message.
        std::fs::write(dir.join("file"), b"x").unwrap();
        assert!(deliver_maildir(&dir.join("file/Maildir"), "mx", "s@x", "a@y", b"x").is_err());
    }

    #[tokio::test]
    async fn resolution_with_static_tables() {
        let dir = std::env::temp_dir().join(format!("sluice-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("mailboxes"),
            "a@ex.test ex.test/a/\nb@ex.test /abs/b\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("aliases"),
            "team@ex.test a@ex.test, b@ex.test, ext@remote.test\nnull@ex.test .\nloop@ex.test loop@ex.test\n@catch.test a@ex.test\n",
        )
        .unwrap();
        let mut tables = std::collections::BTreeMap::new();
        let table = |p: &str| TableConfig {
            kind: "static".into(),
            path: Some(dir.join(p)),
            ..toml::from_str("kind = \"static\"").unwrap()
        };
        tables.insert("m".to_string(), table("mailboxes"));
        tables.insert("al".to_string(), table("aliases"));
        let config = LocalConfig {
            domains: vec!["ex.test".into(), "catch.test".into()],
            mailbox_table: Some("m".into()),
            alias_table: Some("al".into()),
            maildir_base: Some("/base".into()),
            ..Default::default()
        };
        let local = Local::build(&config, &tables, &dir, &Logger::disabled()).unwrap();
        assert_eq!(
            local.resolve("x@else.test").await.unwrap(),
            Resolution::NotLocal
        );
        assert_eq!(
            local.resolve("A@ex.test").await.unwrap(),
            Resolution::Accept(vec!["a@ex.test".into()])
        );
        assert_eq!(
            local.resolve("nobody@ex.test").await.unwrap(),
            Resolution::Unknown
        );
        assert_eq!(
            local.resolve("team@ex.test").await.unwrap(),
            Resolution::Accept(vec![
                "a@ex.test".into(),
                "b@ex.test".into(),
                "ext@remote.test".into()
            ])
        );
        assert_eq!(
            local.resolve("null@ex.test").await.unwrap(),
            Resolution::Discard
        );
        assert_eq!(
            local.resolve("loop@ex.test").await.unwrap(),
            Resolution::Unknown
        );
        assert_eq!(
            local.resolve("anyone@catch.test").await.unwrap(),
            Resolution::Accept(vec!["a@ex.test".into()])
        );
        assert_eq!(
            local.maildir_of("a@ex.test").await.unwrap(),
            Some(PathBuf::from("/base/ex.test/a/"))
        );
        assert_eq!(
            local.maildir_of("b@ex.test").await.unwrap(),
            Some(PathBuf::from("/abs/b"))
        );
        assert_eq!(local.maildir_of("zz@ex.test").await.unwrap(), None);
    }
}
