//! The evaluation rules tests/it/restrict_diff found Sluice deciding
//! differently from Postfix, each at unit scale (the differential test
//! holds them to a real Postfix): warn_if_reject over a nested list, both
//! defer_if_permit and defer_if_reject pending, the known-login check
//! for unauthenticated clients, the enhanced code's class; and the
//! client-certificate checks (permit_tls_clientcerts and its table).

use std::sync::Arc;

use super::checks::reply;
use super::eval::{Effect, Env, Evaluation, Outcome};
use super::unverified::Verdict;
use super::Facts;
use super::{DnsRestriction, Restriction, Restrictions, Stage};
use crate::config::Config;
use crate::log::Logger;
use crate::receive::access::{Action, ActionError};
use crate::receive::dnscheck::DnsCheck;
use crate::receive::policy::PolicyClient;
use crate::tables::LookupError;

/// `local.test` is ours; nothing else is looked up.
struct World;

impl Env for World {
    fn auth_destination(&self, recipient: &str) -> bool {
        recipient.ends_with("@local.test")
    }
    fn is_local(&self, address: &str) -> bool {
        address.ends_with("@local.test")
    }
    fn delimiters(&self) -> &str {
        "+"
    }
    async fn unlisted(&self, _: &str, _: bool) -> Result<Option<(u16, &'static str)>, LookupError> {
        Ok(None)
    }
    async fn dns(&self, _: &DnsRestriction, _: &Facts<'_>) -> DnsCheck {
        DnsCheck::Pass
    }
    async fn unverified(&self, _: &str, _: bool) -> Option<Verdict> {
        None
    }
    async fn policy(
        &self,
        _: &PolicyClient,
        _: Stage,
        _: &Facts<'_>,
    ) -> Result<Action, ActionError> {
        Ok(Action::Dunno)
    }
}

fn facts<'a>(sender: &'a str, recipient: &'a str, sasl_user: Option<&'a str>) -> Facts<'a> {
    Facts {
        client_ip: "192.0.2.7".parse().unwrap(),
        client_name: "unknown",
        reverse_client_name: "unknown",
        helo: Some("client.example"),
        sender: Some(sender),
        recipient: Some(recipient),
        sasl_user,
        sasl_enabled: true,
        mynetworks: false,
        improper_pipelining: false,
        recipient_count: 0,
        ccert: None,
    }
}

fn built(f: impl FnOnce(&mut Config)) -> Restrictions {
    let mut config = Config::default();
    f(&mut config);
    Restrictions::build(&config, &Logger::disabled()).unwrap()
}

/// The sender list's decision, then the whole decision's end.
async fn decide(r: &Restrictions, f: &Facts<'_>) -> (Outcome, Vec<Effect>) {
    let list: Arc<Vec<Restriction>> = r
        .lists("127.0.0.1:25".parse().unwrap())
        .get(Stage::Sender)
        .clone();
    let mut eval = Evaluation::new(r);
    let outcome = match eval.list(Stage::Sender, &list, f, &World).await {
        Some(refusal) => Outcome::Refuse(refusal),
        None => eval.finish(),
    };
    (outcome, eval.effects)
}

#[tokio::test]
async fn warn_if_reject_covers_the_whole_nested_list() {
    let r = built(|c| {
        let rc = &mut c.restrictions;
        rc.classes
            .insert("strict".into(), "reject_non_fqdn_sender, reject".into());
        rc.sender = "warn_if_reject, strict, reject_non_fqdn_sender".into();
    });
    let (outcome, effects) = decide(&r, &facts("a@localhost", "u@local.test", None)).await;
    let warned = effects
        .iter()
        .filter(|e| matches!(e, Effect::Warned(_)))
        .count();
    assert_eq!(warned, 2, "{effects:?}");
    // The next restriction at the outer level is no longer warned.
    match outcome {
        Outcome::Refuse(r) => assert_eq!((r.code, r.by), (504, "reject_non_fqdn_sender")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn both_deferrals_pending_stop_the_list_and_defer_if_permit_answers() {
    let r = built(|c| c.restrictions.sender = "defer_if_permit, defer_if_reject, reject".into());
    let (outcome, _) = decide(&r, &facts("a@example.com", "u@local.test", None)).await;
    match outcome {
        Outcome::Refuse(r) => {
            assert_eq!((r.code, r.by), (450, "defer_if_permit"));
            assert!(r.text.ends_with("defer_if_permit requested"), "{r:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn known_senders_need_a_login() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("logins");
    std::fs::write(&map, "owned@example.com alice\n").unwrap();
    let r = built(|c| {
        let rc = &mut c.restrictions;
        rc.sender_login_maps = vec![format!("texthash:{}", map.display())];
        rc.sender = "reject_known_sender_login_mismatch".into();
    });
    let refused = |o: &Outcome| matches!(o, Outcome::Refuse(r) if r.code == 553);
    let (o, _) = decide(&r, &facts("owned@example.com", "u@local.test", None)).await;
    assert!(refused(&o), "not logged in: {o:?}");
    let (o, _) = decide(&r, &facts("free@example.com", "u@local.test", None)).await;
    assert_eq!(o, Outcome::Pass);
    let (o, _) = decide(&r, &facts("free@example.com", "u@local.test", Some("bob"))).await;
    assert_eq!(o, Outcome::Pass, "not known: any login");
    let (o, _) = decide(&r, &facts("owned@example.com", "u@local.test", Some("bob"))).await;
    assert!(refused(&o), "another's: {o:?}");
    let (o, _) = decide(
        &r,
        &facts("owned@example.com", "u@local.test", Some("alice")),
    )
    .await;
    assert_eq!(o, Outcome::Pass);
}

#[test]
fn the_enhanced_code_takes_the_replys_class() {
    let r = reply(
        450,
        "5.1.1",
        "u@x",
        "Recipient address",
        "User unknown",
        "x",
    );
    assert_eq!((r.code, r.enhanced.as_str()), (450, "4.1.1"));
    let r = reply(554, "4.7.1", "u@x", "Recipient address", "no", "x");
    assert_eq!(r.enhanced, "5.7.1");
}

#[tokio::test]
async fn client_certificates_by_fingerprint_and_a_table_that_fails() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("relay_clientcerts");
    std::fs::write(&certs, "AA:BB pubkey\n").unwrap();
    let cert = super::PeerCert {
        fingerprint: "CC:DD".into(),
        pubkey_fingerprint: "AA:BB".into(),
        subject: "client".into(),
        issuer: "CA".into(),
        verified: false,
    };
    let with = |cert| {
        let mut f = facts("a@example.com", "u@local.test", None);
        f.ccert = cert;
        f
    };
    let r = built(|c| {
        c.restrictions.relay_clientcerts = vec![format!("texthash:{}", certs.display())];
        c.restrictions.sender = "permit_tls_clientcerts, reject".into();
    });
    let (o, _) = decide(&r, &with(Some(&cert))).await;
    assert_eq!(o, Outcome::Pass, "by the public key's fingerprint");
    let (o, _) = decide(&r, &with(None)).await;
    assert!(
        matches!(&o, Outcome::Refuse(r) if r.by == "reject"),
        "{o:?}"
    );
    // permit_tls_all_clientcerts: verified passes without the table.
    let r = built(|c| c.restrictions.sender = "permit_tls_all_clientcerts, reject".into());
    let verified = super::PeerCert {
        verified: true,
        ..cert.clone()
    };
    let (o, _) = decide(&r, &with(Some(&verified))).await;
    assert_eq!(o, Outcome::Pass);
    let (o, _) = decide(&r, &with(Some(&cert))).await;
    assert!(matches!(o, Outcome::Refuse(_)), "{o:?}");
    // A table that cannot answer: 451 4.3.0, never a permit.
    let r = built(|c| {
        c.restrictions.relay_clientcerts = vec!["tcp:127.0.0.1:9".into()];
        c.restrictions.sender = "permit_tls_clientcerts, permit".into();
    });
    let (o, _) = decide(&r, &with(Some(&cert))).await;
    match o {
        Outcome::Refuse(r) => assert_eq!((r.code, r.enhanced.as_str()), (451, "4.3.0")),
        other => panic!("{other:?}"),
    }
}
