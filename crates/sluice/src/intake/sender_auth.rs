//! Sender authentication on a listener (`sender_auth = true`): SPF (RFC
//! 7208) for the MAIL FROM identity, DKIM (RFC 6376) signatures and DMARC
//! (RFC 7489), checked with mail-auth against the same DNS servers as
//! delivery (`[dns]`), recorded in an `Authentication-Results:` header
//! (RFC 8601) with our hostname as authserv-id; with `dmarc_reject`, mail
//! failing DMARC for a domain that publishes `p=reject` is refused.
//!
//! Trust: the message, the envelope and every DNS answer are the
//! sender's. Invariants: a DNS failure never refuses mail (temperror is
//! recorded); `Authentication-Results:` fields that claim our authserv-id
//! are removed from incoming mail (RFC 8601 §5), so only ours can; at most
//! `dkim_verify_max_signatures` DKIM signatures are evaluated per message,
//! so the DNS work a message can cause is bounded (that many key lookups,
//! SPF's own limit of 10, DMARC's few).

use std::net::IpAddr;

use mail_auth::common::headers::HeaderWriter;
use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::dmarc::Policy;
use mail_auth::hickory_resolver::config::ResolverOpts;
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{AuthenticatedMessage, AuthenticationResults, DmarcResult, MessageAuthenticator};

use super::arc::ArcStep;
use crate::config::DnsConfig;
use crate::message::reply::{Enhanced, Reply};
use crate::routing::dns;

/// What the checks decided for one message.
pub struct Verdict {
    /// The `Authentication-Results:` field, CRLF included.
    pub header: String,
    /// `Some(reply)` to refuse the message (DMARC p=reject failed).
    pub reject: Option<Reply>,
    /// One line for the log, and its parts (SPF result; each evaluated
    /// DKIM signature's; how many were not evaluated; DMARC `fail` or
    /// `pass-or-none`; the policy; the From: domain).
    pub summary: String,
    pub spf: String,
    pub dkim: Vec<String>,
    pub skipped: usize,
    pub dmarc: &'static str,
    pub policy: String,
    pub from_domain: String,
    /// The ARC chain's result (`pass`, `fail`, `none`, `temperror`; ""
    /// when `[arc]` is off), and whether our seal was added (`header`
    /// then starts with it) or why not (None: not asked to seal).
    pub arc: &'static str,
    pub sealed: Option<Result<(), String>>,
}

pub struct SenderAuth {
    auth: MessageAuthenticator,
    hostname: String,
}

impl SenderAuth {
    pub fn new(config: &DnsConfig, hostname: &str) -> Result<SenderAuth, dns::ResolverError> {
        let (servers, timeout, attempts) = dns::resolver_parts(config)?;
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = attempts;
        let auth =
            MessageAuthenticator::new(servers, opts).map_err(|e| dns::ResolverError::Start {
                who: "sender_auth",
                err: Box::new(e),
            })?;
        Ok(SenderAuth {
            auth,
            hostname: hostname.to_string(),
        })
    }

    /// Checks a received message (`body`, our Received: on top) as
    /// `asked` says.
    pub async fn check(&self, asked: &Asked<'_>, body: &[u8]) -> Verdict {
        let host = self.hostname.as_str();
        let Some(mut msg) = AuthenticatedMessage::parse(body) else {
            return Verdict::unparsable(host);
        };
        let (ip, helo, sender) = (asked.ip, asked.helo, asked.sender);
        let skipped = keep_signatures(&mut msg, asked.max_signatures);
        let dkim = self.auth.verify_dkim(&msg).await;
        let spf_params = SpfParameters::verify_mail_from(ip, helo, host, sender);
        let spf = self.auth.verify_spf(spf_params).await;
        let mail_from_domain = sender.rsplit_once('@').map_or(helo, |(_, d)| d);
        let dmarc = self
            .auth
            .verify_dmarc(DmarcParameters::new(&msg, &dkim, mail_from_domain, &spf))
            .await;
        let chain = match asked.arc {
            ArcStep::Off => None,
            _ => Some(self.auth.verify_arc(&msg).await),
        };
        let mut results = AuthenticationResults::new(host)
            .with_dkim_results(&dkim, msg.from())
            .with_spf_mailfrom_result(&spf, ip, sender, helo)
            .with_dmarc_result(&dmarc);
        if let Some(chain) = &chain {
            results = results.with_arc_result(chain, ip);
        }
        let mut header = note_skipped(results.to_header(), skipped);
        let sealed = match (asked.arc, &chain) {
            (ArcStep::Seal(sealer), Some(chain)) => Some(
                sealer
                    .seal(&msg, &results, chain)
                    .map(|set| header = set + &header),
            ),
            _ => None,
        };
        let arc = chain.as_ref().map_or("", super::arc::result_word);
        let (dmarc_failed, reject) = decide(&dmarc, asked.dmarc_reject);
        let (spf, policy) = (
            format!("{:?}", spf.result()),
            format!("{:?}", dmarc.policy()),
        );
        let dkim: Vec<String> = dkim.iter().map(|d| format!("{:?}", d.result())).collect();
        let dmarc_word = if dmarc_failed { "fail" } else { "pass-or-none" };
        let mut summary = format!(
            "spf={spf} dkim={} dkim_not_evaluated={skipped} dmarc={dmarc_word} policy={policy} from_domain={}",
            dkim.join(","),
            dmarc.domain()
        );
        if !arc.is_empty() {
            summary.push_str(" arc=");
            summary.push_str(arc);
        }
        Verdict {
            header,
            reject,
            summary,
            spf,
            dkim,
            skipped,
            dmarc: dmarc_word,
            policy,
            from_domain: dmarc.domain().to_string(),
            arc,
            sealed,
        }
    }
}

/// What one check is about: the client, its HELO and MAIL FROM, and what
/// to do besides the checks.
pub struct Asked<'a> {
    pub ip: IpAddr,
    pub helo: &'a str,
    pub sender: &'a str,
    /// Refuse DMARC failures under `p=reject`.
    pub dmarc_reject: bool,
    /// DKIM signatures evaluated at most.
    pub max_signatures: usize,
    pub arc: ArcStep<'a>,
}

impl Verdict {
    fn unparsable(host: &str) -> Verdict {
        Verdict {
            header: format!("Authentication-Results: {host}; none (unparsable message)\r\n"),
            reject: None,
            summary: "unparsable message".into(),
            spf: "none".into(),
            dkim: Vec::new(),
            skipped: 0,
            dmarc: "pass-or-none",
            policy: "none".into(),
            from_domain: String::new(),
            arc: "",
            sealed: None,
        }
    }
}

/// Whether DMARC failed (neither SPF nor DKIM aligned and passing), and
/// the refusal when it did under `p=reject` and `dmarc_reject`.
fn decide(dmarc: &mail_auth::DmarcOutput, dmarc_reject: bool) -> (bool, Option<Reply>) {
    let failed = |r: &DmarcResult| matches!(r, DmarcResult::Fail(_) | DmarcResult::None);
    let dmarc_failed = failed(dmarc.dkim_result()) && failed(dmarc.spf_result());
    let reject = (dmarc_reject && dmarc_failed && dmarc.policy() == Policy::Reject).then(|| {
        let text = format!(
            "Message rejected: DMARC policy of {} says reject",
            dmarc.domain()
        );
        Reply::smtp(550, Enhanced::new(5, 7, 1), text)
    });
    (dmarc_failed, reject)
}

/// Keeps the first `max` DKIM signatures of `msg` (well-formed ones
/// first; the malformed ones cost no DNS but each would add a result);
/// returns how many were dropped. A message with 200 signatures cost ~410
/// DNS queries and ~41 s before this (security review M2).
fn keep_signatures(msg: &mut AuthenticatedMessage<'_>, max: usize) -> usize {
    let before = msg.dkim_headers.len();
    msg.dkim_headers.truncate(max);
    let mut room = max - msg.dkim_headers.len();
    let mut dropped = before - msg.dkim_headers.len();
    msg.errors.retain(|e| {
        if !matches!(e.header, mail_auth::Error::Dkim(_)) {
            return true;
        }
        let keep = room > 0;
        room = room.saturating_sub(1);
        dropped += usize::from(!keep);
        keep
    });
    dropped
}

/// `header` with a comment saying how many DKIM signatures were not
/// evaluated, before its final CRLF.
fn note_skipped(header: String, skipped: usize) -> String {
    if skipped == 0 {
        return header;
    }
    let body = header.trim_end_matches(['\r', '\n']);
    format!("{body}\r\n\t({skipped} more DKIM signatures not evaluated)\r\n")
}

/// The message without `Authentication-Results:` fields that name
/// `authserv_id` (forgeries of ours, RFC 8601 §5); `None` if there are none.
/// The field is read as RFC 8601 writes it, however it is spelt: any case,
/// white space before the colon (RFC 5322 obs-optional), folded anywhere,
/// comments before or after the id, the id quoted, a version after it.
pub fn strip_forged_results(body: &[u8], authserv_id: &str) -> Option<Vec<u8>> {
    let head_end = memchr::memmem::find(body, b"\r\n\r\n").map_or(body.len(), |i| i + 2);
    let forged = |field: &[u8]| {
        results_value(field)
            .and_then(authserv_id_of)
            .is_some_and(|id| id.eq_ignore_ascii_case(authserv_id))
    };
    // Every message at the door passes here: no copy unless one is found.
    if !fields(&body[..head_end]).any(forged) {
        return None;
    }
    let mut out = Vec::with_capacity(body.len());
    for field in fields(&body[..head_end]).filter(|f| !forged(f)) {
        out.extend_from_slice(field);
    }
    out.extend_from_slice(&body[head_end..]);
    Some(out)
}

/// The header's fields, each with its continuation lines and line ends.
fn fields(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = head;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = 0;
        loop {
            end += memchr::memchr(b'\n', &rest[end..]).map_or(rest.len() - end, |i| i + 1);
            if !matches!(rest.get(end), Some(b' ' | b'\t')) {
                break;
            }
        }
        let (field, tail) = rest.split_at(end);
        rest = tail;
        Some(field)
    })
}

/// The value of an `Authentication-Results` field, `None` for any other.
fn results_value(field: &[u8]) -> Option<&[u8]> {
    let name = b"authentication-results";
    let head = field.get(..name.len())?;
    if !head.eq_ignore_ascii_case(name) {
        return None;
    }
    let rest = &field[name.len()..];
    let colon = rest.iter().position(|&b| b == b':')?;
    rest[..colon]
        .iter()
        .all(|b| matches!(b, b' ' | b'\t'))
        .then(|| &rest[colon + 1..])
}

/// The authserv-id at the start of a field value (RFC 8601 §2.2: CFWS,
/// then a token or quoted-string), unfolded and unquoted.
fn authserv_id_of(value: &[u8]) -> Option<String> {
    let value = skip_cfws(value);
    let mut id = Vec::new();
    if let Some(quoted) = value.strip_prefix(b"\"") {
        let mut bytes = quoted.iter();
        loop {
            match bytes.next()? {
                b'"' => break,
                b'\\' => id.push(*bytes.next()?),
                b'\r' | b'\n' => {}
                &b => id.push(b),
            }
        }
    } else {
        // RFC 2045 token: up to white space, a comment, `;` or a special.
        let end = value
            .iter()
            .position(|b| b.is_ascii_whitespace() || b"()<>@,;:\\\"/[]?=".contains(b))
            .unwrap_or(value.len());
        id.extend_from_slice(&value[..end]);
    }
    (!id.is_empty()).then(|| String::from_utf8_lossy(&id).into_owned())
}

/// `value` after any folding white space and (nested) comments.
fn skip_cfws(mut value: &[u8]) -> &[u8] {
    loop {
        match value.first() {
            Some(b) if b.is_ascii_whitespace() => value = &value[1..],
            Some(b'(') => value = skip_comment(&value[1..]),
            _ => return value,
        }
    }
}

/// What follows the comment whose `(` came just before `value`.
fn skip_comment(mut value: &[u8]) -> &[u8] {
    let mut depth = 1;
    while let Some((&b, rest)) = value.split_first() {
        value = rest;
        match b {
            b'\\' => value = value.get(1..).unwrap_or_default(),
            b'(' => depth += 1,
            b')' if depth == 1 => return value,
            b')' => depth -= 1,
            _ => {}
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forged_results_for_our_id_are_removed() {
        let m = b"Received: x\r\nAuthentication-Results: mx.ours.test;\r\n\tspf=pass\r\nAuthentication-Results: other.test; spf=fail\r\nSubject: s\r\n\r\nAuthentication-Results: mx.ours.test; in the body\r\n";
        let out = strip_forged_results(m, "MX.ours.test").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Received: x\r\nAuthentication-Results: other.test; spf=fail\r\nSubject: s\r\n\r\nAuthentication-Results: mx.ours.test; in the body\r\n"
        );
        assert!(strip_forged_results(b"Subject: s\r\n\r\n", "mx.ours.test").is_none());
    }

    #[test]
    fn every_spelling_of_our_id_is_removed() {
        let forged = [
            "Authentication-Results: mx.ours.test; dkim=pass",
            "authentication-results:mx.ours.test;dkim=pass",
            "AUTHENTICATION-RESULTS : MX.OURS.TEST; dkim=pass",
            "Authentication-Results:\r\n mx.ours.test; dkim=pass",
            "Authentication-Results:\r\n\t(a (nested) comment)\r\n mx.ours.test\r\n ; dkim=pass",
            "Authentication-Results: (c) mx.ours.test (c); dkim=pass",
            "Authentication-Results: \"mx.ours.test\"; dkim=pass",
            "Authentication-Results: \"mx.\\ours.test\"; dkim=pass",
            "Authentication-Results: mx.ours.test 1; dkim=pass",
            "Authentication-Results: mx.ours.test(c); dkim=pass",
            "Authentication-Results:\tmx.ours.test\r\n\t; dkim=pass",
        ];
        for field in forged {
            let m = format!("Received: x\r\n{field}\r\nSubject: s\r\n\r\nbody\r\n");
            let out = strip_forged_results(m.as_bytes(), "mx.ours.test")
                .unwrap_or_else(|| panic!("kept {field:?}"));
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "Received: x\r\nSubject: s\r\n\r\nbody\r\n",
                "{field:?}"
            );
        }
        let others = [
            "Authentication-Results: mx.ours.test.evil; dkim=pass",
            "Authentication-Results: other.test; (mx.ours.test) dkim=pass",
            "Authentication-Results-X: mx.ours.test; dkim=pass",
            "X-Authentication-Results: mx.ours.test; dkim=pass",
            "Authentication-Results: \"mx.ours.test.evil\"; none",
        ];
        for field in others {
            let m = format!("{field}\r\n\r\n");
            assert!(
                strip_forged_results(m.as_bytes(), "mx.ours.test").is_none(),
                "{field:?}"
            );
        }
    }
}
