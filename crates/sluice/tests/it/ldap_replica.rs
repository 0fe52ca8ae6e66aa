//! A node's directory lookups on a syncrepl consumer beside it (issue
//! 23): real slapd provider and consumer; entries added on the provider
//! reach the consumer, and with the provider killed the node still
//! accepts known users and refuses unknown ones, with no `451`.

use crate::common;

use std::path::Path;

use common::slapd::{Slapd, BASE};
use common::*;
use sluice::config::tables::TableConfig;
use sluice::config::Config;

fn ldap_table(uri: String, base: &str, filter: &str, attr: &str) -> TableConfig {
    let mut t: TableConfig = toml::from_str("kind = \"ldap\"").unwrap();
    t.uris = vec![uri];
    t.base = base.into();
    t.filter = filter.into();
    t.attributes = vec![attr.into()];
    t.connect_timeout_ms = 500;
    t.query_timeout_ms = 1000;
    t
}

/// A node whose users and aliases are looked up on `uri`.
fn node(dir: &Path, uri: String) -> Config {
    let mut c = config(dir, None);
    c.local.domains = vec!["example.com".parse().unwrap()];
    c.local.mailbox_table = Some("users".into());
    c.local.alias_table = Some("aliases".into());
    c.local.maildir_base = Some(dir.join("mail"));
    let people = format!("ou=people,{BASE}");
    let aliases = format!("ou=aliases,{BASE}");
    let users = ldap_table(uri.clone(), &people, "(mail=%s)", "homeDirectory");
    c.tables.insert("users".into(), users);
    let alias = ldap_table(uri, &aliases, "(cn=%s)", "rfc822MailMember");
    c.tables.insert("aliases".into(), alias);
    c
}

/// The reply to RCPT TO for `rcpt`, in a fresh transaction.
async fn rcpt(addr: std::net::SocketAddr, rcpt: &str) -> String {
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    c.cmd(&format!("RCPT TO:<{rcpt}>")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_provider_down_the_consumer_answers_and_nothing_gets_451() {
    let mut provider = Slapd::provider("provider", 3);
    let consumer = Slapd::consumer("consumer", &provider);
    let synced = || consumer.has_mail("user3@example.com");
    assert!(wait_until(20, synced).await, "the consumer never caught up");
    // An entry added on the provider reaches the consumer.
    provider.add(&format!(
        "dn: uid=late,ou=people,{BASE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n\
         cn: late\nsn: late\nuid: late\nuidNumber: 20000\ngidNumber: 10000\n\
         homeDirectory: example.com/late/Maildir/\nmail: late@example.com\n"
    ));
    assert!(wait_until(20, || consumer.has_mail("late@example.com")).await);

    let dir = temp_dir("ldap-replica");
    let (_server, addr) = start(node(&dir, consumer.uri())).await;
    provider.stop();
    for known in ["user1@example.com", "late@example.com", "sales@example.com"] {
        let r = rcpt(addr, known).await;
        assert!(r.starts_with("250"), "{known}: {r}\n{}", read_log(&dir));
    }
    let r = rcpt(addr, "nobody@example.com").await;
    assert!(r.starts_with("550 5.1.1"), "{r}");
}
