//! Local delivery with static tables: Maildir problems defer, never lose.

use crate::common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_maildir_defers_then_delivers() {
    let dir = temp_dir("local-unwritable");
    std::fs::write(dir.join("mailboxes"), "a@local.test a/Maildir/\n").unwrap();
    std::fs::write(dir.join("aliases"), "null@local.test discard\n").unwrap();
    std::fs::write(dir.join("domains"), "tabled.test OK\n").unwrap();
    std::fs::write(dir.join("routes"), "routed.test discard\n").unwrap();
    let mut cfg = config(&dir, None);
    cfg.local.domains = vec!["local.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    cfg.local.alias_table = Some("aliases".into());
    cfg.local.domain_table = Some("domains".into());
    cfg.local.transport_table = Some("routes".into());
    // The base is a regular file: no Maildir can be made under it yet.
    let base = dir.join("mailbase");
    std::fs::write(&base, b"not a directory").unwrap();
    cfg.local.maildir_base = Some(base.clone());
    let table = |p: &str| {
        let mut t: sluice::config::tables::TableConfig =
            toml::from_str("kind = \"static\"").unwrap();
        t.path = Some(dir.join(p));
        t
    };
    cfg.tables.insert("mailboxes".into(), table("mailboxes"));
    cfg.tables.insert("aliases".into(), table("aliases"));
    cfg.tables.insert("domains".into(), table("domains"));
    cfg.tables.insert("routes".into(), table("routes"));
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
    assert!(c
        .cmd("RCPT TO:<zz@local.test>")
        .await
        .starts_with("550 5.1.1"));
    assert!(c.cmd("RSET").await.starts_with("250"));
    let r = c
        .message("s@remote.test", &["a@local.test"], &body("stuck"))
        .await;
    assert!(r.starts_with("250 2.0.0"), "{r}");
    let qid = qid_of(&r);
    assert!(
        wait_logged(10, &dir, |e| is_delivery(
            e,
            "a@local.test",
            "deferred",
            "4.3.0",
            ""
        ) && matches!(
            e,
            Event::Delivery { queue_id, relay, .. }
                if *queue_id == qid.as_str() && relay == "virtual"
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    // Fix the problem; the retry delivers.
    std::fs::remove_file(&base).unwrap();
    let new = base.join("a/Maildir/new");
    assert!(
        wait_until(15, || std::fs::read_dir(&new)
            .map(|d| d.count() == 1)
            .unwrap_or(false))
        .await,
        "{}",
        read_log(&dir)
    );
    // An alias to "discard" is accepted and dropped.
    let r = c
        .message("s@remote.test", &["null@local.test"], &body("void"))
        .await;
    assert!(r.starts_with("250 2.0.0 Ok: discarded"), "{r}");
    // A route from the static transport table.
    let r = c
        .message("s@remote.test", &["y@routed.test"], &body("routed"))
        .await;
    let qid = qid_of(&r);
    assert!(
        wait_logged(10, &dir, |e| is_delivery(
            e,
            "y@routed.test",
            "sent",
            "",
            ""
        ) && matches!(
            e,
            Event::Delivery { queue_id, transport, .. }
                if *queue_id == qid.as_str() && transport == "discard"
        ))
        .await,
        "{}",
        read_log(&dir)
    );
    // A mailbox added to the table's file is known a moment later, with no
    // reload command (the watcher notices the new modification time).
    std::fs::write(
        dir.join("mailboxes"),
        "a@local.test a/Maildir/\nnew@local.test n/Maildir/\n",
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut c = Client::ready(addr).await;
        assert!(c.cmd("MAIL FROM:<s@remote.test>").await.starts_with("250"));
        let r = c.cmd("RCPT TO:<new@local.test>").await;
        if r.starts_with("250") {
            break;
        }
        assert!(r.starts_with("550 5.1.1"), "{r}");
        assert!(
            std::time::Instant::now() < deadline,
            "table change not picked up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    server.shutdown().await;
}

/// Twenty recipients in twenty new mailboxes, delivered with their
/// durability shared: the daemon reports the disk syncs it spent, two for
/// the batch (`maildir_sync = "batch"`), against two per message and more
/// for the new directories when each is synced on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maildir_deliveries_share_their_disk_syncs() {
    use sluice::config::local::MaildirSync;
    for (mode, most) in [(MaildirSync::Batch, 2), (MaildirSync::Each, 200)] {
        let dir = temp_dir("local-group-commit");
        let mut cfg = config(&dir, None);
        cfg.local.domains = vec!["local.test".parse().unwrap()];
        cfg.local.maildir_sync = mode;
        cfg.delivery.recipients_per_transaction = 100;
        let (server, addr) = start(cfg).await;
        let mut c = Client::ready(addr).await;
        let rcpts: Vec<String> = (0..20).map(|i| format!("u{i}@local.test")).collect();
        let rcpts: Vec<&str> = rcpts.iter().map(String::as_str).collect();
        let r = c.message("s@remote.test", &rcpts, &body("many")).await;
        assert!(r.starts_with("250"), "{r}");
        let base = dir.join("var/mail/local.test");
        let delivered = || {
            (0..20).all(|i| {
                std::fs::read_dir(base.join(format!("u{i}/Maildir/new")))
                    .is_ok_and(|d| d.count() == 1)
            })
        };
        assert!(wait_until(10, delivered).await, "{}", read_log(&dir));
        server.shutdown().await;
        let line = logged_events(&dir)
            .into_iter()
            .find(|e| matches!(e, Event::MaildirStats { files: 20, .. }))
            .unwrap_or_else(|| panic!("{mode:?}: no maildir_stats event: {}", read_log(&dir)));
        let Event::MaildirStats { syncs, .. } = line else {
            unreachable!("found as maildir_stats")
        };
        let line = format!("{line:?}");
        assert!(syncs <= most, "{mode:?}: {line}");
        if mode == MaildirSync::Each {
            assert!(syncs >= 40, "each message pays its own: {line}");
        }
    }
}
