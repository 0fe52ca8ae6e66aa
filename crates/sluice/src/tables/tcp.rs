//! Postfix's `tcp:` tables (tcp_table(5)): `tcp:host:port`, the protocol
//! postsrsd 1.x and some MTA-STS resolvers speak. A request is one line
//! `get SPACE key NEWLINE`, a reply one line `200 SPACE value` (found),
//! `500 SPACE reason` (not found) or `400 SPACE reason` (try again). As
//! Postfix's dict_tcp only the first digit counts, and both the key and
//! the reply text are %XX-quoted.
//!
//! Trusts the server for the answer and nothing else: a reply line is
//! read only up to Postfix's limit ([`MAX_REPLY_LINE`], 4096 bytes with
//! its newline); a line that does not start with three digits and a
//! space, a bad `%XX`, a status other than 2, 4 or 5, a value that is not
//! UTF-8, a hang past the time limit or a close before the newline is an
//! error ("try again later"), never "not found". The key cannot inject a
//! second request: every byte that is `%`, white space (newline
//! included), not printable or not ASCII is sent as `%XX`, exactly
//! Postfix's hex_quote(). A key with a NUL byte is refused (Postfix's
//! keys are C strings, it cannot send one). A decoded value is cut at a
//! `%00`, where Postfix's C string ends.
//!
//! Connections are persistent and pooled as for socketmap (see
//! [`super::socketmap::pool`]); after a `4xx`, a malformed reply or any
//! failure the connection is closed (Postfix does the same).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::socketmap::pool::{self, AttemptFuture, Conn, Pool};
use super::socketmap::printable;
pub use super::socketmap::{Endpoint, RemoteError, ServerClass, POSTFIX_TIMEOUT};

/// Postfix's reply line limit (`DICT_TCP_MAXLEN`), newline included.
pub const MAX_REPLY_LINE: usize = 4096;

/// A tcp table: one server.
pub struct TcpTable {
    /// Sluice's name for the table (for the caller's logs).
    name: String,
    pool: Pool,
    timeout: Duration,
}

impl TcpTable {
    /// `spec` is what follows `tcp:`: `host:port` or `[v6]:port` (an
    /// `inet:` prefix is accepted too). No I/O: the first query connects.
    pub fn new(name: &str, spec: &str, timeout: Duration) -> Result<Self, RemoteError> {
        let endpoint = Endpoint::parse(spec)?;
        if let Endpoint::Unix(_) = endpoint {
            return Err(RemoteError::BadEndpoint {
                spec: spec.to_string(),
                why: "a tcp table is on host:port",
            });
        }
        Ok(TcpTable {
            name: name.to_string(),
            pool: Pool::new(endpoint),
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
        let request = request(key);
        let endpoint = self.pool.endpoint().to_string();
        pool::exchange(&self.pool, self.timeout, |conn| {
            attempt(conn, request.clone(), endpoint.clone())
        })
        .await
    }
}

/// The line Postfix sends for `key`.
fn request(key: &str) -> Vec<u8> {
    let mut line = b"get ".to_vec();
    line.extend_from_slice(hex_quote(key.as_bytes()).as_bytes());
    line.push(b'\n');
    line
}

/// Postfix's hex_quote(): `%`, white space (C's isspace: space, \t, \n,
/// \v, \f, \r), and any byte not printable ASCII become `%XX` (upper
/// case); other bytes are themselves.
pub fn hex_quote(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        let keep = b != b'%' && (0x21..0x7f).contains(&b);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Postfix's hex_unquote(): `%XX` (either case) is a byte, other bytes
/// are themselves; a `%` without two hex digits is None.
pub fn hex_unquote(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'%' {
            let hex = |j: usize| text.get(j).and_then(|&c| (c as char).to_digit(16));
            out.push((hex(i + 1)? * 16 + hex(i + 2)?) as u8);
            i += 3;
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    Some(out)
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
        let line = read_line(conn, &endpoint).await?;
        parse_reply(&line, &endpoint)
    })
}

/// One reply line without its newline, at most [`MAX_REPLY_LINE`] bytes
/// with it; never buffers more than that.
async fn read_line(conn: &mut Conn, endpoint: &str) -> Result<Vec<u8>, RemoteError> {
    let mut line = Vec::new();
    loop {
        let buf = conn.io.fill_buf().await.map_err(|source| RemoteError::Io {
            endpoint: endpoint.to_string(),
            source,
        })?;
        if buf.is_empty() {
            return Err(RemoteError::Closed {
                endpoint: endpoint.to_string(),
            });
        }
        let room = MAX_REPLY_LINE - line.len();
        let window = &buf[..buf.len().min(room)];
        if let Some(nl) = window.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&window[..nl]);
            conn.io.consume(nl + 1);
            return Ok(line);
        }
        let taken = window.len();
        line.extend_from_slice(window);
        conn.io.consume(taken);
        if line.len() >= MAX_REPLY_LINE {
            return Err(RemoteError::TooLong {
                endpoint: endpoint.to_string(),
                limit: MAX_REPLY_LINE,
            });
        }
    }
}

/// A reply line's meaning, as Postfix's dict_tcp reads it: three digits,
/// one white space character, then %XX-quoted text; the first digit
/// decides.
fn parse_reply(line: &[u8], endpoint: &str) -> Result<Option<String>, RemoteError> {
    let malformed = |why: String| RemoteError::Malformed {
        endpoint: endpoint.to_string(),
        why,
    };
    let well_formed =
        line.len() >= 4 && line[..3].iter().all(u8::is_ascii_digit) && is_c_space(line[3]);
    let text = match well_formed {
        true => hex_unquote(&line[4..]),
        false => None,
    };
    let Some(text) = text else {
        return Err(malformed(format!("{:?}", printable(line))));
    };
    match line[0] {
        b'2' => {
            // Postfix's value is a C string: it ends at a %00.
            let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
            match String::from_utf8(text[..end].to_vec()) {
                Ok(value) => Ok(Some(value)),
                Err(_) => Err(malformed("the value is not UTF-8".into())),
            }
        }
        b'5' => Ok(None),
        b'4' => Err(RemoteError::Server {
            endpoint: endpoint.to_string(),
            class: ServerClass::Temporary,
            reason: printable(&text),
        }),
        _ => Err(malformed(format!("bad status {:?}", printable(line)))),
    }
}

/// C's isspace() in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8]) -> Result<Option<String>, RemoteError> {
        parse_reply(line, "inet:127.0.0.1:1")
    }

    #[test]
    fn quoting_as_postfix() {
        assert_eq!(hex_quote(b"user@example.com"), "user@example.com");
        assert_eq!(hex_quote(b"a b%c"), "a%20b%25c");
        assert_eq!(hex_quote(b"x\ny\r\t\x0b\x0c"), "x%0Ay%0D%09%0B%0C");
        assert_eq!(hex_quote("é~\x7f".as_bytes()), "%C3%A9~%7F");
        assert_eq!(hex_quote(b"!\"'=+,;:<>"), "!\"'=+,;:<>");
        assert_eq!(request("a\nget b"), b"get a%0Aget%20b\n");
        for raw in [&b"a b%c\n\xff"[..], b"", b"%%%"] {
            assert_eq!(hex_unquote(hex_quote(raw).as_bytes()).unwrap(), raw);
        }
        assert_eq!(hex_unquote(b"%2a%2A+").unwrap(), b"**+");
        for bad in [&b"%"[..], b"%2", b"%g0", b"%0g", b"a%"] {
            assert_eq!(hex_unquote(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn replies() {
        assert_eq!(parse(b"200 a%20b").unwrap().as_deref(), Some("a b"));
        assert_eq!(parse(b"250 x").unwrap().as_deref(), Some("x"));
        assert_eq!(parse(b"200\tx").unwrap().as_deref(), Some("x"));
        assert_eq!(parse(b"200 ").unwrap().as_deref(), Some(""));
        assert_eq!(parse(b"200 a%00b").unwrap().as_deref(), Some("a"));
        assert_eq!(parse(b"200 x\r").unwrap().as_deref(), Some("x\r"));
        assert_eq!(parse(b"500 not found").unwrap(), None);
        assert_eq!(parse(b"599 ").unwrap(), None);
        match parse(b"400 busy%0Anow") {
            Err(RemoteError::Server { class, reason, .. }) => {
                assert_eq!(
                    (class, reason.as_str()),
                    (ServerClass::Temporary, "busy?now")
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_replies_are_errors() {
        for line in [
            &b"200"[..],
            b"500",
            b"20 x",
            b"2000 x",
            b"abc x",
            b"300 x",
            b"100 x",
            b"200 %zz",
            b"500 100%",
            b"200 %ff",
            b"",
            b" 200 x",
        ] {
            assert!(
                matches!(parse(line), Err(RemoteError::Malformed { .. })),
                "{line:?}"
            );
        }
    }

    #[test]
    fn specs() {
        let t = TcpTable::new("t", "127.0.0.1:10001", POSTFIX_TIMEOUT).unwrap();
        assert_eq!(t.endpoint().to_string(), "inet:127.0.0.1:10001");
        let t = TcpTable::new("t", "[::1]:10001", POSTFIX_TIMEOUT).unwrap();
        assert_eq!(t.endpoint().to_string(), "inet:[::1]:10001");
        for bad in ["unix:/s", "127.0.0.1", "::1:25", ""] {
            assert!(TcpTable::new("t", bad, POSTFIX_TIMEOUT).is_err(), "{bad:?}");
        }
    }
}
