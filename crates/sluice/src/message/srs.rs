//! The Sender Rewriting Scheme codec (SRS, as libsrs2 and postsrsd 1.x
//! write it), so that mail we forward leaves with an envelope sender in
//! our SRS domain (SPF passes for it) and a bounce to that address can be
//! turned back into the original sender.
//!
//! - `SRS0=HHHH=TT=domain=local@srs-domain` for a plain sender: `TT` is
//!   the day (Unix days mod 1024) in two base-32 characters, `HHHH` the
//!   first four base-64 characters of HMAC-SHA1(secret, lowercased
//!   `TT`, `domain`, `local`).
//! - `SRS1=HHHH=host==HHHH=TT=domain=local@srs-domain` for a sender that
//!   is already an SRS0 address at `host` (re-forwarding), the hash over
//!   `host` and the SRS0 address's rest; reversing it gives back that
//!   SRS0 address at `host`, which `host` reverses in turn.
//!
//! Trust: every address given to [`Srs::reverse`] is a stranger's (a
//! RCPT TO from anyone); nothing here panics on it, and it is accepted
//! only with a hash one of our secrets made (case-insensitively, as
//! libsrs2 compares) and, for SRS0, a day no older than `max_age_days`.
//! Invariants: the first secret signs, every secret verifies (rotation);
//! secrets never appear in `Debug` output or errors.

use ring::hmac;

/// RFC 4648 base 32, as libsrs2 writes the day.
const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/// Days the two timestamp characters count before they wrap.
const SLOTS: u64 = 1024;
/// Hash characters written and required.
const HASH_LEN: usize = 4;

/// Why an address was not reversed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SrsError {
    #[error("not an SRS address")]
    NotSrs,
    #[error("malformed SRS address")]
    Malformed,
    #[error("SRS hash does not match")]
    BadHash,
    #[error("SRS address expired")]
    Expired,
}

impl SrsError {
    /// The word logged in `srs_refused`'s `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            SrsError::NotSrs => "not_srs",
            SrsError::Malformed => "malformed",
            SrsError::BadHash => "bad_hash",
            SrsError::Expired => "expired",
        }
    }
}

/// The codec with its secrets and SRS domain.
pub struct Srs {
    keys: Vec<hmac::Key>,
    domain: String,
    max_age_days: u64,
}

impl std::fmt::Debug for Srs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srs")
            .field("secrets", &self.keys.len())
            .field("domain", &self.domain)
            .field("max_age_days", &self.max_age_days)
            .finish()
    }
}

/// Today as SRS counts: whole days since the Unix epoch.
pub fn today() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

impl Srs {
    /// `secrets`: the first signs, all verify (none: nothing verifies and
    /// [`Srs::forward`] writes nothing).
    pub fn new(secrets: &[Vec<u8>], domain: &str, max_age_days: u64) -> Srs {
        let keys = secrets
            .iter()
            .map(|s| hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, s))
            .collect();
        Srs {
            keys,
            domain: domain.trim_end_matches('.').to_ascii_lowercase(),
            max_age_days,
        }
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// `address`'s domain is the SRS domain.
    pub fn is_srs_domain(&self, domain: &str) -> bool {
        domain
            .trim_end_matches('.')
            .eq_ignore_ascii_case(&self.domain)
    }

    /// `address` is at the SRS domain and its local part starts as an SRS
    /// address does (it may still be forged or malformed).
    pub fn looks_like_ours(&self, address: &str) -> bool {
        address
            .rsplit_once('@')
            .is_some_and(|(local, host)| self.is_srs_domain(host) && srs_tag(local).is_some())
    }

    /// The SRS address for `sender` on day `today`; `None` for the null
    /// sender, an address without a domain, one already in the SRS domain,
    /// or when there is no secret.
    pub fn forward(&self, sender: &str, today: u64) -> Option<String> {
        let key = self.keys.first()?;
        let (local, host) = sender.rsplit_once('@')?;
        if local.is_empty() || host.is_empty() || self.is_srs_domain(host) {
            return None;
        }
        let domain = &self.domain;
        let rewritten = match srs_tag(local) {
            Some(0) => {
                // Re-forwarding an SRS0 address: SRS1, over its host and rest.
                let rest = &local[4..];
                let h = hash(key, &[host, rest]);
                format!("SRS1={h}={host}={rest}@{domain}")
            }
            Some(_) => match split_srs1(&local[5..]) {
                Some((_, srs_host, rest)) => {
                    let h = hash(key, &[srs_host, rest]);
                    format!("SRS1={h}={srs_host}={rest}@{domain}")
                }
                None => self.srs0(key, local, host, today),
            },
            None => self.srs0(key, local, host, today),
        };
        Some(rewritten)
    }

    fn srs0(&self, key: &hmac::Key, local: &str, host: &str, today: u64) -> String {
        let ts = timestamp(today);
        let h = hash(key, &[&ts, host, local]);
        format!("SRS0={h}={ts}={host}={local}@{}", self.domain)
    }

    /// The address an SRS address at our SRS domain stands for: the
    /// original sender (SRS0), or the SRS0 address at the previous
    /// forwarder (SRS1).
    pub fn reverse(&self, address: &str, today: u64) -> Result<String, SrsError> {
        let (local, host) = address.rsplit_once('@').ok_or(SrsError::NotSrs)?;
        if !self.is_srs_domain(host) {
            return Err(SrsError::NotSrs);
        }
        match srs_tag(local).ok_or(SrsError::NotSrs)? {
            0 => self.reverse_srs0(&local[5..], today),
            _ => {
                let (h, srs_host, rest) = split_srs1(&local[5..]).ok_or(SrsError::Malformed)?;
                if !self.verify(h, &[srs_host, rest]) {
                    return Err(SrsError::BadHash);
                }
                Ok(format!("SRS0{rest}@{srs_host}"))
            }
        }
    }

    /// `HHHH=TT=domain=local`.
    fn reverse_srs0(&self, rest: &str, today: u64) -> Result<String, SrsError> {
        let mut parts = rest.splitn(4, '=');
        let (Some(h), Some(ts), Some(host), Some(user)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SrsError::Malformed);
        };
        if host.is_empty() || user.is_empty() {
            return Err(SrsError::Malformed);
        }
        let then = parse_timestamp(ts).ok_or(SrsError::Malformed)?;
        if !self.verify(h, &[ts, host, user]) {
            return Err(SrsError::BadHash);
        }
        if !fresh(then, today, self.max_age_days) {
            return Err(SrsError::Expired);
        }
        Ok(format!("{user}@{host}"))
    }

    /// Whether `given` is the hash one of our secrets makes of `parts`.
    fn verify(&self, given: &str, parts: &[&str]) -> bool {
        given.len() == HASH_LEN
            && self
                .keys
                .iter()
                .any(|k| hash(k, parts).eq_ignore_ascii_case(given))
    }
}

/// 0 for `SRS0` and 1 for `SRS1` followed by a separator (`=`, `+` or
/// `-`, as libsrs2 accepts), any case.
fn srs_tag(local: &str) -> Option<u8> {
    let b = local.as_bytes();
    if b.len() < 5 || !b[..3].eq_ignore_ascii_case(b"SRS") || !matches!(b[4], b'=' | b'+' | b'-') {
        return None;
    }
    match b[3] {
        b'0' => Some(0),
        b'1' => Some(1),
        _ => None,
    }
}

/// An SRS1 local part after `SRS1=`: `HHHH=host=rest` (rest starts with
/// the SRS0 address's separator).
fn split_srs1(s: &str) -> Option<(&str, &str, &str)> {
    let (h, after) = s.split_once('=')?;
    let (host, rest) = after.split_once('=')?;
    (!h.is_empty() && !host.is_empty() && !rest.is_empty()).then_some((h, host, rest))
}

/// HMAC-SHA1 over the lowercased parts, its first four base-64 characters.
fn hash(key: &hmac::Key, parts: &[&str]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    for p in parts {
        ctx.update(p.to_ascii_lowercase().as_bytes());
    }
    let tag = ctx.sign();
    let d = tag.as_ref();
    let n = (u32::from(d[0]) << 16) | (u32::from(d[1]) << 8) | u32::from(d[2]);
    (0..HASH_LEN)
        .map(|i| char::from(BASE64[((n >> (18 - 6 * i)) & 63) as usize]))
        .collect()
}

fn timestamp(today: u64) -> String {
    let t = today % SLOTS;
    let hi = char::from(BASE32[((t >> 5) & 31) as usize]);
    let lo = char::from(BASE32[(t & 31) as usize]);
    format!("{hi}{lo}")
}

fn parse_timestamp(ts: &str) -> Option<u64> {
    if ts.len() != 2 {
        return None;
    }
    ts.bytes().try_fold(0u64, |acc, c| {
        let i = BASE32.iter().position(|&b| b == c.to_ascii_uppercase())?;
        Some((acc << 5) | i as u64)
    })
}

/// A day `then` (mod 1024) is at most `max_age` days before `today`; a
/// day "after" today wrapped, and is that much older.
fn fresh(then: u64, today: u64, max_age: u64) -> bool {
    let mut now = today % SLOTS;
    if now < then {
        now += SLOTS;
    }
    now <= then + max_age
}

/// The secrets in a secret file's text, as postsrsd reads its own: one a
/// line, the first signs; blank lines are skipped.
pub fn secrets_of(text: &[u8]) -> Vec<Vec<u8>> {
    text.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests;
