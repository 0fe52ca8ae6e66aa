//! MySQL/MariaDB behind a SQL table: one mysql_async pool per host (up
//! to `pool_size` connections each, closed after `idle_interval` unused,
//! prepared statements cached per connection), hosts tried in the order
//! given, each connect bounded by `connect_timeout` and each query by
//! `query_timeout`; a failed query is tried once more (the pool drops a
//! broken connection, so the retry gets a working one or fails over).
//!
//! The statement is prepared (binary protocol): parameters are values,
//! never SQL. Results come typed; strings, integers and decimals are
//! given as the text MySQL's own client would show. FLOAT, DOUBLE and
//! date/time columns are an error naming the type (cast them in the
//! query: `CAST(x AS CHAR)`) rather than a text that could differ from
//! Postfix's. No TLS (the server is local or on a trusted network).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Params, Pool, PoolConstraints, PoolOpts, Row, Value};

use super::settings::{Address, Settings};
use super::{Rows, SqlError};

pub(super) struct Mysql {
    table: String,
    /// Each host's label and pool.
    pools: Vec<(String, Pool)>,
    connect_timeout: Duration,
    query_timeout: Duration,
}

impl Mysql {
    pub(super) fn new(table: &str, s: &Settings) -> Mysql {
        let constraints = PoolConstraints::new(0, s.pool_size).unwrap_or_default();
        let pool_opts = PoolOpts::default()
            .with_constraints(constraints)
            .with_inactive_connection_ttl(s.idle_interval)
            .with_reset_connection(false);
        let pools = s
            .hosts
            .iter()
            .map(|host| {
                let opts = OptsBuilder::default()
                    .user(Some(&s.user))
                    .pass(Some(&s.password))
                    .db_name((!s.dbname.is_empty()).then_some(&s.dbname))
                    .prefer_socket(false)
                    .stmt_cache_size(4)
                    .pool_opts(pool_opts.clone());
                let opts = match &host.address {
                    Address::Tcp { host, port } => {
                        opts.ip_or_hostname(host).tcp_port(port.unwrap_or(3306))
                    }
                    Address::Unix(path) | Address::Uri(path) => opts.socket(Some(path)),
                };
                (host.label.clone(), Pool::new(opts))
            })
            .collect();
        Mysql {
            table: table.to_string(),
            pools,
            connect_timeout: s.connect_timeout,
            query_timeout: s.query_timeout,
        }
    }

    pub(super) async fn rows(&self, sql: &str, params: &[&str]) -> Result<Rows, SqlError> {
        let mut last = None;
        for _ in 0..2 {
            let conn = self.conn().await?;
            match self.run(conn, sql, params).await {
                Ok(rows) => return Ok(rows),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("two attempts made"))
    }

    /// A connection from the first host's pool that gives one.
    async fn conn(&self) -> Result<Conn, SqlError> {
        let mut reasons = Vec::new();
        for (label, pool) in &self.pools {
            match tokio::time::timeout(self.connect_timeout, pool.get_conn()).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(e)) => reasons.push(format!("{label}: {e}")),
                Err(_) => reasons.push(format!(
                    "{label}: connect timed out after {} ms",
                    self.connect_timeout.as_millis()
                )),
            }
        }
        Err(SqlError::Connect {
            table: self.table.clone(),
            reasons: reasons.join("; "),
        })
    }

    async fn run(&self, mut conn: Conn, sql: &str, params: &[&str]) -> Result<Rows, SqlError> {
        let params = Params::Positional(
            params
                .iter()
                .map(|p| Value::Bytes(p.as_bytes().to_vec()))
                .collect(),
        );
        let result =
            tokio::time::timeout(self.query_timeout, conn.exec::<Row, _, _>(sql, params)).await;
        let rows = match result {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => return Err(self.failed(e.to_string())),
            Err(_) => {
                // The connection is mid-answer: close it in the background
                // rather than hand it back to the pool.
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn.disconnect()).await;
                });
                return Err(SqlError::Timeout {
                    table: self.table.clone(),
                    what: "query",
                    ms: self.query_timeout.as_millis(),
                });
            }
        };
        rows.into_iter()
            .map(|row| {
                let columns = row.columns();
                row.unwrap()
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| text(v).map_err(|ty| self.failed(type_error(&columns, i, ty))))
                    .collect()
            })
            .collect()
    }

    fn failed(&self, reason: String) -> SqlError {
        SqlError::Query {
            table: self.table.clone(),
            reason,
        }
    }
}

/// A value as text (None for NULL); Err names a kind Sluice does not render.
fn text(v: Value) -> Result<Option<String>, &'static str> {
    Ok(Some(match v {
        Value::NULL => return Ok(None),
        Value::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(_) => return Err("FLOAT"),
        Value::Double(_) => return Err("DOUBLE"),
        Value::Date(..) => return Err("DATE/DATETIME"),
        Value::Time(..) => return Err("TIME"),
    }))
}

fn type_error(columns: &[mysql_async::Column], i: usize, ty: &str) -> String {
    let name = columns
        .get(i)
        .map(|c| c.name_str().into_owned())
        .unwrap_or_default();
    format!("column {name:?} is a {ty} (cast it in the query: CAST(x AS CHAR))")
}
