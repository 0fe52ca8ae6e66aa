//! PostgreSQL behind a SQL table: a small pool of pipelined connections
//! (tokio-postgres; a `Client` runs many queries at once, like the LDAP
//! table's), each with the table's statement prepared. A connection whose
//! query failed or timed out is dropped from its slot; the query is tried
//! once more on a fresh connection, which fails over across `hosts` in
//! order. A connection idle longer than `idle_interval` is replaced.
//!
//! Parameters go in text format (the server parses them as it would the
//! quoted literal they replace); results come in binary, and are turned
//! back into PostgreSQL's text form for the text, integer, boolean and
//! `citext` types. Other column types are an error naming the type (cast
//! the column to text in the query) rather than a guess.
//!
//! No TLS (NoTls): a site that needs it uses a Unix socket or a local
//! pgbouncer for now.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, Format, FromSql, IsNull, ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

use super::settings::{Address, Host, Settings};
use super::{Rows, SqlError};

struct Conn {
    client: Arc<Client>,
    statement: Statement,
    used: Instant,
}

pub(super) struct Pgsql {
    table: String,
    hosts: Vec<Host>,
    user: String,
    password: String,
    dbname: String,
    connect_timeout: Duration,
    query_timeout: Duration,
    idle: Duration,
    slots: Vec<tokio::sync::Mutex<Option<Conn>>>,
    next: AtomicUsize,
}

impl Pgsql {
    pub(super) fn new(table: &str, s: &Settings) -> Pgsql {
        Pgsql {
            table: table.to_string(),
            hosts: s.hosts.clone(),
            user: s.user.clone(),
            password: s.password.clone(),
            dbname: s.dbname.clone(),
            connect_timeout: s.connect_timeout,
            query_timeout: s.query_timeout,
            idle: s.idle_interval,
            slots: (0..s.pool_size)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    pub(super) async fn rows(&self, sql: &str, params: &[&str]) -> Result<Rows, SqlError> {
        let mut last = None;
        for fresh in [false, true] {
            let index = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
            let (client, statement) = self.handle(index, sql, fresh).await?;
            match self.run(&client, &statement, params).await {
                Ok(rows) => return Ok(rows),
                Err(e) => {
                    *self.slots[index].lock().await = None;
                    last = Some(e);
                }
            }
        }
        Err(last.expect("two attempts made"))
    }

    /// The slot's connection and statement, connecting if it has none (or
    /// `fresh`, or it is closed or idle too long).
    async fn handle(
        &self,
        index: usize,
        sql: &str,
        fresh: bool,
    ) -> Result<(Arc<Client>, Statement), SqlError> {
        let mut slot = self.slots[index].lock().await;
        if let Some(conn) = slot.as_mut() {
            if !fresh && !conn.client.is_closed() && conn.used.elapsed() < self.idle {
                conn.used = Instant::now();
                return Ok((conn.client.clone(), conn.statement.clone()));
            }
        }
        *slot = None;
        let conn = self.connect(sql).await?;
        let handle = (conn.client.clone(), conn.statement.clone());
        *slot = Some(conn);
        Ok(handle)
    }

    /// A connection to the first host that takes one, the statement
    /// prepared on it.
    async fn connect(&self, sql: &str) -> Result<Conn, SqlError> {
        let mut reasons = Vec::new();
        for host in &self.hosts {
            let attempt = async {
                let config = self.config(host)?;
                let (client, connection) = config.connect(NoTls).await.map_err(|e| pg_error(&e))?;
                tokio::spawn(connection);
                let statement = client.prepare(sql).await.map_err(|e| pg_error(&e))?;
                Ok::<_, String>(Conn {
                    client: Arc::new(client),
                    statement,
                    used: Instant::now(),
                })
            };
            match tokio::time::timeout(self.connect_timeout, attempt).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(e)) => reasons.push(format!("{}: {e}", host.label)),
                Err(_) => reasons.push(format!(
                    "{}: connect timed out after {} ms",
                    host.label,
                    self.connect_timeout.as_millis()
                )),
            }
        }
        Err(SqlError::Connect {
            table: self.table.clone(),
            reasons: reasons.join("; "),
        })
    }

    fn config(&self, host: &Host) -> Result<tokio_postgres::Config, String> {
        let mut config = match &host.address {
            // The URI's own user, password and dbname win, as in Postfix.
            Address::Uri(uri) => {
                return uri
                    .parse::<tokio_postgres::Config>()
                    .map(|mut c| {
                        c.connect_timeout(self.connect_timeout);
                        c
                    })
                    .map_err(|e| format!("bad URI: {e}"));
            }
            Address::Tcp { host, port } => {
                let mut c = tokio_postgres::Config::new();
                c.host(host).port(port.unwrap_or(5432));
                c
            }
            Address::Unix(dir) => {
                let mut c = tokio_postgres::Config::new();
                c.host_path(dir).port(5432);
                c
            }
        };
        config
            .user(&self.user)
            .password(&self.password)
            .dbname(&self.dbname)
            .application_name("sluice")
            .connect_timeout(self.connect_timeout);
        Ok(config)
    }

    async fn run(
        &self,
        client: &Client,
        statement: &Statement,
        params: &[&str],
    ) -> Result<Rows, SqlError> {
        let params: Vec<TextParam> = params.iter().map(|p| TextParam(p)).collect();
        let refs: Vec<&(dyn ToSql + Sync)> =
            params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
        let rows = tokio::time::timeout(self.query_timeout, client.query(statement, &refs))
            .await
            .map_err(|_| SqlError::Timeout {
                table: self.table.clone(),
                what: "query",
                ms: self.query_timeout.as_millis(),
            })?
            .map_err(|e| self.failed(pg_error(&e)))?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.try_get::<_, PgText>(i)
                            .map(|t| t.0)
                            .map_err(|e| self.failed(pg_error(&e)))
                    })
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

/// tokio-postgres's error with what it wraps: the server's message
/// (`db error` alone says nothing) or the cause (a conversion's names the
/// column's type).
fn pg_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// A parameter sent as text, whatever type the server expects.
#[derive(Debug)]
struct TextParam<'a>(&'a str);

impl ToSql for TextParam<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

/// A column's value in PostgreSQL's text form (None: NULL).
struct PgText(Option<String>);

impl<'a> FromSql<'a> for PgText {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<PgText, Box<dyn StdError + Sync + Send>> {
        let int = |n: usize| -> Result<i64, Box<dyn StdError + Sync + Send>> {
            Ok(match n {
                2 => i16::from_be_bytes(raw.try_into()?).into(),
                4 => i32::from_be_bytes(raw.try_into()?).into(),
                _ => i64::from_be_bytes(raw.try_into()?),
            })
        };
        let text = match *ty {
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                std::str::from_utf8(raw)?.to_string()
            }
            Type::INT2 => int(2)?.to_string(),
            Type::INT4 => int(4)?.to_string(),
            Type::INT8 => int(8)?.to_string(),
            Type::OID => u32::from_be_bytes(<[u8; 4]>::try_from(raw)?).to_string(),
            Type::BOOL => if raw.first() == Some(&1) { "t" } else { "f" }.to_string(),
            _ if ty.name() == "citext" => std::str::from_utf8(raw)?.to_string(),
            _ => {
                return Err(format!(
                    "a column of type {} (cast it to text in the query)",
                    ty.name()
                )
                .into())
            }
        };
        Ok(PgText(Some(text)))
    }

    fn from_sql_null(_: &Type) -> Result<PgText, Box<dyn StdError + Sync + Send>> {
        Ok(PgText(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}
