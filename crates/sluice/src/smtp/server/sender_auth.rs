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
//! are removed from incoming mail (RFC 8601 §5), so only ours can.

use std::net::IpAddr;

use mail_auth::common::headers::HeaderWriter;
use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::dmarc::Policy;
use mail_auth::hickory_resolver::config::ResolverOpts;
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{AuthenticatedMessage, AuthenticationResults, DmarcResult, MessageAuthenticator};

use crate::config::DnsConfig;
use crate::routing::dns;

/// What the checks decided for one message.
pub struct Verdict {
    /// The `Authentication-Results:` field, CRLF included.
    pub header: String,
    /// `Some(reply)` to refuse the message (DMARC p=reject failed).
    pub reject: Option<String>,
    /// One line for the log.
    pub summary: String,
}

pub struct SenderAuth {
    auth: MessageAuthenticator,
    hostname: String,
}

impl SenderAuth {
    pub fn new(config: &DnsConfig, hostname: &str) -> Result<SenderAuth, String> {
        let (servers, timeout, attempts) = dns::resolver_parts(config)?;
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = attempts;
        let auth = MessageAuthenticator::new(servers, opts)
            .map_err(|e| format!("sender_auth: cannot start the resolver: {e}"))?;
        Ok(SenderAuth {
            auth,
            hostname: hostname.to_string(),
        })
    }

    /// Checks a received message (`body`, our Received: on top) from
    /// `ip`, which said `helo` and `MAIL FROM:<sender>`.
    pub async fn check(
        &self,
        ip: IpAddr,
        helo: &str,
        sender: &str,
        body: &[u8],
        dmarc_reject: bool,
    ) -> Verdict {
        let host = self.hostname.as_str();
        let Some(msg) = AuthenticatedMessage::parse(body) else {
            return Verdict {
                header: format!("Authentication-Results: {host}; none (unparsable message)\r\n"),
                reject: None,
                summary: "unparsable message".into(),
            };
        };
        let dkim = self.auth.verify_dkim(&msg).await;
        let spf_params = SpfParameters::verify_mail_from(ip, helo, host, sender);
        let spf = self.auth.verify_spf(spf_params).await;
        let mail_from_domain = sender.rsplit_once('@').map_or(helo, |(_, d)| d);
        let dmarc = self
            .auth
            .verify_dmarc(DmarcParameters::new(&msg, &dkim, mail_from_domain, &spf))
            .await;
        let header = AuthenticationResults::new(host)
            .with_dkim_results(&dkim, msg.from())
            .with_spf_mailfrom_result(&spf, ip, sender, helo)
            .with_dmarc_result(&dmarc)
            .to_header();
        let failed = |r: &DmarcResult| matches!(r, DmarcResult::Fail(_) | DmarcResult::None);
        let dmarc_failed = failed(dmarc.dkim_result()) && failed(dmarc.spf_result());
        let reject =
            (dmarc_reject && dmarc_failed && dmarc.policy() == Policy::Reject).then(|| {
                format!(
                    "550 5.7.1 Message rejected: DMARC policy of {} says reject",
                    dmarc.domain()
                )
            });
        let summary = format!(
            "spf={:?} dkim={} dmarc={} policy={:?} from_domain={}",
            spf.result(),
            dkim.iter()
                .map(|d| format!("{:?}", d.result()))
                .collect::<Vec<_>>()
                .join(","),
            if dmarc_failed { "fail" } else { "pass-or-none" },
            dmarc.policy(),
            dmarc.domain()
        );
        Verdict {
            header,
            reject,
            summary,
        }
    }
}

/// The message without `Authentication-Results:` fields that name
/// `authserv_id` (forgeries of ours, RFC 8601 §5); `None` if there are none.
pub fn strip_forged_results(body: &[u8], authserv_id: &str) -> Option<Vec<u8>> {
    let head_end = memchr::memmem::find(body, b"\r\n\r\n").map_or(body.len(), |i| i + 2);
    let name = b"authentication-results:";
    let mut out = Vec::with_capacity(body.len());
    let mut removed = false;
    let mut skipping = false;
    for line in body[..head_end].split_inclusive(|&b| b == b'\n') {
        let folded = matches!(line.first(), Some(b' ' | b'\t'));
        if folded && skipping {
            continue;
        }
        skipping = false;
        if line.len() > name.len() && line[..name.len()].eq_ignore_ascii_case(name) {
            let value = String::from_utf8_lossy(&line[name.len()..]);
            let id = value.trim().split([';', ' ', '\t']).next().unwrap_or("");
            if id.eq_ignore_ascii_case(authserv_id) {
                skipping = true;
                removed = true;
                continue;
            }
        }
        out.extend_from_slice(line);
    }
    out.extend_from_slice(&body[head_end..]);
    removed.then_some(out)
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
}
