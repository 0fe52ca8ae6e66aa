//! Postfix's `socketmap:` tables (socketmap_table(5), Sendmail's
//! socketmap protocol): `socketmap:inet:host:port:NAME` or
//! `socketmap:unix:/path:NAME`. Each request is one netstring
//! `NAME SPACE KEY`; each reply one netstring `OK SPACE value`,
//! `NOTFOUND SPACE`, or `TEMP`/`TIMEOUT`/`PERM SPACE reason`.
//!
//! Trusts the server for the answer and nothing else: a reply is read
//! only up to Postfix's limit ([`MAX_REPLY`], 100000 bytes, checked
//! before it is buffered), a malformed netstring, an unknown status, a
//! value that is not UTF-8, a hang past the time limit or a close before
//! the reply ends is an error ("try again later"), never "not found".
//! The key cannot inject a second request: it travels inside the
//! length-counted netstring. A key with a NUL byte (Postfix's keys are C
//! strings) is refused; a key longer than [`MAX_QUERY`] is not found, as
//! Postfix 3.12 answers ("an invalid key does not exist") without asking.
//!
//! Connections are persistent and pooled ([`pool`]), one query at a time
//! on each; one that failed is closed, and a connection-level failure is
//! retried once on a fresh connection as Postfix does. The time limit
//! covers the whole query, the retry included.

mod endpoint;
mod netstring;
pub(crate) mod pool;

use std::time::Duration;

use tokio::io::AsyncWriteExt;

pub(crate) use endpoint::printable;
pub use endpoint::{Endpoint, RemoteError, ServerClass, POSTFIX_TIMEOUT};
use netstring::NetstringError;
use pool::{AttemptFuture, Conn, Pool};
pub use pool::{MAX_CONNECTIONS, MAX_IDLE_CONNECTIONS};

/// Postfix's reply size limit (`DICT_SOCKMAP_DEF_MAX_REPLY`), without the
/// netstring framing.
pub const MAX_REPLY: usize = 100_000;
/// Postfix's query size limit (`DICT_SOCKMAP_DEF_MAX_QUERY`, 3.12): a
/// longer key is not found.
pub const MAX_QUERY: usize = 10_000;

/// A socketmap table: one map name on one server.
pub struct SocketmapTable {
    /// Sluice's name for the table (for the caller's logs).
    name: String,
    /// The map name sent with each key.
    map: String,
    pool: Pool,
    timeout: Duration,
}

impl SocketmapTable {
    /// `spec` is what follows `socketmap:`: `inet:host:port:NAME` or
    /// `unix:/path:NAME` (the map name is after the last colon, as
    /// Postfix splits it). No I/O: the first query connects.
    pub fn new(name: &str, spec: &str, timeout: Duration) -> Result<Self, RemoteError> {
        let bad = |why| RemoteError::BadSpec {
            spec: spec.to_string(),
            why,
        };
        let (server, map) = spec
            .rsplit_once(':')
            .ok_or_else(|| bad("want inet:host:port:NAME or unix:/path:NAME"))?;
        if map.is_empty() || map.contains(|c: char| c.is_whitespace() || c == '\0') {
            return Err(bad("the socketmap NAME is empty or has spaces"));
        }
        if !Endpoint::has_transport(server) {
            return Err(bad("the server must be inet:host:port or unix:/path"));
        }
        Ok(SocketmapTable {
            name: name.to_string(),
            map: map.to_string(),
            pool: Pool::new(Endpoint::parse(server)?),
            timeout,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn endpoint(&self) -> &Endpoint {
        self.pool.endpoint()
    }

    /// The server's answer for `key`: `Ok(Some(value))` found,
    /// `Ok(None)` not found; any failure is an `Err`.
    pub async fn query(&self, key: &str) -> Result<Option<String>, RemoteError> {
        if key.contains('\0') {
            return Err(RemoteError::NulInKey);
        }
        if key.len() > MAX_QUERY {
            return Ok(None);
        }
        let request = request(&self.map, key);
        let endpoint = self.pool.endpoint().to_string();
        pool::exchange(&self.pool, self.timeout, |conn| {
            attempt(conn, request.clone(), endpoint.clone())
        })
        .await
    }
}

/// The bytes Postfix sends for `key` in map `map`.
fn request(map: &str, key: &str) -> Vec<u8> {
    netstring::encode(format!("{map} {key}").as_bytes())
}

fn attempt(
    conn: &mut Conn,
    request: Vec<u8>,
    endpoint: String,
) -> AttemptFuture<'_, Option<String>> {
    Box::pin(async move {
        let io_err = |source| RemoteError::Io {
            endpoint: endpoint.clone(),
            source,
        };
        conn.io.write_all(&request).await.map_err(io_err)?;
        conn.io.flush().await.map_err(io_err)?;
        let reply = netstring::read(&mut conn.io, MAX_REPLY)
            .await
            .map_err(|e| match e {
                NetstringError::Eof => RemoteError::Closed {
                    endpoint: endpoint.clone(),
                },
                NetstringError::Io(source) => io_err(source),
                NetstringError::TooLong(limit) => RemoteError::TooLong {
                    endpoint: endpoint.clone(),
                    limit,
                },
                NetstringError::Format(why) => RemoteError::Malformed {
                    endpoint: endpoint.clone(),
                    why: format!("bad netstring: {why}"),
                },
            })?;
        parse_reply(&reply, &endpoint)
    })
}

/// A reply's meaning: split at the first space into status and payload,
/// as Postfix does.
fn parse_reply(reply: &[u8], endpoint: &str) -> Result<Option<String>, RemoteError> {
    let (status, payload) = match reply.iter().position(|&b| b == b' ') {
        Some(i) => (&reply[..i], Some(&reply[i + 1..])),
        None => (reply, None),
    };
    let class = match status {
        // "OK" without a space is found with an empty value (Postfix 3.12;
        // 3.7 answered "not found" without an error, which its own
        // maintainers changed).
        b"OK" => {
            let value = payload.unwrap_or_default();
            return match std::str::from_utf8(value) {
                Ok(v) => Ok(Some(v.to_string())),
                Err(_) => Err(RemoteError::Malformed {
                    endpoint: endpoint.to_string(),
                    why: "the value is not UTF-8".into(),
                }),
            };
        }
        b"NOTFOUND" => return Ok(None),
        b"TEMP" => ServerClass::Temporary,
        b"TIMEOUT" => ServerClass::Timeout,
        b"PERM" => ServerClass::Permanent,
        _ => {
            return Err(RemoteError::Malformed {
                endpoint: endpoint.to_string(),
                why: format!("unknown status {:?}", printable(status)),
            })
        }
    };
    let reason = payload.unwrap_or_default();
    let start = reason
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(reason.len());
    Err(RemoteError::Server {
        endpoint: endpoint.to_string(),
        class,
        reason: printable(&reason[start..]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(reply: &[u8]) -> Result<Option<String>, RemoteError> {
        parse_reply(reply, "inet:127.0.0.1:1")
    }

    #[test]
    fn request_format() {
        assert_eq!(request("virtual", "a@b.c"), b"13:virtual a@b.c,");
        assert_eq!(request("m", "x, 3:y,"), b"9:m x, 3:y,,");
    }

    #[test]
    fn replies() {
        assert_eq!(
            parse(b"OK value with spaces").unwrap().as_deref(),
            Some("value with spaces")
        );
        assert_eq!(parse(b"OK ").unwrap().as_deref(), Some(""));
        assert_eq!(parse(b"OK").unwrap().as_deref(), Some(""));
        assert_eq!(parse(b"NOTFOUND ").unwrap(), None);
        assert_eq!(parse(b"NOTFOUND").unwrap(), None);
        for (reply, want) in [
            (&b"TEMP busy"[..], ServerClass::Temporary),
            (b"TIMEOUT slow", ServerClass::Timeout),
            (b"PERM no such map", ServerClass::Permanent),
            (b"PERM", ServerClass::Permanent),
        ] {
            match parse(reply) {
                Err(RemoteError::Server { class, .. }) => assert_eq!(class, want),
                other => panic!("{reply:?}: {other:?}"),
            }
        }
        match parse(b"TEMP  \x1b[31mred\n") {
            Err(RemoteError::Server { reason, .. }) => assert_eq!(reason, "?[31mred?"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_replies_are_errors() {
        for reply in [
            &b"ok x"[..],
            b"",
            b" OK x",
            b"FOUND x",
            b"OK \xff\xfe",
            b"NOTFOUND\0",
        ] {
            assert!(
                matches!(parse(reply), Err(RemoteError::Malformed { .. })),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn specs() {
        let t = SocketmapTable::new("t", "inet:127.0.0.1:9:virtual", POSTFIX_TIMEOUT).unwrap();
        assert_eq!(t.map, "virtual");
        assert_eq!(t.endpoint().to_string(), "inet:127.0.0.1:9");
        let t = SocketmapTable::new("t", "unix:/run/s.sock:m", POSTFIX_TIMEOUT).unwrap();
        assert_eq!(t.endpoint(), &Endpoint::Unix("/run/s.sock".into()));
        let t = SocketmapTable::new("t", "inet:[::1]:9:m", POSTFIX_TIMEOUT).unwrap();
        assert_eq!(t.endpoint().to_string(), "inet:[::1]:9");
        for bad in [
            "127.0.0.1:9:m",
            "inet:127.0.0.1:9:",
            "inet:127.0.0.1:9",
            "unix:/s",
            "m",
            "",
        ] {
            assert!(
                SocketmapTable::new("t", bad, POSTFIX_TIMEOUT).is_err(),
                "{bad:?}"
            );
        }
    }
}
