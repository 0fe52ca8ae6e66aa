//! From a table's settings to a [`Table`]: the kind decides what is read
//! and which settings it needs; a union or pipe builds its members, each
//! a `[tables]` name or a Postfix `type:name`.
//!
//! Trust: the settings are the operator's. Invariant: a member list that
//! names itself, directly or not, is refused (no table is built twice on
//! one path, and nesting is bounded), never a lookup that loops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::answer::Answer;
use super::cache::{Cached, Limits};
use super::file::{FileTable, Format};
use super::pattern::Flavour;
use super::remote::{Backend, Remote};
use super::socketmap::{RemoteError, SocketmapTable};
use super::spec::{self, TEXT_KINDS};
use super::sql::{self, SqlTable};
use super::tcp::TcpTable;
use super::{cf, ldap_cf, LdapTable, Table, TableError};
use crate::log::Logger;
use crate::tables::config::TableConfig;

/// The kinds a `[tables]` entry may name (Postfix's other names for a
/// text map are accepted too: `spec::TEXT_KINDS`).
pub const KINDS: &[&str] = &[
    "text",
    "static",
    "regexp",
    "pcre",
    "cidr",
    "ldap",
    "pgsql",
    "mysql",
    "sqlite",
    "socketmap",
    "tcp",
    "union",
    "pipe",
];

/// How deep unions and pipes may nest.
const MAX_DEPTH: usize = 8;

/// The other tables a union or pipe may name, and the path to here.
struct Scope<'a> {
    all: &'a BTreeMap<String, TableConfig>,
    path: Vec<String>,
    logger: &'a Logger,
}

impl Table {
    /// Builds a table whose members (if any) are Postfix specs.
    pub fn build(name: &str, config: &TableConfig, logger: &Logger) -> Result<Table, TableError> {
        Self::build_in(name, config, &BTreeMap::new(), logger)
    }

    /// Builds a table whose members may also name the `[tables]` in `all`.
    pub fn build_in(
        name: &str,
        config: &TableConfig,
        all: &BTreeMap<String, TableConfig>,
        logger: &Logger,
    ) -> Result<Table, TableError> {
        let mut scope = Scope {
            all,
            path: vec![name.to_string()],
            logger,
        };
        build(name, config, &mut scope)
    }
}

fn build(name: &str, config: &TableConfig, scope: &mut Scope<'_>) -> Result<Table, TableError> {
    let needs = |needs| TableError::Needs {
        table: name.to_string(),
        kind: config.kind.clone(),
        needs,
    };
    let file = |format| match &config.path {
        Some(path) => Ok(Table::File(FileTable::load(
            name,
            path,
            format,
            scope.logger.clone(),
        )?)),
        None => Err(needs("path")),
    };
    match config.kind.as_str() {
        k if TEXT_KINDS.contains(&k) => file(Format::Text { strict: false }),
        "static" => match (&config.value, &config.path) {
            (Some(value), None) => Ok(Table::Static(Arc::new(Answer::text(value.clone())))),
            (None, Some(_)) => file(Format::Text { strict: true }),
            _ => Err(needs("either value or path")),
        },
        "regexp" => file(Format::Pattern(Flavour::Regexp)),
        "pcre" => file(Format::Pattern(Flavour::Pcre)),
        "cidr" => file(Format::Cidr),
        "ldap" => {
            let config = match (&config.path, config.uris.is_empty()) {
                (Some(path), true) => ldap_cf::settings(&cf::read(path)?, config.clone())?,
                (None, false) => config.clone(),
                _ => return Err(needs("either uris or path (a Postfix ldap_table file)")),
            };
            let table = LdapTable::new(name, config, scope.logger.clone())?;
            Ok(Table::Ldap(Box::new(table)))
        }
        "socketmap" | "tcp" | "pgsql" | "mysql" | "sqlite" => remote(name, config, scope.logger),
        "union" | "unionmap" => Ok(Table::Union(members(name, config, scope)?)),
        "pipe" | "pipemap" => Ok(Table::Pipe(members(name, config, scope)?)),
        other => Err(TableError::UnknownKind {
            table: name.to_string(),
            kind: other.to_string(),
        }),
    }
}

/// A table that asks a server, behind the cache: SQL (`path`: Postfix's
/// query file, which holds its own timeouts), socketmap or tcp
/// (`address`, `map_name`; the server's timeout `query_timeout_ms`,
/// Sluice's 3 s default, not Postfix's 100 s: a session waits on it).
fn remote(name: &str, config: &TableConfig, logger: &Logger) -> Result<Table, TableError> {
    let needs = |needs| TableError::Needs {
        table: name.to_string(),
        kind: config.kind.clone(),
        needs,
    };
    let bad = |err: String| TableError::Remote {
        table: name.to_string(),
        err,
    };
    let flavour = match config.kind.as_str() {
        "pgsql" => Some(sql::Flavour::Pgsql),
        "mysql" => Some(sql::Flavour::Mysql),
        "sqlite" => Some(sql::Flavour::Sqlite),
        _ => None,
    };
    let backend = match flavour {
        Some(flavour) => {
            let path = config.path.as_deref().ok_or_else(|| needs("path"))?;
            Backend::Sql(Box::new(
                SqlTable::open(name, flavour, path).map_err(|e| bad(e.to_string()))?,
            ))
        }
        None => socket_backend(name, config)?,
    };
    let cached = Cached::new(name, Limits::of(config), logger.clone());
    Ok(Table::Remote(Box::new(Remote::new(backend, cached))))
}

/// A socketmap or tcp client (see [`remote`]).
fn socket_backend(name: &str, config: &TableConfig) -> Result<Backend, TableError> {
    let needs = |needs| TableError::Needs {
        table: name.to_string(),
        kind: config.kind.clone(),
        needs,
    };
    let address = config.address.as_deref().ok_or_else(|| needs("address"))?;
    let timeout = Duration::from_millis(config.query_timeout_ms.max(1));
    let bad = |e: RemoteError| TableError::Remote {
        table: name.to_string(),
        err: e.to_string(),
    };
    Ok(match config.kind.as_str() {
        "socketmap" => {
            let map = config
                .map_name
                .as_deref()
                .ok_or_else(|| needs("map_name"))?;
            let spec = format!("{address}:{map}");
            Backend::Socketmap(SocketmapTable::new(name, &spec, timeout).map_err(bad)?)
        }
        _ => Backend::Tcp(TcpTable::new(name, address, timeout).map_err(bad)?),
    })
}

/// A union's or pipe's members, built in order.
fn members(
    name: &str,
    config: &TableConfig,
    scope: &mut Scope<'_>,
) -> Result<Vec<Arc<Table>>, TableError> {
    let refuse = |member: &str, why: String| TableError::Member {
        table: name.to_string(),
        member: member.to_string(),
        why,
    };
    if config.tables.is_empty() {
        return Err(TableError::Needs {
            table: name.to_string(),
            kind: config.kind.clone(),
            needs: "tables",
        });
    }
    let mut out = Vec::new();
    for member in &config.tables {
        let settings = match scope.all.get(member) {
            Some(named) => named.clone(),
            None if member.contains(':') => {
                spec::parse(member).map_err(|e| refuse(member, e.to_string()))?
            }
            None => return Err(refuse(member, "no such table in [tables]".into())),
        };
        if scope.path.contains(member) || scope.path.len() >= MAX_DEPTH {
            let path = scope.path.join(" → ");
            return Err(refuse(
                member,
                format!("tables nest in a loop or too deep: {path}"),
            ));
        }
        scope.path.push(member.clone());
        let built = build(member, &settings, scope);
        scope.path.pop();
        out.push(Arc::new(built?));
    }
    Ok(out)
}
