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

use std::net::SocketAddr;

use ppp::{v1, v2, HeaderResult, PartialResult};

/// Longest header accepted (v1 is at most 107 octets; v2 with TLVs more).
pub const MAX_HEADER: usize = 4096;

/// What a complete header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxied {
    /// The real client.
    Client(SocketAddr),
    /// A LOCAL/UNKNOWN header: keep the connection's own address.
    Local,
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
                _ => Proxied::Local,
            };
            Ok(Some((who, h.len())))
        }
        HeaderResult::V1(Err(e)) => Err(BadHeader::V1(e)),
        HeaderResult::V2(Err(e)) => Err(BadHeader::V2(e)),
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
