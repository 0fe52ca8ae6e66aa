//! The lines of Dovecot's authentication protocol, as pure functions:
//! the `AUTH` line we send, the handshake and answer lines we read.
//!
//! Trust: what is read here comes from Dovecot and is checked for what
//! it claims to be (mechanism names, base64, a request id); the user it
//! names loses its escapes and control characters. What is written holds
//! only fields the caller checked (base64, an offered mechanism).

use base64::Engine;

use super::{Mech, Peer};

/// The `AUTH` line. `mech` is one Dovecot offered, `initial` base64.
pub(super) fn auth_line(id: u32, mech: &str, initial: Option<&str>, peer: Peer) -> String {
    let mut line = format!("AUTH\t{id}\t{mech}\tservice=smtp\tnologin");
    if let Some(lip) = peer.lip {
        line.push_str(&format!("\tlip={lip}"));
    }
    line.push_str(&format!("\trip={}", peer.rip));
    if peer.secured {
        line.push_str("\tsecured");
    }
    // Last: Dovecot ignores anything after it.
    if let Some(resp) = initial {
        line.push_str(&format!("\tresp={resp}"));
    }
    line.push('\n');
    line
}

/// The client's text is base64 that decodes (or `=`, RFC 4954's empty
/// response): nothing else is sent to Dovecot.
pub fn is_base64(text: &str) -> bool {
    text == "="
        || base64::engine::general_purpose::STANDARD
            .decode(text)
            .is_ok()
}

/// A mechanism name as RFC 4422 §3.1 allows (so Dovecot's list cannot
/// put anything else in an EHLO reply).
fn is_mech_name(name: &str) -> bool {
    (1..=20).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

pub(super) enum Handshake {
    Mech(Mech),
    Done,
    Other,
}

/// One handshake line from Dovecot.
pub(super) fn handshake_line(line: &str) -> Result<Handshake, String> {
    let mut fields = line.split('\t');
    match fields.next() {
        Some("VERSION") => match fields.next() {
            Some("1") => Ok(Handshake::Other),
            v => Err(format!("protocol version {} (want 1)", v.unwrap_or("none"))),
        },
        Some("MECH") => {
            let Some(name) = fields.next().map(|n| n.to_ascii_uppercase()) else {
                return Ok(Handshake::Other);
            };
            let flags: Vec<&str> = fields.collect();
            if !is_mech_name(&name) || flags.contains(&"private") {
                return Ok(Handshake::Other);
            }
            Ok(Handshake::Mech(Mech {
                name,
                plaintext: flags.contains(&"plaintext"),
                anonymous: flags.contains(&"anonymous"),
            }))
        }
        Some("DONE") => Ok(Handshake::Done),
        _ => Ok(Handshake::Other),
    }
}

/// Dovecot's answer to a step.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Cont(String),
    /// The user. (Data on success, `resp=`, comes only to clients that
    /// send `final-resp-ok`; we do not, so Dovecot sends a mechanism's
    /// last data, SCRAM's signature, as a `CONT`.)
    Ok(Option<String>),
    Fail {
        temp: bool,
        user: Option<String>,
    },
}

/// An answer line for request `id`: None for any other line (ignored),
/// an error for one that is not what it claims.
pub(super) fn parse_answer(line: &str, id: u32) -> Option<Result<Answer, String>> {
    let mut fields = line.split('\t');
    let command = fields.next()?;
    if !matches!(command, "OK" | "CONT" | "FAIL") || fields.next()? != id.to_string() {
        return None;
    }
    let params: Vec<&str> = fields.collect();
    let user = params
        .iter()
        .find_map(|p| p.strip_prefix("user="))
        .map(|u| printable(&unescape(u)))
        .filter(|u| !u.is_empty());
    Some(match command {
        "CONT" => match params.first() {
            Some(data) if data.is_empty() || is_base64(data) => Ok(Answer::Cont(data.to_string())),
            _ => Err("CONT with a challenge that is not base64".into()),
        },
        "OK" => Ok(Answer::Ok(user)),
        _ => Ok(Answer::Fail {
            temp: params.contains(&"temp"),
            user,
        }),
    })
}

/// Dovecot's tab-escaping: `\x01` then `0` NUL, `1` itself, `t` TAB,
/// `r` CR, `n` LF; anything else stands for itself.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('\0'),
            Some('1') => out.push('\u{1}'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// A login as the session keeps and logs it: no control characters, at
/// most 256 of them (as a table login).
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(256).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly() {
        assert_eq!(
            parse_answer("OK\t7\tuser=alice@x.test\tfoo", 7),
            Some(Ok(Answer::Ok(Some("alice@x.test".into()))))
        );
        assert_eq!(
            parse_answer("OK\t6\tuser=alice", 7),
            None,
            "another request"
        );
        assert_eq!(parse_answer("SPID\t7", 7), None);
        assert_eq!(
            parse_answer("FAIL\t7\ttemp\treason=db down", 7),
            Some(Ok(Answer::Fail {
                temp: true,
                user: None
            }))
        );
        assert_eq!(
            parse_answer("FAIL\t7\tuser=bob", 7),
            Some(Ok(Answer::Fail {
                temp: false,
                user: Some("bob".into())
            }))
        );
        assert_eq!(
            parse_answer("CONT\t7\tVXNlcm5hbWU6", 7),
            Some(Ok(Answer::Cont("VXNlcm5hbWU6".into())))
        );
        assert!(matches!(parse_answer("CONT\t7\t250 ok\r", 7), Some(Err(_))));
        // A user with escapes and control characters: unescaped, stripped.
        assert_eq!(
            parse_answer("OK\t7\tuser=eve\u{1}tx\u{1}r\u{1}n\u{1}1y", 7),
            Some(Ok(Answer::Ok(Some("evexy".into()))))
        );
        assert_eq!(parse_answer("OK\t7\tuser=", 7), Some(Ok(Answer::Ok(None))));
    }

    #[test]
    fn handshakes_offer_public_mechanisms_with_clean_names() {
        let mech = |line| match handshake_line(line) {
            Ok(Handshake::Mech(m)) => Some(m),
            _ => None,
        };
        let plain = mech("MECH\tPLAIN\tplaintext").unwrap();
        assert!(plain.plaintext && !plain.anonymous);
        assert_eq!(
            mech("MECH\tcram-md5\tdictionary\tactive").unwrap().name,
            "CRAM-MD5"
        );
        assert!(mech("MECH\tANONYMOUS\tanonymous").unwrap().anonymous);
        assert!(mech("MECH\tAPOP\tprivate").is_none());
        assert!(mech("MECH\tPLAIN\r\n250 OK").is_none());
        assert!(mech("MECH\tX Y").is_none());
        assert!(matches!(handshake_line("DONE"), Ok(Handshake::Done)));
        assert!(handshake_line("VERSION\t2\t0").is_err());
        assert!(matches!(
            handshake_line("VERSION\t1\t2"),
            Ok(Handshake::Other)
        ));
    }

    #[test]
    fn only_base64_is_sent() {
        assert!(is_base64("dGVzdA=="));
        assert!(is_base64("="));
        for bad in [
            "dGVzdA==\tresp=eA==",
            "dGVz dA==",
            "YQ==\n",
            "abc",
            "a\u{1}b",
        ] {
            assert!(!is_base64(bad), "{bad:?}");
        }
        let peer = Peer {
            rip: "192.0.2.1".parse().unwrap(),
            lip: Some("192.0.2.2".parse().unwrap()),
            secured: true,
        };
        assert_eq!(
            auth_line(3, "PLAIN", Some("dGVzdA=="), peer),
            "AUTH\t3\tPLAIN\tservice=smtp\tnologin\tlip=192.0.2.2\trip=192.0.2.1\tsecured\tresp=dGVzdA==\n"
        );
    }
}
