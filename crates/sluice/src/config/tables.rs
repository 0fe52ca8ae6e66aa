//! `[tables.NAME]`: lookup table settings (static files or LDAP).

use std::path::PathBuf;

use serde::Deserialize;

/// One table's settings (`[tables.NAME]` in the config).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `static` or `ldap`.
    pub kind: String,
    /// static: the file (`key value[, value…]` per line, `#` comments).
    pub path: Option<PathBuf>,
    /// ldap: server URIs, tried in order (failover).
    #[serde(default)]
    pub uris: Vec<String>,
    /// ldap: upgrade `ldap://` connections with StartTLS (`ldaps://` URIs
    /// are TLS from the start either way).
    #[serde(default)]
    pub starttls: bool,
    /// ldap: CA certificates (PEM) the server's certificate must chain
    /// to; default: the system's. The name checked is the URI's host.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub bind_dn: String,
    #[serde(default)]
    pub bind_password: String,
    #[serde(default)]
    pub base: String,
    /// `%s` = whole address, `%u` = local part, `%d` = domain (all escaped).
    #[serde(default = "default_filter")]
    pub filter: String,
    /// Attributes whose values are the result; empty = the key itself.
    #[serde(default)]
    pub attributes: Vec<String>,
    #[serde(default = "default_pool")]
    pub pool_size: usize,
    #[serde(default = "default_timeout_ms")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_timeout_ms")]
    pub query_timeout_ms: u64,
    #[serde(default = "default_hit_ttl")]
    pub cache_hit_ttl_secs: u64,
    #[serde(default = "default_miss_ttl")]
    pub cache_miss_ttl_secs: u64,
    #[serde(default = "default_cache_entries")]
    pub cache_max_entries: usize,
}

fn default_filter() -> String {
    "(mail=%s)".into()
}
fn default_pool() -> usize {
    4
}
fn default_timeout_ms() -> u64 {
    3000
}
fn default_hit_ttl() -> u64 {
    300
}
fn default_miss_ttl() -> u64 {
    60
}
fn default_cache_entries() -> usize {
    200_000
}
