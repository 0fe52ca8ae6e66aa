//! Virtual mailboxes: recipient validation and alias expansion at RCPT
//! time, and the Maildir path of a mailbox at delivery time.
//!
//! An address in a local domain is resolved: an alias (exact, then the
//! mailbox itself, then the `@domain` catch-all) expands to its targets,
//! recursively; `.` or `discard` as a target drops the mail; a mailbox must
//! exist in the mailbox table. Unknown → `550 5.1.1`; a table that cannot
//! answer → `451 4.3.0` (never a 550 for a directory problem).
//!
//! Address extensions (`recipient_delimiter`, Postfix's plus-addressing):
//! `user+ext@domain` is looked up as itself, then as `user@domain` (the
//! keys of `tables::search`, pattern tables asked for the full address
//! only). An alias found without the extension passes it on to its
//! targets (`team+x` → `a+x`, as Postfix's
//! `propagate_unmatched_extensions`); a mailbox found without it keeps
//! the recipient as given, and its mail goes to the Maildir++ folder
//! `.ext` when that folder already exists ([`folder_of`]), else to the
//! inbox.
//!
//! Trust: table values (paths, alias targets) are the operator's; the
//! address is the client's and is never used as a path without cleaning
//! (an extension names a folder only if it is a plain name and the folder
//! is a real directory already there: a client never creates one, nor
//! climbs out of the mailbox).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::local::LocalConfig;
use crate::config::tables::TableConfig;
use crate::log::Logger;
use crate::message::address::domain_of;
use crate::routing::domains::{LocalDomains, RoutingError};
use crate::tables::search::{self, Rules};
use crate::tables::{LookupError, Table};

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

/// Virtual mailbox domains with their mailbox and alias tables.
pub struct VirtualMailboxes {
    domains: Arc<LocalDomains>,
    mailboxes: Option<Arc<Table>>,
    aliases: Option<Arc<Table>>,
    /// Valid recipients in `relay_domains` (Postfix: relay_recipient_maps).
    relay_recipients: Option<Arc<Table>>,
    /// SMTP AUTH users → password hashes (`[auth] table`).
    credentials: Option<Arc<Table>>,
    base: PathBuf,
    template: String,
    /// `recipient_delimiter` ("" for none).
    delimiters: String,
    /// System users (`[system]`, `mydestination`): their domains are
    /// local too; their recipients are checked here, not expanded.
    system: Arc<crate::routing::system::SystemUsers>,
}

impl VirtualMailboxes {
    /// Builds every table `[local]` names (each once, even if named twice).
    pub fn build(
        config: &LocalConfig,
        relay_recipient_table: &Option<String>,
        auth_table: &Option<String>,
        tables: &BTreeMap<String, TableConfig>,
        data_dir: &Path,
        logger: &Logger,
    ) -> Result<VirtualMailboxes, RoutingError> {
        let mut built = HashMap::new();
        let mut get = |name: &Option<String>,
                       what: &str|
         -> Result<Option<Arc<Table>>, RoutingError> {
            let Some(name) = name else { return Ok(None) };
            if let Some(t) = built.get(name) {
                return Ok(Some(Arc::clone(t)));
            }
            let cfg = tables.get(name).ok_or_else(|| RoutingError::NoSuchTable {
                what: what.to_string(),
                name: name.clone(),
            })?;
            let t =
                Table::build_in(name, cfg, tables, logger).map_err(|err| RoutingError::Table {
                    setting: format!("local.{what}"),
                    err: Box::new(err),
                })?;
            let t = Arc::new(t);
            built.insert(name.clone(), t.clone());
            Ok(Some(t))
        };
        let domain_table = get(&config.domain_table, "domain_table")?;
        let transport_table = get(&config.transport_table, "transport_table")?;
        let domains = LocalDomains::new(&config.domains, domain_table, transport_table)?;
        Ok(VirtualMailboxes {
            domains: Arc::new(domains),
            mailboxes: get(&config.mailbox_table, "mailbox_table")?,
            aliases: get(&config.alias_table, "alias_table")?,
            relay_recipients: get(relay_recipient_table, "relay_recipient_table")?,
            credentials: get(auth_table, "auth.table")?,
            base: config
                .maildir_base
                .clone()
                .unwrap_or_else(|| data_dir.join("mail")),
            template: config.maildir_template.clone(),
            delimiters: String::new(),
            system: Default::default(),
        })
    }

    /// With the system users of `[system]` (their domains become local,
    /// routed to local(8) delivery).
    pub fn with_system(mut self, system: crate::routing::system::SystemUsers) -> VirtualMailboxes {
        let domains = system.domains().map(str::to_string).collect::<Vec<_>>();
        if let Some(d) = Arc::get_mut(&mut self.domains) {
            d.with_system(domains.into_iter());
        }
        self.system = Arc::new(system);
        self
    }

    /// The system users (`[system]`).
    pub fn system(&self) -> Arc<crate::routing::system::SystemUsers> {
        self.system.clone()
    }

    /// With address extensions split at any of `delimiters`
    /// (`recipient_delimiter`).
    pub fn with_delimiters(mut self, delimiters: &str) -> VirtualMailboxes {
        self.delimiters = delimiters.to_string();
        self
    }

    fn rules(&self) -> Rules<'_> {
        Rules {
            delimiters: &self.delimiters,
            local: false,
            owner_request_special: true,
        }
    }

    /// The keys `address` is looked up under in `table`, but `@domain`
    /// (a catch-all has its own place): the address, then without its
    /// extension; a pattern table sees the address only.
    fn keys<'a>(&self, address: &'a str, table: &Table) -> Vec<search::Key<'a>> {
        search::address_keys(address, &self.rules())
            .into_iter()
            .filter(|k| !k.text.starts_with('@') && (!k.partial || table.fixed()))
            .collect()
    }

    /// The first of `address`'s keys `table` answers: the values, and the
    /// extension that key left out.
    async fn find(
        &self,
        table: &Table,
        address: &str,
    ) -> Result<Option<(crate::tables::Values, Option<String>)>, LookupError> {
        for key in self.keys(address, table) {
            if let Some(found) = table.lookup(&key.text).await? {
                return Ok(Some((found, key.extension.map(|e| e.into_owned()))));
            }
        }
        Ok(None)
    }

    /// Where Maildirs live (relative table values and the template's `{base}`).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The local domains and static routes, for the router.
    pub fn domains(&self) -> Arc<LocalDomains> {
        self.domains.clone()
    }

    pub fn is_local_domain(&self, domain: &str) -> bool {
        self.domains.is_local_domain(domain)
    }

    /// The SMTP AUTH credentials table, if any.
    pub fn credentials(&self) -> Option<Arc<Table>> {
        self.credentials.clone()
    }

    /// Whether a recipient in `relay_domains` is known: found in the relay
    /// recipient table under Postfix's keys for a remote address (the
    /// address, then `@domain`; any address is known when there is no
    /// table).
    pub async fn relay_recipient_known(&self, address: &str) -> Result<bool, LookupError> {
        let Some(table) = &self.relay_recipients else {
            return Ok(true);
        };
        Ok(table.find_address(address, &self.rules()).await?.is_some())
    }

    /// Resolves a recipient at RCPT time.
    pub async fn resolve(&self, address: &str) -> Result<Resolution, LookupError> {
        if !self.is_local_domain(domain_of(address)) {
            return Ok(Resolution::NotLocal);
        }
        if self.system.is_system_domain(domain_of(address)) {
            // local(8) expands aliases at delivery; here only "exists?".
            let local = crate::message::address::split(address).0;
            return match self.system.exists(local) {
                Ok(true) => Ok(Resolution::Accept(vec![address.to_string()])),
                Ok(false) => Ok(Resolution::Unknown),
                Err(e) => Err(LookupError::Unavailable(format!("passwd: {e}"))),
            };
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
                if let Some((targets, extension)) = self.find(aliases, &address).await? {
                    let targets = propagate(&address, &targets, extension.as_deref());
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
            Some(t) => Ok(self.find(t, address).await?.is_some()),
            None => Ok(true),
        }
    }

    /// The Maildir of a local address, or None if there is no such
    /// mailbox: the mailbox's own, or its folder named by the address's
    /// extension when that folder exists ([`folder_of`]).
    pub async fn maildir_of(&self, address: &str) -> Result<Option<PathBuf>, LookupError> {
        let address = address.to_ascii_lowercase();
        let bare = self.without_extension(&address);
        let value = match &self.mailboxes {
            Some(t) => match self.find(t, &address).await? {
                Some((values, _)) => values
                    .first()
                    .cloned()
                    .filter(|v| *v != address && *v != bare.0),
                None => return Ok(None),
            },
            None => None,
        };
        let root = match value {
            Some(v) if v.starts_with('/') => PathBuf::from(v),
            Some(v) => self.base.join(v),
            None => self.template_path(&bare.0),
        };
        Ok(Some(match bare.1 {
            Some(extension) => folder_of(root, &extension).await,
            None => root,
        }))
    }

    /// `address` without its extension, and the extension (its delimiter
    /// left out), if it has one.
    fn without_extension(&self, address: &str) -> (String, Option<String>) {
        let (local, domain) = crate::message::address::split(address);
        match search::split_extension(local, &self.rules()) {
            Some((bare, extension)) => (format!("{bare}@{domain}"), Some(extension.into())),
            None => (address.to_string(), None),
        }
    }

    fn template_path(&self, address: &str) -> PathBuf {
        let (local, domain) = crate::message::address::split(address);
        // Path separators in an address must not climb out of the base.
        let clean = |s: &str| s.replace(['/', '\0'], "_").replace("..", "_");
        PathBuf::from(
            self.template
                .replace("{base}", &self.base.display().to_string())
                .replace("{domain}", &clean(domain))
                .replace("{localpart}", &clean(local)),
        )
    }

    /// Reloads the static tables whose files changed (blocking).
    pub fn reload_changed(&self) {
        for t in self.tables() {
            t.reload_if_changed();
        }
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
            &self.relay_recipients,
            &self.credentials,
        ]
        .into_iter()
        .flatten()
        .chain(self.domains.tables())
    }

    /// Counter lines for LDAP tables (logged periodically).
    pub fn stats_lines(&self) -> Vec<String> {
        self.tables().filter_map(|t| t.stats_line()).collect()
    }

    /// The LDAP tables' counters (see `Table::counters`).
    pub fn lookup_counters(&self) -> Vec<(String, [(&'static str, u64); 6])> {
        self.tables().filter_map(|t| t.counters()).collect()
    }
}

/// The targets of an alias found for `address` under a key that left
/// out `extension`: the extension passed on to each address (not to `.`
/// or `discard`), as Postfix's `propagate_unmatched_extensions`.
fn propagate(address: &str, targets: &[String], extension: Option<&str>) -> Vec<String> {
    targets
        .iter()
        .map(|t| match t.contains('@') {
            true => search::mapped_address(address, t, extension, true),
            false => t.clone(),
        })
        .collect()
}

/// The Maildir++ folder `.extension` of the mailbox at `root`, when the
/// extension is a plain folder name and the folder is a directory there
/// already (not a link); else the mailbox itself. A client names the
/// folder, so it may only choose among those the user made.
pub async fn folder_of(root: PathBuf, extension: &str) -> PathBuf {
    let plain = !extension.is_empty()
        && extension.len() <= 100
        && !extension.starts_with('.')
        && !extension.contains("..")
        && !extension.contains(['/', '\\', '\0'])
        && !extension.chars().any(char::is_control);
    if !plain {
        return root;
    }
    let folder = root.join(format!(".{extension}"));
    match tokio::fs::symlink_metadata(&folder).await {
        Ok(meta) if meta.is_dir() => folder,
        _ => root,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolution_with_static_tables() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
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
            domains: vec!["ex.test".parse().unwrap(), "catch.test".parse().unwrap()],
            mailbox_table: Some("m".into()),
            alias_table: Some("al".into()),
            maildir_base: Some("/base".into()),
            ..Default::default()
        };
        let local =
            VirtualMailboxes::build(&config, &None, &None, &tables, dir, &Logger::disabled())
                .unwrap();
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

#[cfg(test)]
mod extension_tests {
    use super::*;

    fn mailboxes(dir: &Path, delimiters: &str) -> VirtualMailboxes {
        std::fs::write(
            dir.join("mailboxes"),
            "a@ex.test ex.test/a\nb@ex.test ex.test/b\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("aliases"),
            "team@ex.test a@ex.test, b@ex.test, ext@remote.test\nnull@ex.test .\n",
        )
        .unwrap();
        let table = |p: &str| TableConfig {
            path: Some(dir.join(p)),
            ..toml::from_str("kind = \"static\"").unwrap()
        };
        let tables = BTreeMap::from([
            ("m".to_string(), table("mailboxes")),
            ("al".to_string(), table("aliases")),
        ]);
        let config = LocalConfig {
            domains: vec!["ex.test".parse().unwrap()],
            mailbox_table: Some("m".into()),
            alias_table: Some("al".into()),
            maildir_base: Some(dir.join("mail")),
            ..Default::default()
        };
        VirtualMailboxes::build(&config, &None, &None, &tables, dir, &Logger::disabled())
            .unwrap()
            .with_delimiters(delimiters)
    }

    #[tokio::test]
    async fn extensions_find_the_mailbox_and_pass_through_aliases() {
        let tmp = tempfile::tempdir().unwrap();
        let local = mailboxes(tmp.path(), "+-");
        let accept = |v: &[&str]| Resolution::Accept(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            local.resolve("A+News@ex.test").await.unwrap(),
            accept(&["a+news@ex.test"])
        );
        assert_eq!(
            local.resolve("b-x+y@ex.test").await.unwrap(),
            accept(&["b-x+y@ex.test"])
        );
        assert_eq!(
            local.resolve("team+x@ex.test").await.unwrap(),
            accept(&["a+x@ex.test", "b+x@ex.test", "ext+x@remote.test"])
        );
        assert_eq!(
            local.resolve("null+x@ex.test").await.unwrap(),
            Resolution::Discard
        );
        assert_eq!(
            local.resolve("nobody+x@ex.test").await.unwrap(),
            Resolution::Unknown
        );
        // Without delimiters, an extension is part of the name.
        let plain = mailboxes(tmp.path(), "");
        assert_eq!(
            plain.resolve("a+news@ex.test").await.unwrap(),
            Resolution::Unknown
        );
    }

    #[tokio::test]
    async fn an_extension_names_only_a_folder_the_user_made() {
        let tmp = tempfile::tempdir().unwrap();
        let local = mailboxes(tmp.path(), "+");
        let root = tmp.path().join("mail/ex.test/a");
        std::fs::create_dir_all(root.join(".news")).unwrap();
        std::fs::create_dir_all(tmp.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), root.join(".link")).unwrap();
        let of = |a: &'static str| {
            let local = &local;
            async move { local.maildir_of(a).await.unwrap().unwrap() }
        };
        assert_eq!(of("a+news@ex.test").await, root.join(".news"));
        assert_eq!(of("a@ex.test").await, root);
        for inbox in [
            "a+other@ex.test",
            "a+link@ex.test",
            "a+.news@ex.test",
            "a+@ex.test",
            "a+news/..@ex.test",
        ] {
            assert_eq!(of(inbox).await, root, "{inbox}");
        }
        assert_eq!(local.maildir_of("zz+news@ex.test").await.unwrap(), None);
    }
}
