//! Recipient validation and Maildir delivery against a real slapd.

mod common;

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
    c.local.domains = vec!["example.com".into(), "catch.example.com".into()];
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
    assert!(read_log(&dir).contains(": lookup of user6@example.com failed"));

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
    let dead = format!("ldap://127.0.0.1:{}", free_addr().port());
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
