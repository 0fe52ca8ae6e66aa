//! A small pool of persistent connections to one remote table server,
//! shared by the socketmap and tcp kinds. One query at a time per
//! connection: a connection is taken out of the pool for a whole
//! request and reply, and goes back only if the exchange ended cleanly
//! (a reply read in full and nothing more buffered), so a late or extra
//! byte from the server can never be read as the answer to another key.
//!
//! Like Postfix's auto_clnt, an idle connection is closed after
//! [`MAX_IDLE`] and any connection after [`MAX_TTL`], so no server is
//! clung to forever. The number of connections open at once is bounded
//! ([`MAX_CONNECTIONS`]); a query waiting for one waits within its own
//! time limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::BufReader;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::endpoint::{Endpoint, Io, RemoteError};

/// Connections kept open between queries.
pub const MAX_IDLE_CONNECTIONS: usize = 4;
/// Connections open at once (queries beyond wait for one).
pub const MAX_CONNECTIONS: usize = 16;
/// An idle connection older than this is closed (Postfix: 10 s).
pub const MAX_IDLE: Duration = Duration::from_secs(10);
/// Any connection older than this is closed once idle (Postfix: 100 s).
pub const MAX_TTL: Duration = Duration::from_secs(100);

/// A connection lent to one query.
pub(crate) struct Conn {
    /// Reads are buffered; writes pass through.
    pub io: BufReader<Box<dyn Io>>,
    born: Instant,
    _permit: OwnedSemaphorePermit,
}

struct Idle {
    io: BufReader<Box<dyn Io>>,
    born: Instant,
    since: Instant,
}

pub(crate) struct Pool {
    endpoint: Endpoint,
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
}

impl Pool {
    pub fn new(endpoint: Endpoint) -> Pool {
        Pool {
            endpoint,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A connection: an idle one still young enough unless `fresh`, else
    /// a new one.
    pub async fn get(&self, fresh: bool) -> Result<Conn, RemoteError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the pool's semaphore is never closed");
        if !fresh {
            if let Some(idle) = self.take_idle() {
                return Ok(Conn {
                    io: idle.io,
                    born: idle.born,
                    _permit: permit,
                });
            }
        }
        let io = self.endpoint.connect().await?;
        Ok(Conn {
            io: BufReader::new(io),
            born: Instant::now(),
            _permit: permit,
        })
    }

    fn take_idle(&self) -> Option<Idle> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        // Stale ones are dropped (closed) here.
        idle.retain(|c| now - c.since < MAX_IDLE && now - c.born < MAX_TTL);
        idle.pop()
    }

    /// Returns a connection whose exchange ended cleanly; one with bytes
    /// left unread, too old, or beyond the idle limit is closed.
    pub fn put(&self, conn: Conn) {
        let now = Instant::now();
        if !conn.io.buffer().is_empty() || now - conn.born >= MAX_TTL {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(Idle {
                io: conn.io,
                born: conn.born,
                since: now,
            });
        }
    }
}

/// Runs one exchange (`attempt` on a lent connection) within `limit`:
/// a connection-level failure on it is retried once on a fresh
/// connection (Postfix: "to make server restarts transparent"), other
/// failures are not. The connection goes back to the pool only after a
/// success; one that failed in any way is closed.
pub(crate) async fn exchange<T, F>(
    pool: &Pool,
    limit: Duration,
    mut attempt: F,
) -> Result<T, RemoteError>
where
    F: for<'c> FnMut(&'c mut Conn) -> AttemptFuture<'c, T>,
{
    let run = async {
        let mut conn = pool.get(false).await?;
        let first = attempt(&mut conn).await;
        let value = match first {
            Err(e) if e.retry_fresh() => {
                drop(conn);
                conn = pool.get(true).await?;
                attempt(&mut conn).await?
            }
            other => other?,
        };
        pool.put(conn);
        Ok(value)
    };
    tokio::time::timeout(limit, run)
        .await
        .map_err(|_| RemoteError::TimedOut {
            endpoint: pool.endpoint().to_string(),
            after: limit,
        })?
}

/// One attempt's future.
pub(crate) type AttemptFuture<'c, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, RemoteError>> + Send + 'c>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn lent(pool: &Pool) -> Conn {
        let (ours, _theirs) = tokio::io::duplex(64);
        Conn {
            io: BufReader::new(Box::new(ours)),
            born: Instant::now(),
            _permit: pool.permits.clone().try_acquire_owned().unwrap(),
        }
    }

    fn pool() -> Pool {
        Pool::new(Endpoint::Unix("/nonexistent".into()))
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_expire_as_postfix_s() {
        let p = pool();
        p.put(lent(&p));
        assert!(p.take_idle().is_some(), "a connection just used is reused");
        p.put(lent(&p));
        tokio::time::advance(MAX_IDLE).await;
        assert!(p.take_idle().is_none(), "idle for {MAX_IDLE:?}: closed");
        let old = lent(&p);
        tokio::time::advance(MAX_TTL).await;
        p.put(old);
        assert!(p.take_idle().is_none(), "older than {MAX_TTL:?}: closed");
    }

    #[tokio::test]
    async fn the_pool_is_bounded() {
        let p = pool();
        for _ in 0..MAX_IDLE_CONNECTIONS + 3 {
            p.put(lent(&p));
        }
        assert_eq!(p.idle.lock().unwrap().len(), MAX_IDLE_CONNECTIONS);
        let held: Vec<Conn> = (0..MAX_CONNECTIONS).map(|_| lent(&p)).collect();
        assert!(
            p.permits.clone().try_acquire_owned().is_err(),
            "no more than {MAX_CONNECTIONS}"
        );
        drop(held);
        assert!(p.permits.clone().try_acquire_owned().is_ok());
    }

    #[tokio::test]
    async fn unread_bytes_close_the_connection() {
        let p = pool();
        let (ours, mut theirs) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut theirs, b"5:extra,")
            .await
            .unwrap();
        let mut conn = Conn {
            io: BufReader::new(Box::new(ours)),
            born: Instant::now(),
            _permit: p.permits.clone().try_acquire_owned().unwrap(),
        };
        // Read part of it: the rest is buffered, unread.
        let mut first = [0u8; 2];
        tokio::io::AsyncReadExt::read_exact(&mut conn.io, &mut first)
            .await
            .unwrap();
        p.put(conn);
        assert!(p.take_idle().is_none());
    }
}
