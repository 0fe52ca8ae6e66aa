//! `[tables.NAME]`: lookup table settings. `kind` names Postfix's table
//! type (docs/CONFIG.md, "Lookup tables", lists them); the other fields
//! are what that kind reads. Values only: `tables::Table::build` checks
//! that a kind has what it needs.

use std::path::PathBuf;

use serde::Deserialize;

/// One table's settings (`[tables.NAME]` in the config).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// The table type, by Postfix's name: `text` (also `hash`, `lmdb`,
    /// `btree`, `cdb`, `dbm`, `sdbm`, `texthash`: their source file is
    /// read), `regexp`, `pcre`, `cidr`, `ldap`, `pgsql`, `mysql`,
    /// `sqlite`, `socketmap`, `tcp`, `union` (`unionmap`), `pipe`
    /// (`pipemap`), `static`.
    pub kind: String,
    /// The file: a map's source, a pattern or cidr file, or an SQL table's
    /// Postfix query file (`pgsql_table(5)` …). `static` with a path is
    /// Sluice's older name of a text file, read strictly.
    pub path: Option<PathBuf>,
    /// static: the one value every key finds (Postfix's `static:VALUE`).
    #[serde(default)]
    pub value: Option<String>,
    /// socketmap: `inet:HOST:PORT` or `unix:PATH`; tcp: `HOST:PORT`.
    #[serde(default)]
    pub address: Option<String>,
    /// socketmap: the map name sent with each key.
    #[serde(default)]
    pub map_name: Option<String>,
    /// union, pipe: the member tables, each a `[tables]` name or a
    /// Postfix `type:name` (`pcre:/etc/postfix/x.pcre`).
    #[serde(default)]
    pub tables: Vec<String>,
    /// Server-backed tables: queries in flight at once; a lookup that
    /// waits longer than `query_timeout_ms` for a slot gives "try again".
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
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

impl TableConfig {
    /// A table of `kind` with every other setting at its default.
    pub fn of_kind(kind: &str) -> TableConfig {
        TableConfig {
            kind: kind.to_string(),
            path: None,
            value: None,
            address: None,
            map_name: None,
            tables: Vec::new(),
            max_in_flight: default_in_flight(),
            uris: Vec::new(),
            starttls: false,
            tls_ca_file: None,
            bind_dn: String::new(),
            bind_password: String::new(),
            base: String::new(),
            filter: default_filter(),
            attributes: Vec::new(),
            pool_size: default_pool(),
            connect_timeout_ms: default_timeout_ms(),
            query_timeout_ms: default_timeout_ms(),
            cache_hit_ttl_secs: default_hit_ttl(),
            cache_miss_ttl_secs: default_miss_ttl(),
            cache_max_entries: default_cache_entries(),
        }
    }
}

fn default_in_flight() -> usize {
    64
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
