//! XFORWARD attributes (Postfix's XFORWARD_README) of the SMTP client a
//! message came from, kept with a message that goes to an after-queue
//! content filter (`Envelope::xforward`), so that the filter (amavisd-new)
//! sees the original client and not us: its policy banks (`MYNETS`,
//! "originating"), its log and its checks by client address.
//!
//! Trust: the HELO name is the client's: it is xtext-encoded (RFC 3461;
//! XFORWARD's encoding), so it cannot end the command line or add an
//! attribute of its own. The address is the socket's (or a trusted
//! balancer's PROXY header's). Invariant: the text is one line of
//! `NAME=value` attributes separated by single spaces, printable ASCII.

use super::SmtpClient;
use crate::log::Qid;

/// The longest HELO attribute sent, encoded (the rest of the line takes
/// at most 150 bytes).
const MAX_HELO: usize = 255;

/// The attributes of `client` for message `id`: `NAME` (Sluice looks no
/// name up: `[UNAVAILABLE]`, Postfix's word), `ADDR` (`IPV6:` before an
/// IPv6 address, as Postfix), `PORT`, `HELO`, `IDENT` (our queue ID) and
/// `SOURCE` (`LOCAL` for mynetworks and authenticated clients, whose
/// headers Postfix rewrites as local, else `REMOTE`).
pub fn attributes(id: u64, client: &SmtpClient) -> String {
    let ip = client.peer.ip();
    let addr = match ip.is_ipv6() {
        true => format!("IPV6:{ip}"),
        false => ip.to_string(),
    };
    // A name too long for one command line (XFORWARD_README: 512
    // bytes; Postfix would split the command) is not sent.
    let helo = match xtext(&client.helo) {
        helo if helo.is_empty() || helo.len() > MAX_HELO => "[UNAVAILABLE]".to_string(),
        helo => helo,
    };
    let source = match client.trusted || client.authenticated {
        true => "LOCAL",
        false => "REMOTE",
    };
    format!(
        "NAME=[UNAVAILABLE] ADDR={addr} PORT={port} HELO={helo} IDENT={qid} SOURCE={source}",
        port = client.peer.port(),
        qid = Qid(id),
    )
}

/// RFC 3461's xtext: `+`, `=`, and every byte outside `!`..`~` as `+HH`.
fn xtext(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'!'..=b'~' if b != b'+' && b != b'=' => out.push(b as char),
            _ => out.push_str(&format!("+{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(peer: &str, helo: &str, trusted: bool) -> SmtpClient {
        SmtpClient {
            peer: peer.parse().unwrap(),
            listener: "127.0.0.1:25".parse().unwrap(),
            helo: helo.into(),
            trusted,
            authenticated: false,
            auth_user: None,
            sender_auth: false,
            dmarc_reject: false,
        }
    }

    #[test]
    fn a_hostile_helo_stays_one_attribute() {
        let c = client("192.0.2.1:4000", "x\r\nMAIL FROM:<a> ADDR=127.0.0.1", false);
        let line = attributes(0x1234, &c);
        assert!(line.is_ascii() && !line.contains(['\r', '\n']), "{line}");
        assert_eq!(line.matches("ADDR=").count(), 1, "{line}");
        assert!(line.starts_with("NAME=[UNAVAILABLE] ADDR=192.0.2.1 PORT=4000 HELO=x+0D+0AMAIL"));
        assert!(line.ends_with(" SOURCE=REMOTE"), "{line}");
        let v6 = attributes(1, &client("[2001:db8::1]:25", "", true));
        assert!(v6.contains("ADDR=IPV6:2001:db8::1 "), "{v6}");
        assert!(v6.contains("HELO=[UNAVAILABLE] "), "{v6}");
        assert!(v6.ends_with("SOURCE=LOCAL"), "{v6}");
        let long = attributes(1, &client("192.0.2.1:1", &"+".repeat(100), false));
        assert!(
            long.contains("HELO=[UNAVAILABLE] ") && long.len() < 512,
            "{long}"
        );
    }
}
