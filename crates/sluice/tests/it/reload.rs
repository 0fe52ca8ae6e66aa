//! Reload (SIGHUP) applies the whole configuration file while running:
//! listeners are added and retired, routes and limits change, and nothing
//! in flight is dropped: a session open across the reload finishes its
//! transaction under the settings it started with. A file that cannot be
//! applied (here: a listener that cannot bind) changes nothing.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;

use common::*;
use sluice::config::Config;
use sluice::daemon::Server;

/// A configuration file: SMTP on `listen` (port 0 or a port already
/// bound: `server.addrs` says where), `a.test` routed to `hop`.
fn write(dir: &Path, listen: &[&str], hop: SocketAddr, size_limit: usize) {
    let listen: Vec<String> = listen.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        r#"hostname = "mx.test"
data_dir = "{dir}/var"
log_file = "{dir}/maillog"
log_format = "json"

[smtpd]
listen = [{listen}]
message_size_limit = {size_limit}

[queue]
minimal_backoff_secs = 1
maximal_backoff_secs = 2

[delivery]
connection_idle_secs = 1
dead_host_secs = 1

[transport]
"a.test" = "smtp:[{ip}]:{port}"

[dns]
nameservers = ["127.0.0.1:9"]
timeout_ms = 300
attempts = 1
"#,
        dir = dir.display(),
        listen = listen.join(", "),
        ip = hop.ip(),
        port = hop.port(),
    );
    std::fs::write(dir.join("sluice.toml"), text).unwrap();
}

/// Stops the daemon; a session left open on a retired listener must not
/// keep it waiting.
async fn stop(server: Server) {
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(20), server.shutdown()).await;
    assert!(stopped.is_ok(), "shutdown ends every session");
}

async fn refuses_connections(addr: SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_moves_listeners_routes_and_limits_and_keeps_open_sessions() {
    let dir = temp_dir("reload-live");
    let (old_hop, new_hop) = (recording_sink().await, recording_sink().await);
    // Two listen settings (another address, port 0 each).
    write(&dir, &["127.0.0.1:0"], old_hop.addr, 100_000);
    let path = dir.join("sluice.toml");
    let mut server = Server::start(Config::load(&path).unwrap()).await.unwrap();
    let first = server.addrs[0];

    // A session in the middle of a transaction when the reload comes.
    let mut open = Client::ready(first).await;
    assert!(open
        .cmd("MAIL FROM:<a@sender.test>")
        .await
        .starts_with("250"));
    assert!(open.cmd("RCPT TO:<x@a.test>").await.starts_with("250"));

    write(&dir, &["127.0.0.3:0"], new_hop.addr, 5_000);
    server
        .reload(&sluice::config::source::Source::new(
            Some(&path),
            Vec::new(),
        ))
        .await;
    assert_eq!(server.addrs.len(), 1);
    let second = server.addrs[0];
    assert_eq!(second.ip().to_string(), "127.0.0.3");

    // The new listener serves, with the new limit.
    let mut fresh = Client::ready(second).await;
    let ehlo = fresh.cmd("EHLO client.test").await;
    assert!(ehlo.contains("SIZE 5000"), "{ehlo}");
    // The retired one takes no new connections.
    assert!(
        refuses_connections(first).await,
        "{first} still accepts: {}",
        read_log(&dir)
    );
    // The open session finishes under the limit it started with (a
    // 6,000-byte message is over the new limit).
    assert!(open.cmd("DATA").await.starts_with("354"));
    let line = format!("{}\r\n", "x".repeat(78));
    let big = format!("Subject: open\r\n\r\n{}", line.repeat(80));
    open.send(big.as_bytes()).await;
    open.send(b".\r\n").await;
    let r = open.reply().await;
    assert!(r.starts_with("250"), "{r}");
    // New sessions get the new limit and the new route.
    let r = fresh.cmd("MAIL FROM:<a@sender.test> SIZE=6000").await;
    assert!(r.starts_with("552"), "{r}");
    let r = fresh
        .message(
            "a@sender.test",
            &["y@a.test"],
            "Subject: fresh\r\n\r\nHi.\r\n",
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    // Both go the new way: routes are looked up when mail is scheduled.
    assert!(
        wait_until(10, || new_hop.count() == 2).await,
        "new hop has {}, old hop {}: {}",
        new_hop.count(),
        old_hop.count(),
        read_log(&dir)
    );
    assert_eq!(old_hop.count(), 0);
    let log = read_log(&dir);
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Listening { addr, .. } if *addr == second.to_string()
        )),
        "{log}"
    );
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::StoppedListening { addr } if *addr == first.to_string()
        )),
        "{log}"
    );
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_cannot_bind_changes_nothing() {
    let dir = temp_dir("reload-refused");
    let (old_hop, new_hop) = (recording_sink().await, recording_sink().await);
    write(&dir, &["127.0.0.1:0"], old_hop.addr, 100_000);
    let path = dir.join("sluice.toml");
    let mut server = Server::start(Config::load(&path).unwrap()).await.unwrap();
    let first = server.addrs[0];
    // Someone else holds the address the new file asks for.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    write(&dir, &["127.0.0.1:0", &busy], new_hop.addr, 5_000);
    server
        .reload(&sluice::config::source::Source::new(
            Some(&path),
            Vec::new(),
        ))
        .await;
    // (The log is written by its own thread: wait for the event.)
    let refused = |e: &Event| {
        matches!(
            e,
            Event::Reload(Reload::Refused { result, cause, addr: Some(addr), .. })
                if result == "refused" && cause == "listen" && *addr == busy.as_str()
        )
    };
    assert!(
        wait_logged(5, &dir, refused).await,
        "the log names it: {}",
        read_log(&dir)
    );
    // The old listener, limit and route are all still in force.
    let mut c = Client::ready(first).await;
    let ehlo = c.cmd("EHLO client.test").await;
    assert!(ehlo.contains("SIZE 100000"), "{ehlo}");
    let r = c
        .message(
            "a@sender.test",
            &["y@a.test"],
            "Subject: old\r\n\r\nHi.\r\n",
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(wait_until(10, || old_hop.count() == 1).await);
    assert_eq!(new_hop.count(), 0);
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_adds_a_mailbox_domain_builds_its_tables() {
    let dir = temp_dir("reload-tables");
    let hop = recording_sink().await;
    write(&dir, &["127.0.0.1:0"], hop.addr, 100_000);
    let path = dir.join("sluice.toml");
    let mut server = Server::start(Config::load(&path).unwrap()).await.unwrap();
    let listen = server.addrs[0];
    let mut c = Client::ready(listen).await;
    // Not ours yet: relayed (to the default route), not delivered here.
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    assert!(c.cmd("RCPT TO:<zz@new.test>").await.starts_with("250"));
    assert!(c.cmd("RSET").await.starts_with("250"));
    std::fs::write(dir.join("mailboxes"), "a@new.test a/Maildir/\n").unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&format!(
        "\n[local]\ndomains = [\"new.test\"]\nmailbox_table = \"mailboxes\"\nmaildir_base = \"{base}\"\n\n[tables.mailboxes]\nkind = \"static\"\npath = \"{table}\"\n",
        base = dir.join("mail").display(),
        table = dir.join("mailboxes").display(),
    ));
    std::fs::write(&path, text).unwrap();
    server
        .reload(&sluice::config::source::Source::new(
            Some(&path),
            Vec::new(),
        ))
        .await;
    let mut c = Client::ready(listen).await;
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    let r = c.cmd("RCPT TO:<zz@new.test>").await;
    assert!(r.starts_with("550 5.1.1"), "unknown in the new table: {r}");
    assert!(c.cmd("RSET").await.starts_with("250"));
    let r = c
        .message(
            "s@remote.test",
            &["a@new.test"],
            "Subject: local\r\n\r\nHi.\r\n",
        )
        .await;
    assert!(r.starts_with("250"), "{r}");
    let new = dir.join("mail/a/Maildir/new");
    assert!(
        wait_until(10, || std::fs::read_dir(&new).is_ok_and(|d| d.count() == 1)).await,
        "{}",
        read_log(&dir)
    );
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::Reload(Reload::Applied { result, sections, .. })
                if result == "applied" && *sections == ["local and tables"]
        )),
        "{:?}",
        logged_events(&dir)
    );
    stop(server).await;
}
