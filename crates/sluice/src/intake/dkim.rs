//! DKIM signing (RFC 6376; RFC 8463 for Ed25519) of mail our own users
//! send, with mail-auth: relaxed/relaxed canonicalization, rsa-sha256 or
//! ed25519-sha256 by the key, the usual headers.
//!
//! From is oversigned: `h=` names it once more than the message has From
//! fields, so no From can be added without breaking the signature. `x=`
//! limits how long a signature can be replayed: by default two days past
//! the queue lifetime (a message we still send never carries an expired
//! one).
//!
//! Which mail: from clients that may relay (mynetworks, authenticated),
//! whose `From:` domain is a key's domain or below it (`d=` is the key's
//! domain, so DMARC's relaxed alignment holds). Signed once, when the
//! message is received, before it is spooled: every copy carries it.
//!
//! Trust: key files are the administrator's (read at start; a bad one
//! stops the start); messages are the client's. Invariant: a message that
//! cannot be signed is still accepted, unsigned, and that is logged.

use std::path::{Path, PathBuf};

use mail_auth::common::crypto::{DkimKey, Ed25519Key, RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;

use crate::config::DkimKeyConfig;

/// Headers signed unless a key names its own (those a transport does not
/// change; absent ones are signed too, so they cannot be added later).
pub const DEFAULT_HEADERS: &[&str] = &[
    "From",
    "Reply-To",
    "Subject",
    "Date",
    "To",
    "Cc",
    "Message-ID",
    "In-Reply-To",
    "References",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
];

/// How long a signature outlives the queue lifetime by default (`x=`).
pub const EXPIRE_AFTER_QUEUE: u64 = 2 * 86_400;

type Ready = DkimSigner<DkimKey, mail_auth::dkim::Done>;

struct Key {
    domain: String,
    signer: Ready,
}

/// The configured signing keys.
#[derive(Default)]
pub struct Signers {
    keys: Vec<Key>,
}

/// Why the DKIM keys could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DkimError {
    #[error(
        "dkim: {domain}: expire_secs ({secs}) must exceed queue.maximal_lifetime_secs \
         ({lifetime}): mail still queued would carry an expired signature"
    )]
    ExpiresInQueue {
        domain: String,
        secs: u64,
        lifetime: u64,
    },
    #[error("dkim: {}: {err}", path.display())]
    Pem {
        path: PathBuf,
        err: rustls::pki_types::pem::Error,
    },
    #[error("dkim: {}: not an RSA or Ed25519 private key: {err}", path.display())]
    NotAKey {
        path: PathBuf,
        err: mail_auth::Error,
    },
    #[error("dkim: {0}: headers must include From")]
    FromNotSigned(String),
}

impl Signers {
    /// Loads every key; the first bad one is the error. Signatures
    /// expire (`x=`) after the key's `expire_secs`, by default two days
    /// after the queue (`queue_lifetime_secs`) gives up on a message, so
    /// that no copy we send carries an expired signature.
    pub fn load(keys: &[DkimKeyConfig], queue_lifetime_secs: u64) -> Result<Signers, DkimError> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let expire = match k.expire_secs {
                None => queue_lifetime_secs.saturating_add(EXPIRE_AFTER_QUEUE),
                Some(secs) if secs != 0 && secs <= queue_lifetime_secs => {
                    return Err(DkimError::ExpiresInQueue {
                        domain: k.domain.to_string(),
                        secs,
                        lifetime: queue_lifetime_secs,
                    })
                }
                Some(secs) => secs,
            };
            let key = load_key(&k.key_file)?;
            let headers: Vec<String> = match &k.headers {
                Some(h) if !h.is_empty() => h.clone(),
                _ => DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect(),
            };
            if !headers.iter().any(|h| h.eq_ignore_ascii_case("from")) {
                return Err(DkimError::FromNotSigned(k.domain.to_string()));
            }
            let headers = oversign_from(headers);
            let signer = DkimSigner::from_key(key)
                .domain(k.domain.to_string())
                .selector(k.selector.clone())
                .headers(headers)
                .expiration(expire);
            out.push(Key {
                domain: k.domain.to_string(),
                signer,
            });
        }
        Ok(Signers { keys: out })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `DKIM-Signature:` field (with CRLF) for `message`, if a key
    /// covers its From domain; `Err` if signing failed.
    pub fn sign(&self, message: &[u8]) -> Option<Result<(String, &str), mail_auth::Error>> {
        if self.keys.is_empty() {
            return None;
        }
        let from = from_domain(message)?;
        let key = self
            .keys
            .iter()
            .find(|k| from == k.domain || from.ends_with(&format!(".{}", k.domain)))?;
        Some(
            key.signer
                .sign(message)
                .map(|s| (s.to_header(), key.domain.as_str())),
        )
    }
}

/// `headers` with From named once more at the end. mail-auth signs every
/// field of a name listed (bottom up) and then each listed name it found
/// no field for, as an empty one; the extra From is never matched (the
/// first From in the list takes them all), so `h=` names From once more
/// than the message has From fields, and a From added later (where a
/// reader would see it, above the signed one) breaks the signature (RFC
/// 6376 §5.4.2, §8.15).
fn oversign_from(mut headers: Vec<String>) -> Vec<String> {
    headers.push("From".into());
    headers
}

/// A PEM private key: PKCS#8 Ed25519 or RSA, or PKCS#1 RSA.
pub(crate) fn load_key(path: &Path) -> Result<DkimKey, DkimError> {
    let der = PrivateKeyDer::from_pem_file(path).map_err(|err| DkimError::Pem {
        path: path.to_path_buf(),
        err,
    })?;
    if let PrivateKeyDer::Pkcs8(p) = &der {
        // Version 2 (with the public key, checked) or version 1 (the seed
        // only: `sluice dkim-keygen`, `openssl genpkey -algorithm ed25519`).
        let der = p.secret_pkcs8_der();
        if let Ok(ed) = Ed25519Key::from_pkcs8_der(der)
            .or_else(|_| Ed25519Key::from_pkcs8_maybe_unchecked_der(der))
        {
            return Ok(DkimKey::Ed25519(ed));
        }
    }
    RsaKey::<Sha256>::from_key_der(der)
        .map(DkimKey::Rsa)
        .map_err(|err| DkimError::NotAKey {
            path: path.to_path_buf(),
            err,
        })
}

/// The domain of the first address in the `From:` header, lower-cased.
pub fn from_domain(message: &[u8]) -> Option<String> {
    let addr = from_address(message)?;
    let domain = addr.rsplit_once('@')?.1.trim().trim_end_matches('.');
    (!domain.is_empty()).then(|| domain.to_ascii_lowercase())
}

/// The first address in the `From:` header, as written.
pub fn from_address(message: &[u8]) -> Option<String> {
    let head_end = memchr::memmem::find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
    let head = &message[..head_end];
    let mut value = Vec::new();
    let mut in_from = false;
    for line in head.split_inclusive(|&b| b == b'\n') {
        let folded = matches!(line.first(), Some(b' ' | b'\t'));
        if in_from && folded {
            value.extend_from_slice(line);
            continue;
        }
        if in_from {
            break;
        }
        if line.len() > 5 && line[..5].eq_ignore_ascii_case(b"from:") {
            in_from = true;
            value.extend_from_slice(&line[5..]);
        }
    }
    let value = String::from_utf8_lossy(&value);
    // The address: inside <...> if there is one, else the first word with @.
    let addr = match (value.rfind('<'), value.rfind('>')) {
        (Some(a), Some(b)) if a < b => value[a + 1..b].to_string(),
        _ => value
            .split(|c: char| c.is_whitespace() || c == ',')
            .find(|w| w.contains('@'))?
            .to_string(),
    };
    Some(addr.trim().to_string())
}

/// How many `From:` fields the header has, and how many mailboxes the
/// first of them names: members of its list are separated by commas
/// outside quoted strings, comments and angle brackets, and an empty
/// member is not one (RFC 5322 §3.4). For a signature that must speak
/// for one author only (`local_sign.rs`): any count but (1, 1) is
/// suspect.
pub fn from_authors(message: &[u8]) -> (usize, usize) {
    let head_end = memchr::memmem::find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
    let mut fields = 0;
    let mut first = Vec::new();
    let mut in_first = false;
    for line in message[..head_end].split_inclusive(|&b| b == b'\n') {
        let folded = matches!(line.first(), Some(b' ' | b'\t'));
        if in_first && folded {
            first.extend_from_slice(line);
            continue;
        }
        in_first = false;
        if line.len() > 5 && line[..5].eq_ignore_ascii_case(b"from:") {
            fields += 1;
            in_first = fields == 1;
            if in_first {
                first.extend_from_slice(&line[5..]);
            }
        }
    }
    (fields, mailboxes(&first))
}

/// The members of an address list (see [`from_authors`]).
fn mailboxes(list: &[u8]) -> usize {
    let (mut count, mut member) = (0, false);
    let (mut quoted, mut comment, mut angle, mut escaped) = (false, 0usize, false, false);
    for &b in list {
        if escaped {
            escaped = false;
            member = true;
            continue;
        }
        match b {
            b'\\' if quoted || comment > 0 => escaped = true,
            b'"' if comment == 0 => quoted = !quoted,
            b'(' if !quoted => comment += 1,
            b')' if !quoted && comment > 0 => comment -= 1,
            b'<' if !quoted && comment == 0 => angle = true,
            b'>' if !quoted && comment == 0 => angle = false,
            b',' if !quoted && comment == 0 && !angle => {
                count += usize::from(member);
                member = false;
                continue;
            }
            _ => {}
        }
        if comment == 0 && !b.is_ascii_whitespace() && b != b')' {
            member = true;
        }
    }
    count + usize::from(member)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_from_domain_is_found() {
        let m = b"Subject: x\r\nFrom: \"Bill, Jr.\" <bill@Mail.Example.COM>\r\nTo: a@b\r\n\r\nFrom: no@body.test\r\n";
        assert_eq!(from_domain(m).as_deref(), Some("mail.example.com"));
        let m = b"from: bill@example.org (Bill)\r\n\r\n";
        assert_eq!(from_domain(m).as_deref(), Some("example.org"));
        let m = b"From:\r\n  Bill <b@folded.test>\r\n\r\n";
        assert_eq!(from_domain(m).as_deref(), Some("folded.test"));
        assert_eq!(from_domain(b"Subject: none\r\n\r\n"), None);
    }

    #[test]
    fn the_authors_are_counted() {
        let one = |m: &[u8]| from_authors(m);
        assert_eq!(one(b"From: \"Bill, Jr.\" <b@x.test>\r\n\r\n"), (1, 1));
        assert_eq!(one(b"From: b@x.test (Bill, Jr.)\r\n\r\n"), (1, 1));
        assert_eq!(one(b"From: <\"a,b\"@x.test>,\r\n\r\n"), (1, 1));
        assert_eq!(one(b"From: a@x.test,\r\n Me <b@x.test>\r\n\r\n"), (1, 2));
        assert_eq!(one(b"From: a@x.test\r\nfrom: b@x.test\r\n\r\n"), (2, 1));
        assert_eq!(one(b"Subject: x\r\n\r\nFrom: a@x.test\r\n"), (0, 0));
    }
}
