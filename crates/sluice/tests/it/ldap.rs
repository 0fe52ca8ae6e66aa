//! Recipient validation and Maildir delivery against a real slapd.

use crate::common;

use std::path::Path;

use common::slapd::Slapd;
use common::*;
use sluice::config::tables::TableConfig;
use sluice::config::Config;

fn ldap_table(uris: Vec<String>, base: &str, filter: &str, attr: &str) -> TableConfig {
    let mut t: TableConfig = toml::from_str("kind = \"ldap\"").unwrap();
    t.uris = uris;
    t.base = base.into();
    t.filter = filter.into();
    t.attributes = vec![attr.into()];
    t.connect_timeout_ms = 500;
    t.query_timeout_ms = 1000;
    t.pool_size = 2;
    t
}

fn ldap_config(dir: &Path, uris: Vec<String>) -> Config {
    let mut c = config(dir, None);
    c.local.domains = vec![
        "example.com".parse().unwrap(),
        "catch.example.com".parse().unwrap(),
    ];
    c.local.mailbox_table = Some("users".into());
    c.local.alias_table = Some("aliases".into());
    c.local.maildir_base = Some(dir.join("mail"));
    c.tables.insert(
        "users".into(),
        ldap_table(
            uris.clone(),
            "ou=people,dc=example,dc=com",
            "(mail=%s)",
            "homeDirectory",
        ),
    );
    c.tables.insert(
        "aliases".into(),
        ldap_table(
            uris,
            "ou=aliases,dc=example,dc=com",
            "(cn=%s)",
            "rfc822MailMember",
        ),
    );
    c
}

/// Files delivered to a user's Maildir/new.
fn delivered(dir: &Path, user: &str) -> Vec<String> {
    let new = dir.join("mail/example.com").join(user).join("Maildir/new");
    match std::fs::read_dir(new) {
        Ok(entries) => entries
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_misses_aliases_and_catch_all() {
    let slapd = Slapd::start("hits", 50);
    let dir = temp_dir("ldap-hits");
    let (server, addr) = start(ldap_config(&dir, vec![slapd.uri()])).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<nobody@example.com>").await;
    assert!(r.starts_with("550 5.1.1 <nobody@example.com>"), "{r}");
    assert!(c
        .cmd("RCPT TO:<user1@example.com>")
        .await
        .starts_with("250"));
    assert!(c.cmd("RSET").await.starts_with("250"));

    let r = c
        .message("s@remote.test", &["user4@example.com"], &body("direct"))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    let r = c
        .message("s@remote.test", &["sales@example.com"], &body("alias"))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    let r = c
        .message(
            "s@remote.test",
            &["whoever@catch.example.com"],
            &body("catch"),
        )
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(
        wait_until(10, || delivered(&dir, "user4").len() == 1
            && delivered(&dir, "user1").len() == 1
            && delivered(&dir, "user2").len() == 1
            && delivered(&dir, "user3").len() == 1)
        .await,
        "{}",
        read_log(&dir)
    );
    let m = &delivered(&dir, "user4")[0];
    assert!(
        m.starts_with(
            "Return-Path: <s@remote.test>\r\nDelivered-To: user4@example.com\r\nReceived: "
        ),
        "{m}"
    );
    assert!(m.contains("Subject: direct"));
    assert!(delivered(&dir, "user1")[0].contains("Delivered-To: user1@example.com"));
    assert!(delivered(&dir, "user2")[0].contains("Subject: alias"));
    assert!(delivered(&dir, "user3")[0].contains("Subject: catch"));
    assert!(delivered(&dir, "user5").is_empty());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_outage_gives_451_cache_covers_known_users_and_nothing_is_lost() {
    let mut slapd = Slapd::start("outage", 20);
    let dir = temp_dir("ldap-outage");
    let (server, addr) = start(ldap_config(&dir, vec![slapd.uri()])).await;
    let mut c = Client::ready(addr).await;
    // user5 is looked up (and cached) while the directory is up.
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    assert!(c
        .cmd("RCPT TO:<user5@example.com>")
        .await
        .starts_with("250"));
    assert!(c.cmd("RSET").await.starts_with("250"));

    slapd.stop();
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<user6@example.com>").await;
    assert!(
        r.starts_with("451 4.3.0 <user6@example.com>: Temporary lookup failure"),
        "{r}"
    );
    let r = c.cmd("RCPT TO:<nobody@example.com>").await;
    assert!(
        r.starts_with("451 4.3.0"),
        "a directory outage is never a 550: {r}"
    );
    // The cached user is still accepted, and the mail is delivered (path from the cache).
    assert!(
        c.cmd("RCPT TO:<user5@example.com>")
            .await
            .starts_with("250"),
        "cache hit within TTL"
    );
    assert!(c.cmd("DATA").await.starts_with("354"));
    c.send(body("during-outage").as_bytes()).await;
    c.send(b".\r\n").await;
    assert!(c.reply().await.starts_with("250 2.0.0"));
    assert!(
        wait_until(10, || delivered(&dir, "user5").len() == 1).await,
        "{}",
        read_log(&dir)
    );
    assert!(any_logged(&dir, |e| matches!(
        e,
        Event::LookupFailed { key, .. } if key == "user6@example.com"
    )));

    slapd.restart();
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<user6@example.com>").await;
    assert!(
        r.starts_with("250"),
        "accepted again after slapd is back: {r}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_to_the_second_uri() {
    let slapd = Slapd::start("failover", 5);
    let dir = temp_dir("ldap-failover");
    let refusing = reserve();
    let dead = format!("ldap://127.0.0.1:{}", refusing.addr.port());
    let (server, addr) = start(ldap_config(&dir, vec![dead, slapd.uri()])).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@remote.test", &["user2@example.com"], &body("failover"))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    assert!(wait_until(10, || delivered(&dir, "user2").len() == 1).await);
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    assert!(c
        .cmd("RCPT TO:<ghost@example.com>")
        .await
        .starts_with("550 5.1.1"));
    server.shutdown().await;
}

fn table(t: &TableConfig) -> sluice::tables::Table {
    sluice::tables::Table::build("t", t, &sluice::log::Logger::disabled()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldaps_and_starttls_check_the_certificate() {
    let slapd = Slapd::start("tls", 3);
    let base = "ou=people,dc=example,dc=com";
    let dir = temp_dir("ldap-tls");
    let other = dir.join("other.pem");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    std::fs::write(&other, made.cert.pem()).unwrap();
    let mut t = ldap_table(vec![slapd.ldaps_uri()], base, "(mail=%s)", "mail");
    t.tls_ca_file = Some(slapd.ca());
    let found = table(&t).lookup("user1@example.com").await;
    assert!(matches!(found, Ok(Some(_))), "ldaps: {found:?}");
    t.uris = vec![slapd.uri()];
    t.starttls = true;
    let found = table(&t).lookup("user2@example.com").await;
    assert!(matches!(found, Ok(Some(_))), "StartTLS: {found:?}");
    // The wrong CA, over either: unavailable (451 at RCPT), never "no such user".
    t.tls_ca_file = Some(other);
    assert!(
        table(&t).lookup("user2@example.com").await.is_err(),
        "StartTLS was used"
    );
    t.uris = vec![slapd.ldaps_uri()];
    t.starttls = false;
    assert!(table(&t).lookup("user1@example.com").await.is_err());
}

/// A TCP proxy to `to`. Once `stall` is set, the first connection it
/// accepted becomes a black hole: what the client sends there is counted
/// and dropped, and nothing comes back.
async fn stalling_proxy(
    to: std::net::SocketAddr,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stall = Arc::new(AtomicBool::new(false));
    let swallowed = Arc::new(AtomicUsize::new(0));
    let (s, w) = (stall.clone(), swallowed.clone());
    tokio::spawn(async move {
        for n in 0.. {
            let (client, _) = listener.accept().await.unwrap();
            let server = tokio::net::TcpStream::connect(to).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let (s, w) = (s.clone(), w.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16384];
                while let Ok(k) = cr.read(&mut buf).await {
                    if k == 0 {
                        break;
                    }
                    if n == 0 && s.load(Ordering::SeqCst) {
                        w.fetch_add(1, Ordering::SeqCst);
                    } else if sw.write_all(&buf[..k]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
            });
        }
    });
    (addr, stall, swallowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_pooled_connection_is_replaced_not_reused() {
    let slapd = Slapd::start("hung", 20);
    let target: std::net::SocketAddr = format!("127.0.0.1:{}", slapd.port).parse().unwrap();
    let (proxy, stall, swallowed) = stalling_proxy(target).await;
    let mut t = ldap_table(
        vec![format!("ldap://{proxy}")],
        "ou=people,dc=example,dc=com",
        "(mail=%s)",
        "mail",
    );
    t.query_timeout_ms = 300;
    let table = table(&t);
    // Both pool slots connected (the first through the connection to hang).
    for u in 1..=2 {
        let r = table.lookup(&format!("user{u}@example.com")).await;
        assert!(matches!(r, Ok(Some(_))), "{r:?}");
    }
    stall.store(true, std::sync::atomic::Ordering::SeqCst);
    for u in 3..=12 {
        let r = table.lookup(&format!("user{u}@example.com")).await;
        assert!(matches!(r, Ok(Some(_))), "user{u}: {r:?}");
    }
    let lost = swallowed.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=2).contains(&lost),
        "the hung connection got {lost} requests; it should have been dropped after the first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_auth_by_ldap_bind() {
    use base64::Engine;
    let mut slapd = Slapd::start("bind", 3);
    let dir = temp_dir("ldap-bind");
    let mut cfg = config(&dir, None);
    cfg.smtpd.mynetworks = vec![net("127.0.0.3/32")];
    let users = ldap_table(
        vec![slapd.uri()],
        "ou=people,dc=example,dc=com",
        "(mail=%s)",
        "mail",
    );
    cfg.tables.insert("users".into(), users);
    cfg.auth.table = Some("users".into());
    cfg.auth.ldap_bind = true;
    cfg.auth.offer_on_smtp = true;
    cfg.auth.failure_delay_ms = 0;
    let (server, addr) = start(cfg).await;
    let plain = |u: &str, p: &str| {
        let raw = format!("\0{u}\0{p}");
        format!(
            "AUTH PLAIN {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    };
    let ca = dir.join("var/tls/snakeoil-cert.pem");
    let session = || async {
        let mut c = Client::ready(addr).await;
        assert!(c.cmd("STARTTLS").await.starts_with("220"));
        let mut t = common::tls::TlsClient::handshake(c.stream, &ca, "mx.test").await;
        assert!(t.cmd("EHLO client.test").await.contains("AUTH PLAIN LOGIN"));
        t
    };
    let mut t = session().await;
    let r = t.cmd(&plain("user2@example.com", "pw1")).await;
    assert!(r.starts_with("535 5.7.8"), "another user's password: {r}");
    let r = t.cmd(&plain("nobody@example.com", "pw1")).await;
    assert!(r.starts_with("535 5.7.8"), "{r}");
    let r = t.cmd(&plain("user2@example.com", "")).await;
    assert!(
        r.starts_with("535 5.7.8"),
        "an empty password is not an anonymous bind: {r}"
    );
    let r = t.cmd(&plain("user2@example.com", "pw2")).await;
    assert!(r.starts_with("235 2.7.0"), "{r}");
    // Directory down: try later, not "wrong password".
    slapd.stop();
    let mut t = session().await;
    let r = t.cmd(&plain("user1@example.com", "pw1")).await;
    assert!(r.starts_with("454 4.7.0"), "{r}");
    server.shutdown().await;
}

/// A burst of lookups of one new address (many sessions at once) costs
/// one query, found or not; the answer is then cached, a miss included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_of_one_key_share_one_query() {
    let slapd = Slapd::start("flight", 5);
    let t = ldap_table(
        vec![slapd.uri()],
        "ou=people,dc=example,dc=com",
        "(mail=%s)",
        "homeDirectory",
    );
    let table = std::sync::Arc::new(table(&t));
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..100 {
        let table = table.clone();
        let key = if i % 2 == 0 {
            "user1@example.com"
        } else {
            "nobody@example.com"
        };
        burst.spawn(async move { table.lookup(key).await.map(|v| v.is_some()) });
    }
    let (mut found, mut missing) = (0, 0);
    while let Some(r) = burst.join_next().await {
        match r.unwrap() {
            Ok(true) => found += 1,
            Ok(false) => missing += 1,
            Err(e) => panic!("lookup failed: {e}"),
        }
    }
    assert_eq!((found, missing), (50, 50));
    let count = |what: &str| {
        let (_, counters) = table.counters().unwrap();
        counters.iter().find(|(k, _)| *k == what).unwrap().1
    };
    assert_eq!(count("queries"), 2, "one per key: {:?}", table.counters());
    // Later lookups, the miss included, come from the cache.
    assert!(table.lookup("nobody@example.com").await.unwrap().is_none());
    assert!(table.lookup("user1@example.com").await.unwrap().is_some());
    assert_eq!(count("queries"), 2);
}
