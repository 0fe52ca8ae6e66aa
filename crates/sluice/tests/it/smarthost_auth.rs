//! SMTP AUTH to the next hop (`[delivery]` smtp_sasl_*, Postfix's
//! names; issue 40 item 1) against a real Postfix 3.7 smarthost that
//! relays only for authenticated clients, its logins checked by a real
//! Dovecot: the right credentials relay (Postfix logs `sasl_method=PLAIN,
//! sasl_username=`), a wrong password defers with 4.7.0 (never bounces),
//! the default security options send no password without TLS (deferred)
//! and PLAIN once STARTTLS is up, and the password is in none of
//! Sluice's log files.

use crate::common;
use common::dovecot::AuthServer;
use common::postfix::Postfix;
use common::*;

const USER: &str = "relay@sluice.test";
const PASSWORD: &str = "Pa55-w0rd-never-logged";

/// A smarthost that relays for SASL-authenticated clients only (its
/// mynetworks does not hold 127.0.0.1, where Sluice connects from).
fn smarthost(dir: &std::path::Path) -> (AuthServer, Postfix) {
    smarthost_with(dir, &[("smtpd_tls_auth_only", "no")])
}

/// As [`smarthost`], with `extra` main.cf settings.
fn smarthost_with(dir: &std::path::Path, extra: &[(&str, &str)]) -> (AuthServer, Postfix) {
    let dovecot = AuthServer::start_with(dir, &[(USER, PASSWORD)], "disable_plaintext_auth = no");
    let socket = dovecot.socket.display().to_string();
    let mut cf = vec![
        ("smtpd_sasl_auth_enable", "yes"),
        ("smtpd_sasl_type", "dovecot"),
        ("smtpd_sasl_path", &socket),
        ("mynetworks", "192.0.2.0/24"),
        (
            "smtpd_relay_restrictions",
            "permit_sasl_authenticated, reject_unauth_destination",
        ),
    ];
    cf.extend_from_slice(extra);
    // smtpd's STARTTLS needs the TLS manager (not in the base master.cf).
    let tlsmgr = "tlsmgr unix - - n 1000? 1 tlsmgr";
    let postfix = Postfix::start(&cf, tlsmgr);
    (dovecot, postfix)
}

/// Sluice relaying through `postfix` with `password` for it in a
/// texthash table, and `security` as smtp_sasl_security_options (None:
/// the default).
fn sluice_config(
    dir: &std::path::Path,
    postfix: &Postfix,
    password: &str,
    security: Option<&str>,
) -> sluice::config::Config {
    std::fs::create_dir_all(dir).unwrap();
    let mut cfg = config(dir, Some(postfix.addr));
    let table = dir.join("sasl_passwd");
    let key = format!("[127.0.0.1]:{}", postfix.addr.port());
    std::fs::write(&table, format!("{key} {USER}:{password}\n")).unwrap();
    cfg.delivery.smtp_sasl_auth_enable = true;
    cfg.delivery.smtp_sasl_password_maps = vec![format!("texthash:{}", table.display())];
    if let Some(s) = security {
        cfg.delivery.smtp_sasl_security_options = s.into();
    }
    cfg
}

/// Neither Sluice's log file nor any other file it wrote under `dir`
/// (but the table) holds `secret`.
fn assert_not_logged(dir: &std::path::Path, secret: &str) {
    let text = std::fs::read_to_string(dir.join("maillog")).unwrap_or_default();
    assert!(!text.is_empty(), "no log written");
    assert!(!text.contains(secret), "the password is in the log");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
    assert!(!text.contains(&b64), "the password (base64) is in the log");
}

/// Sends one message through `cfg`'s Sluice; its queue ID.
async fn submit(addr: std::net::SocketAddr) -> String {
    let mut c = Client::ready(addr).await;
    let r = c
        .message("a@sender.test", &["b@far.test"], &body("via smarthost"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    qid_of(&r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_through_a_smarthost_that_requires_auth() {
    let dir = temp_dir("smarthost-auth-ok");
    let (_dovecot, postfix) = smarthost(&dir);
    // Not vacuous: the smarthost refuses to relay for an unauthenticated client.
    let mut s = postfix.session().await;
    let refused = s
        .rcpt_replies("a@sender.test", &["b@far.test".into()])
        .await;
    assert_eq!(refused[0].code, 554, "{refused:?}");
    let sluice_dir = dir.join("sluice");
    let cfg = sluice_config(&sluice_dir, &postfix, PASSWORD, Some(""));
    let (server, addr) = start(cfg).await;
    let qid = submit(addr).await;
    assert!(
        wait_until(30, || delivered_as(
            &sluice_dir,
            &qid,
            "b@far.test",
            "sent",
            ""
        ))
        .await,
        "{:?}\n{}",
        delivery_events(&sluice_dir, &qid),
        postfix.maillog()
    );
    let expected = format!("sasl_method=PLAIN, sasl_username={USER}");
    assert!(
        postfix.maillog().contains(&expected),
        "{}",
        postfix.maillog()
    );
    assert!(any_logged(&sluice_dir, |e| matches!(
        e,
        Event::SaslOut { sasl_username, sasl_method, .. }
            if sasl_username == USER && sasl_method == "PLAIN"
    )));
    server.shutdown().await;
    assert_not_logged(&sluice_dir, PASSWORD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_defers_with_4_7_0() {
    let dir = temp_dir("smarthost-auth-wrong");
    let (_dovecot, postfix) = smarthost(&dir);
    let sluice_dir = dir.join("sluice");
    let wrong = "Wr0ng-pa55word-never-logged";
    let cfg = sluice_config(&sluice_dir, &postfix, wrong, Some(""));
    let (server, addr) = start(cfg).await;
    let qid = submit(addr).await;
    let deferred = |e: &Event| {
        is_delivery(e, "b@far.test", "deferred", "4.7.0", "")
            && matches!(e, Event::Delivery { reason, .. }
                if reason.to_string().contains("SASL authentication failed; server")
                    && reason.to_string().contains("535"))
    };
    assert!(
        wait_until(30, || delivery_events(&sluice_dir, &qid)
            .iter()
            .any(deferred))
        .await,
        "{:?}",
        delivery_events(&sluice_dir, &qid)
    );
    assert!(!delivered_as(&sluice_dir, &qid, "", "bounced", ""));
    // The smarthost saw the login fail, and none succeed.
    let log = postfix.maillog();
    assert!(log.contains("SASL PLAIN authentication failed"), "{log}");
    assert!(!log.contains("sasl_method="), "{log}");
    server.shutdown().await;
    assert_not_logged(&sluice_dir, wrong);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_in_clear_by_default() {
    let dir = temp_dir("smarthost-auth-clear");
    let (_dovecot, postfix) = smarthost(&dir);
    let sluice_dir = dir.join("sluice");
    let cfg = sluice_config(&sluice_dir, &postfix, PASSWORD, None);
    let (server, addr) = start(cfg).await;
    let qid = submit(addr).await;
    let deferred = |e: &Event| {
        is_delivery(e, "b@far.test", "deferred", "4.7.0", "")
            && matches!(e, Event::Delivery { reason, .. }
                if reason.to_string().contains("no mechanism available"))
    };
    assert!(
        wait_until(30, || delivery_events(&sluice_dir, &qid)
            .iter()
            .any(deferred))
        .await,
        "{:?}",
        delivery_events(&sluice_dir, &qid)
    );
    // No AUTH reached the smarthost at all.
    let log = postfix.maillog();
    assert!(
        !log.contains("sasl_username=") && !log.contains("authentication failed"),
        "{log}"
    );
    server.shutdown().await;
    assert_not_logged(&sluice_dir, PASSWORD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_options_send_plain_over_starttls() {
    let dir = temp_dir("smarthost-auth-tls");
    std::fs::create_dir_all(&*dir).unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    // AUTH offered only once TLS is up.
    let (_dovecot, postfix) = smarthost_with(
        &dir,
        &[
            ("smtpd_tls_security_level", "may"),
            ("smtpd_tls_cert_file", &cert),
            ("smtpd_tls_key_file", &key),
            ("smtpd_tls_auth_only", "yes"),
            ("smtpd_tls_loglevel", "1"),
        ],
    );
    let sluice_dir = dir.join("sluice");
    let cfg = sluice_config(&sluice_dir, &postfix, PASSWORD, None);
    let (server, addr) = start(cfg).await;
    let qid = submit(addr).await;
    assert!(
        wait_until(30, || delivered_as(
            &sluice_dir,
            &qid,
            "b@far.test",
            "sent",
            ""
        ))
        .await,
        "{:?}\n{}",
        delivery_events(&sluice_dir, &qid),
        postfix.maillog()
    );
    let log = postfix.maillog();
    assert!(log.contains("TLS connection established from"), "{log}");
    assert!(any_logged(&sluice_dir, |e| matches!(
        e,
        Event::TlsOut { .. }
    )));
    assert!(
        log.contains(&format!("sasl_method=PLAIN, sasl_username={USER}")),
        "{log}"
    );
    server.shutdown().await;
    assert_not_logged(&sluice_dir, PASSWORD);
}
