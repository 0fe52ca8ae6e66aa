//! ARC (RFC 8617) at the intake, on mail-auth's implementation: the
//! chain a stranger's message arrives with is verified where its sender
//! is checked (a `sender_auth` listener, `sender_auth.rs`), the result
//! goes into our Authentication-Results (`arc=`), and a message we
//! forward (`routing::forward`: a recipient outside our domains given as
//! an address in one of them) gets our ARC set on top, sealed with one of
//! our `[[dkim.keys]]`, our Authentication-Results as its
//! ARC-Authentication-Results.
//!
//! The seal is made once per message here, so a local copy of the same
//! message carries it too (harmless: it is ours and says what we saw).
//!
//! Trust: the chain is the sender's: mail-auth reads at most 50 sets
//! (longer chains are `fail`), a malformed or broken one is `fail` or
//! `none`, never a refusal or a panic; its DNS lookups are one key per
//! set at most. Invariant: a chain that already failed is not sealed
//! again (mail-auth refuses, RFC 8617 §5.1.2), and that is logged.

use mail_auth::arc::ArcSealer;
use mail_auth::common::crypto::DkimKey;
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::Done;
use mail_auth::{ArcOutput, AuthenticatedMessage, AuthenticationResults, DkimResult};

use super::dkim::{load_key, DkimError, DEFAULT_HEADERS};
use crate::config::Config;

/// RFC 8617 §4.2.1: at most 50 ARC sets (mail-auth's cap too).
pub const MAX_SETS: usize = 50;

/// Our sealing key and its domain.
pub struct Sealer {
    domain: String,
    sealer: ArcSealer<DkimKey, Done>,
}

/// What ARC does for one message at a `sender_auth` listener.
#[derive(Clone, Copy)]
pub enum ArcStep<'a> {
    /// `[arc]` off: nothing.
    Off,
    /// Verify the chain (`arc=` in our results).
    Verify,
    /// Verify, and seal with this key (a forwarded message).
    Seal(&'a Sealer),
}

impl Sealer {
    /// The key `[arc] key_domain` names; without it the SRS domain's key,
    /// then the hostname's, then the first. `None`: no `[[dkim.keys]]`.
    pub fn load(config: &Config) -> Result<Option<Sealer>, DkimError> {
        let keys = &config.dkim.keys;
        let host = config.hostname.as_str();
        let srs = config.srs.domain_or(host);
        let wanted: Vec<&str> = match &config.arc.key_domain {
            Some(d) => vec![d.as_str()],
            None => vec![srs, host],
        };
        let chosen = wanted
            .iter()
            .find_map(|w| {
                keys.iter()
                    .find(|k| k.domain.as_str().eq_ignore_ascii_case(w))
            })
            .or(keys.first());
        let Some(k) = chosen else {
            return Ok(None);
        };
        let sealer = ArcSealer::from_key(load_key(&k.key_file)?)
            .domain(k.domain.to_string())
            .selector(k.selector.clone())
            .headers(DEFAULT_HEADERS.iter().copied().chain(["DKIM-Signature"]));
        Ok(Some(Sealer {
            domain: k.domain.to_string(),
            sealer,
        }))
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Our ARC set (ARC-Seal, ARC-Message-Signature,
    /// ARC-Authentication-Results, CRLF each) over `msg`, with `results`
    /// as what we saw and `chain` as verified; or why not.
    pub fn seal(
        &self,
        msg: &AuthenticatedMessage<'_>,
        results: &AuthenticationResults<'_>,
        chain: &ArcOutput<'_>,
    ) -> Result<String, String> {
        if !chain.can_be_sealed() {
            return Err("the chain it came with had already failed (cv=fail)".into());
        }
        self.sealer
            .seal(msg, results, chain)
            .map(|set| set.to_header())
            .map_err(|e| e.to_string())
    }
}

/// The chain's result as RFC 8617 names it (`temperror` when a key
/// could not be fetched).
pub fn result_word(chain: &ArcOutput<'_>) -> &'static str {
    match chain.result() {
        DkimResult::Pass => "pass",
        DkimResult::None => "none",
        DkimResult::TempError(_) => "temperror",
        _ => "fail",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::sender_auth::{Asked, SenderAuth};

    fn set(i: &str, cv: &str) -> String {
        format!(
            "ARC-Seal: i={i}; a=rsa-sha256; cv={cv}; d=x.test; s=s; t=1; b=AAAA\r\n\
             ARC-Message-Signature: i={i}; a=rsa-sha256; c=relaxed/relaxed; d=x.test; s=s; t=1; h=from; bh=AAAA; b=AAAA\r\n\
             ARC-Authentication-Results: i={i}; x.test; spf=pass\r\n"
        )
    }

    /// Hostile chains (too long, malformed, broken, duplicated, absurd
    /// instances) are `fail`, without a panic and without DNS for most;
    /// no chain is `none`.
    #[tokio::test]
    async fn hostile_chains_fail_and_never_panic() {
        let dns = crate::config::DnsConfig {
            nameservers: vec!["127.0.0.1:9".parse().unwrap()],
            timeout_ms: 200,
            attempts: 1,
            trust_anchor_file: None,
        };
        let auth = SenderAuth::new(&dns, "mx.ours.test").unwrap();
        let asked = Asked {
            ip: "192.0.2.1".parse().unwrap(),
            helo: "client.x.test",
            sender: "a@x.test",
            dmarc_reject: false,
            max_signatures: 5,
            arc: ArcStep::Verify,
        };
        let long: String = (1..=60).map(|i| set(&i.to_string(), "pass")).collect();
        let cases = [
            (long, "fail"),
            ("ARC-Seal: garbage\r\n".to_string(), "fail"),
            (
                "ARC-Message-Signature: i=1; nonsense\r\n".to_string(),
                "fail",
            ),
            (set("1", "none") + &set("1", "none"), "fail"),
            (set("99999999999999999999", "none"), "fail"),
            (set("0", "none"), "fail"),
            (set("2", "pass"), "fail"),
            (String::new(), "none"),
        ];
        for (chain, want) in cases {
            let body = format!("{chain}From: <a@x.test>\r\nSubject: s\r\n\r\nbody\r\n");
            let verdict = auth.check(&asked, body.as_bytes()).await;
            assert_eq!(verdict.arc, want, "{chain}");
            assert!(verdict.header.contains("arc="), "{}", verdict.header);
        }
    }
}
