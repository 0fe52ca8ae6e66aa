//! `[local]`: virtual mailbox domains, their tables and Maildir paths.

use std::path::PathBuf;

use serde::Deserialize;

/// `[local]` in the config.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// Domains whose mail is delivered here, to virtual mailboxes.
    pub domains: Vec<super::names::Domain>,
    /// How their mail is delivered: `maildir` (Sluice writes the
    /// Maildirs, the default) or an LMTP server that owns the mailboxes,
    /// e.g. `lmtp:unix:/run/dovecot/lmtp` (Postfix: virtual_transport).
    pub transport: super::hop::NextHop,
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
    /// Allow mailbox paths outside `maildir_base` (absolute table values).
    /// Off by default: a path that leaves the base is refused (`4.3.5`).
    pub maildir_allow_absolute: bool,
    /// The account Maildirs belong to: a name (`"vmail"`) or `"uid:gid"`
    /// (Postfix: virtual_uid_maps, virtual_gid_maps). A root daemon gives
    /// what it creates to it (0700/0600); an unprivileged one shares its
    /// group (2770/0660; its account must be in the group). Unset: the
    /// daemon's account, 0700/0600.
    pub maildir_owner: Option<super::owner::MaildirOwner>,
    /// How deliveries are made durable: "batch" (default) shares two
    /// file-system syncs among every delivery gathered while the previous
    /// batch synced; "each" syncs every message and its directory on its
    /// own (two syncs per message). Both report a message delivered only
    /// once its file and its name in `new/` are on disk.
    pub maildir_sync: MaildirSync,
    /// Maildir deliveries at once (the `maildir` destination's window,
    /// open from the start). More of them share each batch's syncs.
    pub concurrency: usize,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            domains: Vec::new(),
            transport: super::hop::NextHop::Maildir,
            mailbox_table: None,
            alias_table: None,
            domain_table: None,
            transport_table: None,
            maildir_base: None,
            maildir_template: "{base}/{domain}/{localpart}/Maildir".into(),
            maildir_allow_absolute: false,
            maildir_owner: None,
            maildir_sync: MaildirSync::Batch,
            concurrency: 100,
        }
    }
}

impl LocalConfig {
    /// Settings that work but that an operator should hear about, for
    /// `check-config` and the log at start.
    pub fn warnings(&self) -> Vec<String> {
        let has_domains = !self.domains.is_empty() || self.domain_table.is_some();
        let lmtp = matches!(self.transport, super::hop::NextHop::Lmtp(_));
        if !(has_domains && lmtp && self.mailbox_table.is_none()) {
            return Vec::new();
        }
        vec![format!(
            "warning: local.transport = \"{}\" and no local.mailbox_table: every address in the \
             local domains is accepted at RCPT, and the LMTP server's \"unknown user\" becomes a \
             bounce to the sender, who may be forged (backscatter); list the mailboxes in \
             local.mailbox_table (Postfix: virtual_mailbox_maps)",
            self.transport.key()
        )]
    }
}

/// `local.maildir_sync`: how Maildir deliveries are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MaildirSync {
    /// Deliveries gathered while the last batch synced share two syncs.
    Batch,
    /// Every message syncs its file and its directory on its own.
    Each,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::hop::NextHop;

    #[test]
    fn lmtp_without_a_mailbox_table_is_a_warning() {
        let mut local = LocalConfig {
            domains: vec!["local.test".parse().unwrap()],
            ..LocalConfig::default()
        };
        assert!(
            local.warnings().is_empty(),
            "Maildir: no bounce for unknown users"
        );
        local.transport = NextHop::parse("lmtp:unix:/run/dovecot/lmtp").unwrap();
        let warnings = local.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("backscatter"), "{warnings:?}");
        local.mailbox_table = Some("users".into());
        assert!(local.warnings().is_empty());
    }
}
