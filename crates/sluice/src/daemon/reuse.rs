//! What a reload may keep: each part of the daemon is rebuilt only when
//! the settings (and the files' dates) it is built from changed. Each
//! key is the text of those settings; two configurations with the same
//! key share the part.

use crate::config::Config;

/// Whether `key` gives the same text for both configurations.
pub(super) fn same(a: &Config, b: &Config, key: fn(&Config) -> String) -> bool {
    key(a) == key(b)
}

pub(super) fn tables_key(c: &Config) -> String {
    format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
        c.local,
        c.tables,
        c.auth,
        c.smtpd.relay_recipient_table,
        c.data_dir,
        c.recipient_delimiter,
        c.system,
        alias_stamps(c)
    )
}

/// The aliases files' modification times: a reload after `sluice
/// newaliases` (or an edit) reads them again.
fn alias_stamps(c: &Config) -> Vec<Option<std::time::SystemTime>> {
    c.system
        .alias_maps
        .iter()
        .map(|e| {
            let path = crate::config::system::alias_file(e);
            std::fs::metadata(path).and_then(|m| m.modified()).ok()
        })
        .collect()
}

pub(super) fn tls_key(c: &Config) -> String {
    format!("{:?}{:?}{:?}", c.tls, c.hostname, c.data_dir)
}

pub(super) fn dns_key(c: &Config) -> String {
    format!("{:?}", c.dns)
}

/// With the CA file's modification time: a changed bundle makes new
/// agents (system roots are read at start).
pub(super) fn delivery_key(c: &Config) -> String {
    let ca = c
        .delivery
        .tls_ca_file
        .as_ref()
        .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok());
    // The SRS secret file's too: a rotated secret makes new agents.
    let srs = match c.srs.enabled {
        true => std::fs::metadata(c.srs.secret_path(&c.data_dir))
            .and_then(|m| m.modified())
            .ok(),
        false => None,
    };
    // Forwarding's domains: relay domains and the virtual alias maps.
    format!(
        "{:?}{:?}{:?}{:?}{:?}{:?}{:?}{:?}",
        c.hostname, c.delivery, c.dns, ca, c.srs, srs, c.smtpd.relay_domains, c.rewrite
    )
}
