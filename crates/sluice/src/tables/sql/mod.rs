//! Postfix's SQL lookup tables — pgsql_table(5), mysql_table(5),
//! sqlite_table(5) — read from the same `.cf` files: `hosts` (fail-over
//! in the order given), `user`, `password`, `dbname`, `dbpath`, `query`
//! (or the older `table`/`select_field`/`where_field`/
//! `additional_conditions`), `result_format`, `domain`,
//! `expansion_limit`; Sluice's own `connect_timeout`, `query_timeout`
//! (3 s each) and `pool_size` (4). The `%` rules are db_common(3)'s
//! ([`template`]).
//!
//! Quoting: none. The query template becomes a prepared statement whose
//! parameters are the key's parts ([`template::compile`]): `'%s'` is a
//! parameter, `'%u@%d'` a concatenation of parameters and literal pieces
//! (`||`, or `CONCAT` in MySQL), and an expansion outside quotes a
//! parameter too. The key is never SQL text, whatever it holds; a key
//! with a NUL is not looked up (Postfix keys are C strings: it could not
//! hold one either). PostgreSQL parameters are sent in text format, so
//! the server reads them as it would the quoted literal, for any column
//! type.
//!
//! Values: each column of each row, in order; NULL and empty ones
//! skipped; each through `result_format`; more than `expansion_limit`
//! (when set) is an error, as in Postfix. The caller joins them with
//! `,` as Postfix does.
//!
//! Failure is never "not found": a server down, a timeout, a query the
//! server refuses, a column of a type Sluice cannot render as text, all
//! give [`SqlError`], whose text (logged, and in 451 replies) never holds
//! the password. Connections are made on first use, not at open.
//!
//! Trust: the `.cf` file is the operator's; keys and the database's
//! answers are data only.

mod mysql;
mod pgsql;
mod settings;
mod sqlite;
mod template;

use std::path::Path;

use settings::Settings;
use template::{Key, Needs, Statement};

/// Which of Postfix's SQL table kinds a file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    Pgsql,
    Mysql,
    Sqlite,
}

/// Why a table could not be opened or could not answer (never "not
/// found").
#[derive(Debug, Clone, thiserror::Error)]
pub enum SqlError {
    #[error("table {table}: {}: {err}", path.display())]
    Read {
        table: String,
        path: std::path::PathBuf,
        err: String,
    },
    #[error("table {table}: {}: {reason}", path.display())]
    Config {
        table: String,
        path: std::path::PathBuf,
        reason: String,
    },
    /// No host took a connection (each one's reason).
    #[error("table {table}: cannot connect: {reasons}")]
    Connect { table: String, reasons: String },
    #[error("table {table}: {what} timed out after {ms} ms")]
    Timeout {
        table: String,
        what: &'static str,
        ms: u128,
    },
    #[error("table {table}: query failed: {reason}")]
    Query { table: String, reason: String },
    #[error("table {table}: expansion limit {limit} exceeded")]
    ExpansionLimit { table: String, limit: usize },
}

/// Rows as the server gave them: each column's text, None for NULL.
type Rows = Vec<Vec<Option<String>>>;

enum Backend {
    Pgsql(pgsql::Pgsql),
    Mysql(mysql::Mysql),
    Sqlite(sqlite::Sqlite),
}

pub struct SqlTable {
    name: String,
    needs: Needs,
    statement: Statement,
    result_format: String,
    domain: Vec<String>,
    expansion_limit: usize,
    backend: Backend,
}

impl SqlTable {
    /// Reads a Postfix pgsql_table(5)/mysql_table(5)/sqlite_table(5) file.
    /// No connection is made here: a server down at start costs
    /// lookups, not the daemon.
    pub fn open(name: &str, flavour: Flavour, cf: &Path) -> Result<SqlTable, SqlError> {
        let settings = Settings::read(name, flavour, cf)?;
        let bad = |reason: String| SqlError::Config {
            table: name.to_string(),
            path: cf.to_path_buf(),
            reason,
        };
        let mut needs = Needs::default();
        needs
            .add(&settings.query, true)
            .map_err(|e| bad(format!("query: {e}")))?;
        needs
            .add(&settings.result_format, false)
            .map_err(|e| bad(format!("result_format: {e}")))?;
        let statement =
            template::compile(&settings.query, flavour).map_err(|e| bad(format!("query: {e}")))?;
        let backend = match flavour {
            Flavour::Pgsql => Backend::Pgsql(pgsql::Pgsql::new(name, &settings)),
            Flavour::Mysql => Backend::Mysql(mysql::Mysql::new(name, &settings)),
            Flavour::Sqlite => Backend::Sqlite(sqlite::Sqlite::new(name, &settings)),
        };
        Ok(SqlTable {
            name: name.to_string(),
            needs,
            statement,
            result_format: settings.result_format,
            domain: settings.domain,
            expansion_limit: settings.expansion_limit,
            backend,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// One lookup, uncached: Ok(None) not found (or a key Postfix would
    /// not look up); Ok(Some) the values; Err: try again later.
    pub async fn query(&self, key: &str) -> Result<Option<Vec<String>>, SqlError> {
        if key.contains('\0') || !settings::domain_allows(&self.domain, key) {
            return Ok(None);
        }
        let Some(parts) = Key::split(key, &self.needs) else {
            return Ok(None);
        };
        let params: Vec<&str> = self
            .statement
            .params
            .iter()
            .map(|p| parts.part(*p))
            .collect();
        let rows = match &self.backend {
            Backend::Pgsql(b) => b.rows(&self.statement.sql, &params).await?,
            Backend::Mysql(b) => b.rows(&self.statement.sql, &params).await?,
            Backend::Sqlite(b) => b.rows(&self.statement.sql, &params).await?,
        };
        let mut values = Vec::new();
        for value in rows.iter().flatten().flatten() {
            let Some(v) = parts.format(&self.result_format, value, &self.needs) else {
                continue;
            };
            values.push(v);
            if self.expansion_limit > 0 && values.len() > self.expansion_limit {
                return Err(SqlError::ExpansionLimit {
                    table: self.name.clone(),
                    limit: self.expansion_limit,
                });
            }
        }
        // Postfix answers "not found" when the joined text is empty.
        if values.join(",").is_empty() {
            return Ok(None);
        }
        Ok(Some(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}

    #[test]
    fn a_table_is_shared_across_tasks_and_opens_without_a_server() {
        let dir = tempfile::tempdir().unwrap();
        let cf = dir.path().join("t.cf");
        for (flavour, head) in [
            (Flavour::Pgsql, "hosts = inet:127.0.0.1:1"),
            (Flavour::Mysql, "hosts = inet:127.0.0.1:1"),
            (Flavour::Sqlite, "dbpath = /nonexistent/x.sqlite"),
        ] {
            let text = format!("{head}\npassword = secret\nquery = SELECT a FROM t WHERE b='%s'\n");
            std::fs::write(&cf, text).unwrap();
            let table = SqlTable::open("t", flavour, &cf).unwrap();
            send_sync(&table);
            send(&table.query("x"));
            assert_eq!(table.name(), "t");
        }
    }

    #[test]
    fn bad_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cf = dir.path().join("t.cf");
        for (flavour, text) in [
            (Flavour::Pgsql, "query = SELECT a FROM t WHERE b='%x'"),
            (Flavour::Pgsql, "result_format = %q\nquery = SELECT 1"),
            (Flavour::Mysql, "query = SELECT a FROM t WHERE b=?"),
            (Flavour::Sqlite, "query = SELECT 1"),
            (
                Flavour::Pgsql,
                "domain = hash:/etc/postfix/domains\nquery = SELECT 1",
            ),
            (Flavour::Pgsql, "table = t"),
            (Flavour::Pgsql, "not a parameter line"),
        ] {
            std::fs::write(&cf, format!("password = secret\n{text}\n")).unwrap();
            let err = SqlTable::open("t", flavour, &cf).err().expect(text);
            let shown = err.to_string();
            assert!(
                shown.contains("t.cf") && !shown.contains("secret"),
                "{shown}"
            );
        }
    }
}
