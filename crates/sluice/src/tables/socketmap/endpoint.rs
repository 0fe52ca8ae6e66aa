//! Where a remote lookup table lives and what can go wrong asking it:
//! the endpoint syntax of Postfix's socketmap and tcp tables
//! (`inet:host:port`, `unix:/path`, `local:/path`, and tcp_table's bare
//! `host:port` or `[v6]:port`), the connection to it, and the one error
//! type both remote kinds share.
//!
//! Trusts nothing from the network here: parsing is of configuration
//! text. Ports are numbers (Postfix also takes service names from
//! /etc/services; a table spec naming one is refused, not guessed). A
//! host name is resolved when a connection is made, so a table spec can
//! be parsed without I/O.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

/// Postfix's time limit for connecting, writing and reading, for both
/// kinds (`DICT_SOCKMAP_DEF_TIMEOUT` and `DICT_TCP_TMOUT`: 100 seconds).
pub const POSTFIX_TIMEOUT: Duration = Duration::from_secs(100);

/// A remote table server's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A host name or address (no brackets) and a port.
    Inet { host: String, port: u16 },
    /// A Unix-domain stream socket.
    Unix(PathBuf),
}

impl Endpoint {
    /// Parses Postfix's forms: `inet:host:port`, `unix:/path` (and its
    /// synonym `local:/path`), and tcp_table's bare `host:port`, where the
    /// host may be an IPv6 address in brackets (`[::1]:port`).
    pub fn parse(s: &str) -> Result<Endpoint, RemoteError> {
        let bad = |why: &'static str| RemoteError::BadEndpoint {
            spec: s.to_string(),
            why,
        };
        if let Some(path) = s.strip_prefix("unix:").or_else(|| s.strip_prefix("local:")) {
            if path.is_empty() {
                return Err(bad("no socket path"));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let rest = s.strip_prefix("inet:").unwrap_or(s);
        let (host, port) = split_host_port(rest).ok_or_else(|| bad("want host:port"))?;
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("bad host"));
        }
        let port = match port.parse::<u16>() {
            Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(bad("the port must be a number from 1 to 65535")),
        };
        Ok(Endpoint::Inet {
            host: host.to_string(),
            port,
        })
    }

    /// Whether the spec named its transport (`inet:`, `unix:`, `local:`),
    /// as a socketmap endpoint must.
    pub(crate) fn has_transport(s: &str) -> bool {
        ["inet:", "unix:", "local:"]
            .iter()
            .any(|t| s.starts_with(t))
    }

    /// Opens a connection (the caller bounds the time it may take).
    pub(crate) async fn connect(&self) -> Result<Box<dyn Io>, RemoteError> {
        let failed = |source| RemoteError::Connect {
            endpoint: self.to_string(),
            source,
        };
        match self {
            Endpoint::Inet { host, port } => {
                let stream = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(failed)?;
                // Requests are small and each waits for its reply.
                let _ = stream.set_nodelay(true);
                Ok(Box::new(stream))
            }
            Endpoint::Unix(path) => Ok(Box::new(
                tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(failed)?,
            )),
        }
    }
}

/// `host:port` or `[host]:port`: the port is after the last colon, so an
/// IPv6 address must be bracketed (as Postfix's host_port() wants).
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(inner) = s.strip_prefix('[') {
        let (host, after) = inner.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return Some((host, port));
    }
    let (host, port) = s.rsplit_once(':')?;
    if host.contains(':') {
        return None; // an unbracketed IPv6 address is ambiguous
    }
    Some((host, port))
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Inet { host, port } if host.contains(':') => {
                write!(f, "inet:[{host}]:{port}")
            }
            Endpoint::Inet { host, port } => write!(f, "inet:{host}:{port}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A byte stream to a table server: TCP or Unix-domain.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// How a server that is not "found" or "not found" failed, as it said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerClass {
    /// socketmap `TEMP`, tcp `4xx`.
    Temporary,
    /// socketmap `TIMEOUT`.
    Timeout,
    /// socketmap `PERM` (Postfix: a configuration error).
    Permanent,
}

/// Why a remote lookup has no answer. Every one of these means "try
/// again later", never "not found".
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("bad table endpoint {spec:?}: {why}")]
    BadEndpoint { spec: String, why: &'static str },
    #[error("bad socketmap {spec:?}: {why}")]
    BadSpec { spec: String, why: &'static str },
    #[error("connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("{endpoint}: {source}")]
    Io {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("{endpoint}: the server closed the connection before its reply ended")]
    Closed { endpoint: String },
    #[error("{endpoint}: no reply within {}s", after.as_secs_f64())]
    TimedOut { endpoint: String, after: Duration },
    #[error("{endpoint}: reply longer than {limit} bytes")]
    TooLong { endpoint: String, limit: usize },
    #[error("{endpoint}: malformed reply: {why}")]
    Malformed { endpoint: String, why: String },
    #[error("{endpoint}: server {class:?} error: {reason}")]
    Server {
        endpoint: String,
        class: ServerClass,
        reason: String,
    },
    #[error("a key with a NUL byte cannot be asked (Postfix's keys are C strings)")]
    NulInKey,
}

impl RemoteError {
    /// A connection-level failure during an exchange that a fresh
    /// connection may not have (the server restarted or dropped an idle
    /// connection): Postfix retries these once. Not a timeout.
    pub(crate) fn retry_fresh(&self) -> bool {
        matches!(self, RemoteError::Closed { .. } | RemoteError::Io { .. })
    }
}

/// Server text for a log line: printable ASCII only (others become `?`,
/// as Postfix's printable()), at most 200 characters.
pub(crate) fn printable(bytes: &[u8]) -> String {
    bytes
        .iter()
        .take(200)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) {
                b as char
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inet(host: &str, port: u16) -> Endpoint {
        Endpoint::Inet {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn postfix_forms() {
        assert_eq!(
            Endpoint::parse("inet:127.0.0.1:10001").unwrap(),
            inet("127.0.0.1", 10001)
        );
        assert_eq!(Endpoint::parse("inet:[::1]:25").unwrap(), inet("::1", 25));
        assert_eq!(
            Endpoint::parse("localhost:10002").unwrap(),
            inet("localhost", 10002)
        );
        assert_eq!(
            Endpoint::parse("[2001:db8::1]:7").unwrap(),
            inet("2001:db8::1", 7)
        );
        assert_eq!(
            Endpoint::parse("unix:/run/map.sock").unwrap(),
            Endpoint::Unix("/run/map.sock".into())
        );
        assert_eq!(
            Endpoint::parse("local:/run/map.sock").unwrap(),
            Endpoint::Unix("/run/map.sock".into())
        );
        assert_eq!(inet("::1", 25).to_string(), "inet:[::1]:25");
    }

    #[test]
    fn refused_forms() {
        for bad in [
            "",
            "unix:",
            "inet:",
            "host",
            "host:",
            ":25",
            "host:0",
            "host:65536",
            "host:smtp",
            "host:+25",
            "::1:25",
            "[::1]25",
            "[::1",
            "inet:host :25",
            "ho\nst:25",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(RemoteError::BadEndpoint { .. })),
                "{bad:?} parsed"
            );
        }
    }
}
