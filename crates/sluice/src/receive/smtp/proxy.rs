//! The PROXY protocol (HAProxy, v1 text and v2 binary) on listeners marked
//! `proxy_protocol = true`: the load balancer's first bytes name the real
//! client, which is then used for relay policy, limits, logs and the
//! `Received:` header.
//!
//! Parsing is the `ppp` crate's. Trust: only listeners the administrator
//! marked accept the header, only from the balancers' own addresses
//! (`proxy_protocol_from`, required; anyone else is disconnected before
//! the header is read), and on those every connection must start with
//! one (as Postfix's `smtpd_upstream_proxy_protocol`), so a client that
//! reaches such a listener directly cannot choose its address. A `LOCAL` header (health checks) or
//! `UNKNOWN` keeps the balancer's own address.
//!
//! Here too is the session's first step on such a listener
//! ([`Session::read_proxy_header`]): the header read under a deadline.
//! While the daemon stops behind a balancer (`smtpd.balancer_drain_secs`),
//! a `LOCAL` header is the balancer's health check, and is answered `421`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ppp::{v1, v2, HeaderResult, PartialResult};
use std::sync::atomic::Ordering;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::session::Session;
use crate::log::Event;

/// Longest header accepted (v1 is at most 107 octets; v2 with TLVs more).
pub const MAX_HEADER: usize = 4096;

/// What a complete header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxied {
    /// The real client.
    Client(SocketAddr),
    /// A LOCAL (v2) or UNKNOWN (v1) header, the balancer's own connection
    /// (its health checks): keep the connection's own address.
    Local,
    /// A v2 PROXY header for an address family we do not take (a Unix
    /// socket): a client, but keep the connection's own address.
    Unnamed,
}

/// Why a connection's first bytes are not an acceptable header.
#[derive(Debug, thiserror::Error)]
pub enum BadHeader {
    #[error("PROXY header too long")]
    TooLong,
    #[error("bad PROXY v1 header: {0}")]
    V1(v1::BinaryParseError),
    #[error("bad PROXY v2 header: {0}")]
    V2(v2::ParseError),
}

/// Parses a header at the start of `buf`: `Ok(None)` when more bytes are
/// needed, otherwise what it said and its length.
pub fn parse(buf: &[u8]) -> Result<Option<(Proxied, usize)>, BadHeader> {
    let header = HeaderResult::parse(buf);
    if header.is_incomplete() {
        return if buf.len() >= MAX_HEADER {
            Err(BadHeader::TooLong)
        } else {
            Ok(None)
        };
    }
    match header {
        HeaderResult::V1(Ok(h)) => {
            let who = match h.addresses {
                v1::Addresses::Tcp4(a) => {
                    Proxied::Client(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                v1::Addresses::Tcp6(a) => {
                    Proxied::Client(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                v1::Addresses::Unknown => Proxied::Local,
            };
            Ok(Some((who, h.header.len())))
        }
        HeaderResult::V2(Ok(h)) => {
            let who = match (h.command, h.addresses) {
                (v2::Command::Local, _) => Proxied::Local,
                (_, v2::Addresses::IPv4(a)) => {
                    Proxied::Client(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                (_, v2::Addresses::IPv6(a)) => {
                    Proxied::Client(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                _ => Proxied::Unnamed,
            };
            Ok(Some((who, h.len())))
        }
        HeaderResult::V1(Err(e)) => Err(BadHeader::V1(e)),
        HeaderResult::V2(Err(e)) => Err(BadHeader::V2(e)),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<S> {
    /// Reads the PROXY header a load balancer sends first and takes the
    /// real client address from it; false (session over) if there is none.
    pub(super) async fn read_proxy_header(&mut self) -> bool {
        let lb = self.peer;
        if !self
            .listener
            .proxy_protocol_from
            .iter()
            .any(|n| n.contains(lb.ip()))
        {
            // Only the balancer may name the client: anyone else could
            // claim a trusted address and relay.
            let why = "PROXY header from a peer not in proxy_protocol_from";
            return self.refuse_proxy(lb, "peer_not_allowed", why);
        }
        let limit = Duration::from_secs(self.ctx.config.smtpd.idle_timeout_secs.clamp(1, 10));
        let deadline = Instant::now() + limit;
        loop {
            match parse(&self.inbuf) {
                Ok(Some((who, len))) => {
                    self.inbuf.drain(..len);
                    if who == Proxied::Local && self.ctx.stopping.load(Ordering::Relaxed) {
                        return self.fail_health_check(lb).await;
                    }
                    if let Proxied::Client(real) = who {
                        let real = super::session::canonical(real);
                        self.peer = real;
                        self.trusted = self.ctx.policy.is_trusted(real.ip());
                    }
                    self.ctx.logger.emit(&Event::Proxied {
                        client_ip: self.peer.ip(),
                        client_port: self.peer.port(),
                        lb_ip: lb.ip(),
                        lb_port: lb.port(),
                    });
                    return true;
                }
                Ok(None) => {}
                Err(why) => return self.refuse_proxy(lb, "bad_header", &why.to_string()),
            }
            let read = tokio::time::timeout_at(deadline.into(), self.io.read_buf(&mut self.inbuf));
            if !matches!(read.await, Ok(Ok(n)) if n > 0) {
                return self.refuse_proxy(lb, "no_header", "no PROXY header");
            }
        }
    }

    /// The balancer's health check while the daemon stops: `421`, so that
    /// it sends no new sessions here; false (session over).
    async fn fail_health_check(&mut self, lb: SocketAddr) -> bool {
        let host = &self.ctx.config.hostname;
        let reply = format!("421 4.3.2 {host} stopping, send no new sessions\r\n");
        let _ = self.io.write_all(reply.as_bytes()).await;
        self.ctx.logger.emit(&Event::HealthCheckFailed {
            lb_ip: lb.ip(),
            lb_port: lb.port(),
        });
        false
    }

    /// Logs why the balancer's connection is closed; false (session over).
    fn refuse_proxy(&self, lb: SocketAddr, cause: &str, why: &str) -> bool {
        self.ctx.logger.emit(&Event::ProxyRefused {
            lb_ip: lb.ip(),
            lb_port: lb.port(),
            cause: cause.into(),
            error: why.into(),
        });
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_headers() {
        let v1 = b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 25\r\nEHLO x\r\n";
        let (who, len) = parse(v1).unwrap().unwrap();
        assert_eq!(who, Proxied::Client("192.0.2.7:40000".parse().unwrap()));
        assert_eq!(&v1[len..], b"EHLO x\r\n");
        assert_eq!(parse(b"PROXY TCP4 192.0.2.7").unwrap(), None, "incomplete");
        assert!(
            matches!(parse(b"EHLO x\r\n"), Err(BadHeader::V1(_))),
            "no header: refused"
        );
        // A v2 header that says it is 5,000 bytes long: never complete.
        let mut endless = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x13\x88".to_vec();
        endless.resize(MAX_HEADER, 0);
        assert!(matches!(parse(&endless[..100]), Ok(None)));
        assert!(matches!(parse(&endless), Err(BadHeader::TooLong)));
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n").unwrap().unwrap().0,
            Proxied::Local
        );
        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        v2.extend_from_slice(&[
            0x21, 0x11, 0, 12, 192, 0, 2, 9, 127, 0, 0, 1, 0x9c, 0x40, 0, 25,
        ]);
        let (who, len) = parse(&v2).unwrap().unwrap();
        assert_eq!(who, Proxied::Client("192.0.2.9:40000".parse().unwrap()));
        assert_eq!(len, v2.len());
        assert_eq!(parse(&v2[..20]).unwrap(), None);
    }
}
