//! SQLite behind a SQL table: the `dbpath` file opened read-only on first
//! use (rusqlite on the system libsqlite3), queried on the blocking
//! thread pool under a mutex. A query longer than
//! `query_timeout` is interrupted (sqlite3_interrupt) and is an error; a
//! locked database waits at most as long (busy timeout).
//!
//! Values as Postfix reads them (sqlite3_column_text of each row's FIRST
//! column only, unlike pgsql and mysql which read every column): integers in
//! decimal, reals as `%!.15g`, text and blobs as their bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use super::settings::Settings;
use super::{Rows, SqlError};

pub(super) struct Sqlite {
    table: String,
    path: String,
    timeout: Duration,
    conn: Arc<Mutex<Option<Connection>>>,
}

impl Sqlite {
    pub(super) fn new(table: &str, s: &Settings) -> Sqlite {
        Sqlite {
            table: table.to_string(),
            path: s.dbpath.clone(),
            timeout: s.query_timeout,
            conn: Arc::new(Mutex::new(None)),
        }
    }

    pub(super) async fn rows(&self, sql: &str, params: &[&str]) -> Result<Rows, SqlError> {
        let conn = self.conn.clone();
        let (path, sql, timeout) = (self.path.clone(), sql.to_string(), self.timeout);
        let params: Vec<String> = params.iter().map(|p| p.to_string()).collect();
        let (interrupt_tx, mut interrupt_rx) = tokio::sync::oneshot::channel();
        let cancelled = Arc::new(AtomicBool::new(false));
        let given_up = cancelled.clone();
        let job = tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            if guard.is_none() {
                *guard = Some(open(&path, timeout)?);
            }
            let db = guard.as_ref().ok_or("not open")?;
            let _ = interrupt_tx.send(db.get_interrupt_handle());
            if given_up.load(Ordering::SeqCst) {
                // Queued behind a slow query and already answered "timed out".
                return Err("abandoned".into());
            }
            let result = select(db, &sql, &params);
            if result.is_err() {
                // Opened afresh next time (the file may have been replaced).
                *guard = None;
            }
            result
        });
        let waited = tokio::time::timeout(timeout, job).await;
        let failed = |reason: String| SqlError::Query {
            table: self.table.clone(),
            reason,
        };
        match waited {
            Ok(Ok(Ok(rows))) => Ok(rows),
            Ok(Ok(Err(e))) => Err(failed(e.to_string())),
            Ok(Err(join)) => Err(failed(join.to_string())),
            Err(_) => {
                // Never waits: a job still queued for the connection sees
                // the flag; one running is interrupted.
                cancelled.store(true, Ordering::SeqCst);
                if let Ok(handle) = interrupt_rx.try_recv() {
                    handle.interrupt();
                }
                Err(SqlError::Timeout {
                    table: self.table.clone(),
                    what: "query",
                    ms: timeout.as_millis(),
                })
            }
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn open(path: &str, timeout: Duration) -> Result<Connection, BoxError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let db = Connection::open_with_flags(path, flags).map_err(|e| format!("{path}: {e}"))?;
    db.busy_timeout(timeout)?;
    Ok(db)
}

fn select(db: &Connection, sql: &str, params: &[String]) -> Result<Rows, BoxError> {
    let mut statement = db.prepare(sql)?;
    // Postfix reads the first column of each row only (dict_sqlite).
    let columns = statement.column_count().min(1);
    let mut rows = statement.query(rusqlite::params_from_iter(params.iter()))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(match row.get_ref(i)? {
                ValueRef::Null => None,
                ValueRef::Integer(n) => Some(n.to_string()),
                ValueRef::Real(r) => Some(real(r)),
                ValueRef::Text(t) | ValueRef::Blob(t) => Some(c_string(t)),
            });
        }
        out.push(values);
    }
    Ok(out)
}

/// Bytes as Postfix takes them: a C string, so up to the first NUL.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// SQLite's text for a real: printf `%!.15g` (15 significant digits,
/// trailing zeros dropped, but always a `.0` when there is no point).
fn real(r: f64) -> String {
    if !r.is_finite() {
        return if r.is_nan() {
            String::new()
        } else if r > 0.0 {
            "Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if r == 0.0 {
        return "0.0".into();
    }
    let sci = format!("{r:.14e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..15).contains(&exp) {
        let m = trim_fraction(mantissa);
        let m = if m.contains('.') { m } else { format!("{m}.0") };
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = usize::try_from(14 - exp).unwrap_or(0);
    let fixed = trim_fraction(&format!("{r:.decimals$}"));
    if fixed.contains('.') {
        fixed
    } else {
        format!("{fixed}.0")
    }
}

fn trim_fraction(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reals_as_sqlite_prints_them() {
        assert_eq!(super::real(1.5), "1.5");
        assert_eq!(super::real(2.0), "2.0");
        assert_eq!(super::real(0.1), "0.1");
        assert_eq!(super::real(1e20), "1.0e+20");
        assert_eq!(super::real(-1.25e-7), "-1.25e-07");
        assert_eq!(super::real(123456.789), "123456.789");
    }
}
