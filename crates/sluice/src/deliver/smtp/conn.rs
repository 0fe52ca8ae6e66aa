//! An outbound SMTP connection: connect, greeting, EHLO (falling back to
//! HELO), STARTTLS as the destination's TLS level says, commands,
//! replies, RSET and QUIT. An LMTP connection (RFC 2033) is the same
//! session with LHLO, no STARTTLS, and a reply per recipient at the end
//! of the message (`transaction.rs`).
//!
//! Trust: the peer's replies are parsed by smtp-proto's reply and EHLO
//! parsers (at most 4 KiB of text per reply); anything unexpected is an
//! error, which callers turn into a temporary failure, never a silent
//! success.

use std::time::Duration;

use smtp_proto::response::parser::ResponseReceiver;
use smtp_proto::EhloResponse;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tls::{server_name, Level, Stream, TlsChoice};
use crate::config::services::ServiceAddr;
use crate::config::Config;
use crate::log::io_text;
use crate::message::reply::{Enhanced, Relay, Reply};
use crate::smtp::io::{summary, MaybeTls};
use crate::smtp::wire::Wire;

/// Why a connection could not be set up, as a type: the agent decides on
/// it (is the host down? may TLS be skipped?), never on the words of its
/// message, which is what the log and the deferral say.
#[derive(Debug)]
pub enum ConnectError {
    Unreachable {
        target: String,
        why: String,
    },
    NoGreeting {
        relay: String,
        why: std::io::Error,
    },
    Refused {
        relay: String,
        code: u16,
        text: String,
    },
    HeloRejected {
        relay: String,
        code: u16,
        text: String,
    },
    /// The session broke during EHLO/HELO.
    Broken {
        relay: String,
        why: std::io::Error,
    },
    TlsNotOffered {
        relay: String,
    },
    Tls {
        relay: String,
        why: String,
    },
    /// SMTP AUTH could not be done or was refused (`auth.rs`).
    Auth(super::auth::AuthError),
}

impl std::error::Error for ConnectError {}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.reply())
    }
}

impl ConnectError {
    /// The deferral it causes: our own 451 with its enhanced status.
    pub fn reply(&self) -> Reply {
        let status = |s, d| Enhanced::new(4, s, d);
        let (status, text) = match self {
            ConnectError::Unreachable { target, why } => {
                (status(4, 1), format!("connect to {target}: {why}"))
            }
            ConnectError::NoGreeting { relay, why } => (
                status(4, 2),
                format!("{relay}: no greeting: {}", io_text(why)),
            ),
            ConnectError::Refused { relay, code, text } => (
                status(4, 0),
                format!("{relay} refused to talk to me: {code} {text}"),
            ),
            ConnectError::HeloRejected { relay, code, text } => (
                status(4, 0),
                format!("{relay} rejected HELO: {code} {text}"),
            ),
            ConnectError::Broken { relay, why } => {
                (status(4, 2), format!("{relay}: {}", io_text(why)))
            }
            ConnectError::TlsNotOffered { relay } => (
                status(7, 4),
                format!("TLS is required, but was not offered by {relay}"),
            ),
            ConnectError::Tls { relay, why } => {
                (status(7, 5), format!("TLS with {relay} failed: {why}"))
            }
            ConnectError::Auth(e) => return e.0.clone(),
        };
        Reply::own(451, status, text)
    }

    /// The host is not taking mail at all (no connection, no greeting, a
    /// refusal to talk): the dead-host cache skips it for a while.
    pub fn host_is_down(&self) -> bool {
        matches!(
            self,
            ConnectError::Unreachable { .. }
                | ConnectError::NoGreeting { .. }
                | ConnectError::Refused { .. }
                | ConnectError::HeloRejected { .. }
        )
    }

    /// What the log's `connect to …` line says after the host: the text
    /// without its status code (`connect to mx[192.0.2.1]:25: Connection
    /// refused`, as Postfix).
    pub fn logged(&self) -> String {
        self.reply().text
    }

    /// The TLS handshake (or STARTTLS) failed: with `may`, try again in
    /// plain text.
    pub fn tls_failed(&self) -> bool {
        matches!(self, ConnectError::Tls { .. })
    }
}

/// Bytes of a body written under one write timeout.
const BODY_PIECE: usize = 64 << 10;

/// One step of reading a reply, with no I/O (so it can be fuzzed): feeds
/// the buffered bytes `rbuf` to `parser` and moves the bytes it used to
/// `raw`. Returns the reply once it is complete (the bytes after it stay
/// in `rbuf`), `None` when more bytes are needed, or why the reply is
/// malformed.
pub(super) fn parse_reply(
    parser: &mut ResponseReceiver,
    rbuf: &mut Vec<u8>,
    raw: &mut Vec<u8>,
) -> Result<Option<Reply>, smtp_proto::Error> {
    let mut bytes = rbuf.iter();
    let parsed = parser.parse(&mut bytes);
    let used = rbuf.len() - bytes.len();
    raw.extend(rbuf.drain(..used));
    match parsed {
        Ok(r) => Ok(Some(Reply::from_response(r))),
        Err(smtp_proto::Error::NeedsMoreData { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The capabilities a (raw) EHLO reply advertises; 0 if it cannot be
/// parsed (capabilities we do not understand are ignored, not fatal).
#[cfg(test)]
pub(super) fn ehlo_capabilities(raw: &[u8]) -> u32 {
    ehlo_offers(raw).0
}

/// The capabilities and the AUTH mechanisms (smtp-proto's bits) of a raw
/// EHLO reply; 0 for what cannot be parsed.
pub(super) fn ehlo_offers(raw: &[u8]) -> (u32, u64) {
    EhloResponse::parse(&mut raw.iter()).map_or((0, 0), |e| (e.capabilities, e.auth_mechanisms))
}

/// Whether an EHLO reply offers XFORWARD (`250-XFORWARD NAME ADDR …`),
/// which smtp-proto does not parse.
fn offers_xforward(raw: &[u8]) -> bool {
    raw.split(|&b| b == b'\n').any(|line| {
        let word = line.get(4..).unwrap_or_default();
        word.len() >= 8 && word[..8].eq_ignore_ascii_case(b"XFORWARD")
    })
}

pub(super) enum TxError {
    /// The connection died before the first reply of this transaction.
    Stale,
    /// The connection died or misbehaved mid-transaction.
    Broken(Reply),
}

pub(super) struct SmtpConn {
    pub stream: Stream,
    /// "TLSv1.3 with cipher …" once encrypted, and whether the certificate
    /// was verified.
    pub tls: Option<(String, bool)>,
    pub rbuf: Vec<u8>,
    /// `host[ip]:port`, for the log.
    pub relay: String,
    /// The same server, typed, for outcomes.
    pub peer: Relay,
    pub pipelining: bool,
    pub size: bool,
    pub eightbit: bool,
    pub smtputf8: bool,
    /// The peer offers DSN (RFC 3461): NOTIFY, ORCPT, RET, ENVID go along.
    pub dsn: bool,
    /// The peer offers XFORWARD (an after-queue filter: `transaction.rs`).
    pub xforward: bool,
    /// The AUTH mechanisms the last EHLO offered (smtp-proto's bits).
    pub auth_mechanisms: u64,
    /// The sender's credentials the session authenticated with (`auth.rs`).
    pub sasl_sender: Option<std::sync::Arc<super::auth::Credentials>>,
    /// Limit for each command reply and each write.
    pub timeout: Duration,
    /// Limit for the reply to the final dot (RFC 5321 §4.5.3.2.6: 10 minutes).
    pub data_done_timeout: Duration,
    /// False once the session is in an unknown state (a failed RSET): the
    /// results already known stand, but the connection is not reused.
    pub usable: bool,
    /// The peer said 421 (too busy, closing): feedback for the queue's
    /// concurrency window.
    pub throttled: bool,
    /// LMTP: LHLO, and one reply per accepted recipient after the body.
    pub lmtp: bool,
}

impl SmtpConn {
    /// Connects from `source` (`egress.rs`) and says EHLO with its name;
    /// with a TLS `level` other than `none` and STARTTLS offered,
    /// encrypts and says EHLO again. Also says how the source address
    /// was bound.
    pub async fn connect(
        host: &str,
        addr: std::net::SocketAddr,
        config: &Config,
        tls: TlsChoice<'_>,
        (source, enforce): (&super::egress::Source, bool),
    ) -> Result<(SmtpConn, super::egress::Bound), ConnectError> {
        let level = tls.level;
        let connect_timeout = Duration::from_secs(config.delivery.connect_timeout_secs.max(1));
        let (ip, port) = (addr.ip(), addr.port());
        let target = format!("{host}[{ip}]:{port}");
        let dial = super::egress::dial(addr, source, enforce);
        let (stream, bound) = match tokio::time::timeout(connect_timeout, dial).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                let why = io_text(&e);
                return Err(ConnectError::Unreachable { target, why });
            }
            Err(_) => {
                let why = "timed out".into();
                return Err(ConnectError::Unreachable { target, why });
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = Relay::Smtp {
            host: host.to_string(),
            addr,
        };
        let mut conn = SmtpConn::greeted(
            tokio_util::either::Either::Left(stream),
            peer,
            config,
            false,
        )
        .await?;
        let caps = conn.hello(&source.helo).await?;
        let offered = caps & smtp_proto::EXT_START_TLS != 0;
        match level {
            Level::None => {}
            _ if offered => {
                conn.start_tls(host, tls).await?;
                conn.hello(&source.helo).await?;
            }
            Level::May => {}
            _ => {
                let relay = conn.relay.clone();
                return Err(ConnectError::TlsNotOffered { relay });
            }
        }
        Ok((conn, bound))
    }

    /// Connects to an LMTP server and says LHLO (no TLS: LMTP runs on a
    /// local socket or a trusted network, as in Postfix's lmtp client).
    pub async fn connect_lmtp(
        service: &ServiceAddr,
        config: &Config,
    ) -> Result<SmtpConn, ConnectError> {
        let connect_timeout = Duration::from_secs(config.delivery.connect_timeout_secs.max(1));
        let target = service.to_string();
        let unreachable = |why: String| ConnectError::Unreachable {
            target: target.clone(),
            why,
        };
        let wire = match tokio::time::timeout(connect_timeout, crate::smtp::wire::connect(service))
            .await
        {
            Ok(Ok(w)) => w,
            Ok(Err(e)) => return Err(unreachable(io_text(&e))),
            Err(_) => return Err(unreachable("timed out".into())),
        };
        let mut conn = SmtpConn::greeted(wire, Relay::Lmtp(target), config, true).await?;
        conn.hello(&config.hostname).await?;
        Ok(conn)
    }

    /// A session on `wire` once the server's greeting was a 2xx.
    async fn greeted(
        wire: Wire,
        peer: Relay,
        config: &Config,
        lmtp: bool,
    ) -> Result<SmtpConn, ConnectError> {
        let mut conn = SmtpConn {
            stream: MaybeTls::Plain(wire),
            tls: None,
            rbuf: Vec::with_capacity(1024),
            relay: peer.to_string(),
            peer,
            pipelining: false,
            size: false,
            eightbit: false,
            smtputf8: false,
            dsn: false,
            xforward: false,
            auth_mechanisms: 0,
            sasl_sender: None,
            timeout: Duration::from_secs(config.delivery.command_timeout_secs.max(1)),
            data_done_timeout: Duration::from_secs(config.delivery.data_done_timeout_secs.max(1)),
            usable: true,
            throttled: false,
            lmtp,
        };
        let greeting = match conn.read_reply().await {
            Ok(g) => g,
            Err(why) => {
                let relay = conn.relay.clone();
                return Err(ConnectError::NoGreeting { relay, why });
            }
        };
        if greeting.class() != 2 {
            return Err(ConnectError::Refused {
                relay: conn.relay.clone(),
                code: greeting.code,
                text: greeting.to_string(),
            });
        }
        Ok(conn)
    }

    /// EHLO (HELO if refused), or LHLO for LMTP (which has no fallback);
    /// notes the extensions and returns them.
    async fn hello(&mut self, name: &str) -> Result<u32, ConnectError> {
        let relay = self.relay.clone();
        let err = |why: std::io::Error| ConnectError::Broken {
            relay: relay.clone(),
            why,
        };
        let verb = if self.lmtp { "LHLO" } else { "EHLO" };
        self.send(format!("{verb} {name}\r\n").as_bytes())
            .await
            .map_err(err)?;
        let (ehlo, raw) = self.read_reply_raw(self.timeout).await.map_err(err)?;
        if self.lmtp && ehlo.class() != 2 {
            return Err(ConnectError::HeloRejected {
                relay: self.relay.clone(),
                code: ehlo.code,
                text: ehlo.to_string(),
            });
        }
        if ehlo.class() == 2 {
            // Capabilities we do not understand are ignored, not fatal.
            let (caps, auth) = ehlo_offers(&raw);
            self.auth_mechanisms = auth;
            self.pipelining = caps & smtp_proto::EXT_PIPELINING != 0;
            self.size = caps & smtp_proto::EXT_SIZE != 0;
            self.eightbit = caps & smtp_proto::EXT_8BIT_MIME != 0;
            self.smtputf8 = caps & smtp_proto::EXT_SMTP_UTF8 != 0;
            self.dsn = caps & smtp_proto::EXT_DSN != 0;
            self.xforward = offers_xforward(&raw);
            return Ok(caps);
        }
        self.send(format!("HELO {name}\r\n").as_bytes())
            .await
            .map_err(err)?;
        let helo = self.read_reply().await.map_err(err)?;
        if helo.class() != 2 {
            return Err(ConnectError::HeloRejected {
                relay: self.relay.clone(),
                code: helo.code,
                text: helo.to_string(),
            });
        }
        (self.pipelining, self.size, self.eightbit, self.smtputf8) = (false, false, false, false);
        (self.dsn, self.auth_mechanisms, self.xforward) = (false, 0, false);
        Ok(0)
    }

    /// STARTTLS and the handshake; any failure is [`ConnectError::Tls`]
    /// (the caller may fall back to plain text for `may`).
    async fn start_tls(&mut self, host: &str, tls: TlsChoice<'_>) -> Result<(), ConnectError> {
        let level = tls.level;
        let relay = self.relay.clone();
        let fail = |e: &dyn std::fmt::Display| ConnectError::Tls {
            relay: relay.clone(),
            why: e.to_string(),
        };
        self.send(b"STARTTLS\r\n").await.map_err(|e| fail(&e))?;
        let reply = self.read_reply().await.map_err(|e| fail(&e))?;
        if reply.code != 220 {
            return Err(fail(&format!("STARTTLS refused: {reply}")));
        }
        // Anything the server sent after 220 came in clear: not trusted.
        self.rbuf.clear();
        let name = server_name(host).map_err(|e| fail(&e))?;
        let plain = self.stream.take_plain().map_err(|e| fail(&e))?;
        let handshake = tls.connector.connect(name, plain);
        let stream = match tokio::time::timeout(self.timeout, handshake).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(fail(&e)),
            Err(_) => return Err(fail(&"handshake timed out")),
        };
        let text = summary(stream.get_ref().1).unwrap_or_else(|| "TLS".into());
        self.tls = Some((text, level == Level::Verify));
        self.stream = MaybeTls::Tls(Box::new(stream));
        Ok(())
    }

    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let write = async {
            self.stream.write_all(bytes).await?;
            self.stream.flush().await
        };
        match tokio::time::timeout(self.timeout, write).await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "write timed out",
            )),
        }
    }

    pub async fn read_reply(&mut self) -> std::io::Result<Reply> {
        self.read_reply_within(self.timeout).await
    }

    /// Reads one reply, waiting at most `limit` for each read.
    pub async fn read_reply_within(&mut self, limit: Duration) -> std::io::Result<Reply> {
        self.read_reply_raw(limit).await.map(|(r, _)| r)
    }

    /// Writes a message body in pieces, each within the write timeout, so
    /// a big message to a slow but live peer is not cut off.
    pub async fn send_body(&mut self, wire: &[u8]) -> std::io::Result<()> {
        for piece in wire.chunks(BODY_PIECE) {
            self.send(piece).await?;
        }
        Ok(())
    }

    /// Reads one (possibly multi-line) reply with smtp-proto's parser
    /// (at most 4 KiB of text); also returns the reply's raw octets, which
    /// EHLO capability parsing needs.
    async fn read_reply_raw(&mut self, limit: Duration) -> std::io::Result<(Reply, Vec<u8>)> {
        let mut parser = ResponseReceiver::default();
        let mut raw = Vec::new();
        loop {
            match parse_reply(&mut parser, &mut self.rbuf, &mut raw) {
                Ok(Some(reply)) => {
                    if reply.code == 421 {
                        // The server is closing: nothing more on this connection.
                        self.throttled = true;
                        self.usable = false;
                    }
                    return Ok((reply, raw));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("malformed reply: {e}"),
                    ))
                }
            }
            self.rbuf.reserve(4096);
            let n = match tokio::time::timeout(limit, self.stream.read_buf(&mut self.rbuf)).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "reply timed out",
                    ))
                }
            };
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ));
            }
        }
    }

    pub async fn reset(&mut self) -> std::io::Result<()> {
        self.send(b"RSET\r\n").await?;
        let reply = self.read_reply().await?;
        if reply.class() != 2 {
            return Err(std::io::Error::other(format!("RSET refused: {reply}")));
        }
        Ok(())
    }

    pub async fn quit(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            self.send(b"QUIT\r\n").await?;
            self.read_reply().await
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::{ConnectError, Enhanced};

    #[test]
    fn decisions_follow_the_kind_of_error_not_its_words() {
        let relay = || "mx.test[192.0.2.1]:25".to_string();
        // A peer's refusal whose text reads like something else.
        let refused = ConnectError::Refused {
            relay: relay(),
            code: 554,
            text: "4.7.5 TLS with you failed".into(),
        };
        assert!(refused.host_is_down() && !refused.tls_failed());
        // Broken during EHLO: not a dead host, whatever the text.
        let broken = ConnectError::Broken {
            relay: relay(),
            why: std::io::Error::other("no greeting"),
        };
        assert!(!broken.host_is_down());
        let tls = ConnectError::Tls {
            relay: relay(),
            why: "4.4.1 connect failed".into(),
        };
        assert!(tls.tls_failed() && !tls.host_is_down());
        let down = ConnectError::Unreachable {
            target: relay(),
            why: "Connection refused".into(),
        };
        assert!(down.host_is_down());
        assert!(down.to_string().starts_with("4.4.1 connect to mx.test"));
    }

    #[test]
    fn connect_errors_are_replies_that_read_as_before() {
        let relay = || "mx.test[192.0.2.1]:25".to_string();
        let refused = ConnectError::Refused {
            relay: relay(),
            code: 554,
            text: "554 5.7.1 go away".into(),
        };
        let reply = refused.reply();
        assert!(reply.is_temporary() && reply.status == Enhanced::new(4, 4, 0));
        assert_eq!(
            refused.to_string(),
            "4.4.0 mx.test[192.0.2.1]:25 refused to talk to me: 554 554 5.7.1 go away"
        );
        assert_eq!(
            refused.logged(),
            "mx.test[192.0.2.1]:25 refused to talk to me: 554 554 5.7.1 go away"
        );
        let tls = ConnectError::TlsNotOffered { relay: relay() };
        assert_eq!(
            tls.to_string(),
            "4.7.4 TLS is required, but was not offered by mx.test[192.0.2.1]:25"
        );
        let broken = ConnectError::Broken {
            relay: relay(),
            why: std::io::Error::from_raw_os_error(104),
        };
        assert_eq!(
            broken.to_string(),
            "4.4.2 mx.test[192.0.2.1]:25: Connection reset by peer"
        );
    }
}
