//! `sluice queue …` against a running daemon, through its admin socket:
//! list with filters, show, hold (kept across a restart), flush, release,
//! bounce and delete; and clear errors for an unknown ID or no daemon.
//! (Mail to defer-* is always deferred by the test sink.) The socket is
//! never reachable under a wider mode than 0660 (the submission socket 0666).
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::path::Path;

use common::*;
use sluice::admin::protocol::{Filter, Request};
use sluice::tools::queue_cli::{call, mailq};

fn list(filter: Filter) -> Request {
    Request::List { filter }
}

async fn ids(data_dir: &Path, filter: Filter) -> Vec<String> {
    let r = call(data_dir, &list(filter)).await.unwrap();
    r.messages.into_iter().map(|e| e.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_administered_through_the_socket() {
    let dir = temp_dir("queue-admin");
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    // Deferred mail stays deferred during the test unless flushed.
    cfg.queue.minimal_backoff_secs = 3600;
    cfg.queue.maximal_backoff_secs = 3600;
    let data_dir = cfg.data_dir.clone();
    let (server, addr) = start(cfg.clone()).await;
    let mut c = Client::ready(addr).await;
    // The sink answers 451 to defer-* recipients.
    let mut queued = Vec::new();
    for rcpt in [
        "defer-a@ours.test",
        "defer-b@ours.test",
        "defer-c@ours.test",
    ] {
        let r = c.message("s@ours.test", &[rcpt], &body(rcpt)).await;
        queued.push(qid_of(&r));
    }
    let (m1, m2, m3) = (&queued[0], &queued[1], &queued[2]);
    let deferred = || count_logged(&dir, |e| is_delivery(e, "", "deferred", "", ""));
    assert!(wait_until(15, || deferred() >= 3).await);
    let all = call(&data_dir, &list(Filter::default())).await.unwrap();
    assert_eq!(all.messages.len(), 3);
    assert!(
        all.messages.iter().all(|e| e.state == "deferred"),
        "{all:?}"
    );
    let reason = all.messages[0].recipients[0]
        .reason
        .clone()
        .unwrap_or_default();
    assert!(reason.contains("451"), "last reason shown: {reason}");
    // Postfix counts whole Kbytes (rounded down).
    let bytes: u64 = all.messages.iter().map(|e| e.size).sum();
    let summary = format!("-- {} Kbytes in 3 Requests.", bytes / 1024);
    assert!(mailq(&all.messages).contains(&summary));
    let one = Filter {
        recipient: Some("defer-a@ours.test".into()),
        ..Default::default()
    };
    assert_eq!(ids(&data_dir, one).await, vec![m1.clone()]);

    // show: headers and the log lines about it.
    let shown = call(&data_dir, &Request::Show { id: m1.clone() })
        .await
        .unwrap();
    assert!(shown
        .headers
        .unwrap()
        .contains("Subject: defer-a@ours.test"));
    // The history is the log's lines for it: events, in this format.
    assert!(shown.history.iter().any(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .is_ok_and(|e| e["event"] == "delivery" && e["status"] == "deferred")
    }));
    let err = call(
        &data_dir,
        &Request::Show {
            id: "ABCDEF".into(),
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("no such message"), "{err}");

    // hold m3; flush retries the others only.
    call(&data_dir, &Request::Hold { id: m3.clone() })
        .await
        .unwrap();
    let held = Filter {
        state: Some("hold".into()),
        ..Default::default()
    };
    assert_eq!(ids(&data_dir, held.clone()).await, vec![m3.clone()]);
    let before = deferred();
    let flushed = call(
        &data_dir,
        &Request::Flush {
            id: None,
            domain: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(flushed.count, 2, "held mail is not flushed");
    assert!(
        wait_until(15, || deferred() >= before + 2).await,
        "retried now"
    );

    // bounce m2: the sender gets it back at once.
    call(&data_dir, &Request::Bounce { id: m2.clone() })
        .await
        .unwrap();
    assert!(
        wait_until(15, || sink.messages().iter().any(|m| m.sender.is_empty()
            && String::from_utf8_lossy(&m.body)
                .contains("returned to the sender by the administrator")))
        .await
    );
    assert!(wait_until(15, || removed(&dir, m2)).await);

    // delete m1.
    let deleted = call(
        &data_dir,
        &Request::Delete {
            ids: vec![m1.clone()],
            all_deferred: false,
            older_than_secs: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(deleted.count, 1);
    let err = call(&data_dir, &Request::Hold { id: m1.clone() })
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not found"), "{err}");

    // The hold survives a restart, and held mail is not delivered.
    server.shutdown().await;
    let (server, _) = start(cfg).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ids(&data_dir, held.clone()).await != vec![m3.clone()] {
        assert!(
            std::time::Instant::now() < deadline,
            "m3 still held after the restart"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    call(&data_dir, &Request::Release { id: m3.clone() })
        .await
        .unwrap();
    let remaining = ids(&data_dir, Filter::default()).await;
    assert_eq!(remaining, vec![m3.clone()]);
    // Released for good: the hold list kept across restarts has let it go.
    let holds = std::fs::read_to_string(data_dir.join("hold.list")).unwrap_or_default();
    assert!(!holds.contains(m3.as_str()), "{holds}");
    server.shutdown().await;

    // No daemon: a clear error.
    let err = call(&data_dir, &list(Filter::default()))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot reach the daemon"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_forgets_dead_hosts_so_mail_goes_out_at_once() {
    let dir = temp_dir("queue-flush-dead");
    // Nothing listens at the next hop yet.
    let hop = reserve();
    let mut cfg = config(&dir, Some(hop.addr));
    cfg.delivery.dead_host_secs = 600;
    cfg.queue.minimal_backoff_secs = 3600;
    cfg.queue.maximal_backoff_secs = 3600;
    let data_dir = cfg.data_dir.clone();
    let (server, addr) = start(cfg).await;
    let mut c = Client::ready(addr).await;
    let r = c
        .message("s@ours.test", &["x@ours.test"], &body("dead"))
        .await;
    assert!(r.starts_with("250"), "{r}");
    assert!(wait_logged(15, &dir, |e| is_delivery(e, "", "deferred", "", "")).await);
    // The next hop is back; postqueue -f would deliver now.
    let sink = hop.sink().await;
    let flush = Request::Flush {
        id: None,
        domain: None,
    };
    assert_eq!(call(&data_dir, &flush).await.unwrap().count, 1);
    assert!(
        wait_until(15, || sink.count() == 1).await,
        "delivered at once, not after the 600 s dead-host time"
    );
    server.shutdown().await;
}

/// What happened to entries of one directory (inotify): creations,
/// arrivals by rename, changes of mode or owner.
struct DirWatch(std::fs::File);

impl DirWatch {
    fn new(dir: &Path) -> DirWatch {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: plain system calls; the descriptor is owned by the File.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0, "inotify_init1");
            let file = std::fs::File::from_raw_fd(fd);
            let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ATTRIB;
            assert!(libc::inotify_add_watch(fd, path.as_ptr(), mask) >= 0);
            DirWatch(file)
        }
    }

    /// The events so far for entry `name`, in order.
    fn events(&mut self, name: &str) -> Vec<&'static str> {
        use std::io::Read;
        let mut buf = vec![0u8; 1 << 16];
        let mut seen = Vec::new();
        loop {
            let n = match self.0.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return seen,
                Err(e) => panic!("inotify: {e}"),
            };
            // struct inotify_event: wd, mask, cookie, len, name[len].
            let mut at = 0;
            while at + 16 <= n {
                let word =
                    |i: usize| u32::from_ne_bytes(buf[at + i..at + i + 4].try_into().unwrap());
                let (mask, len) = (word(4), word(12) as usize);
                let raw = &buf[at + 16..at + 16 + len];
                if raw.split(|&b| b == 0).next() == Some(name.as_bytes()) {
                    seen.push(match mask {
                        m if m & libc::IN_CREATE != 0 => "create",
                        m if m & libc::IN_MOVED_TO != 0 => "moved_to",
                        _ => "attrib",
                    });
                }
                at += 16 + len;
            }
        }
    }
}

/// `admin.sock` is never reachable under a wider mode than 0660: it is
/// bound and given its mode in a directory only the daemon can enter, then
/// renamed into place. Watched with inotify on data_dir, it arrives by a
/// rename and its mode never changes there (bound in data_dir and then
/// chmodded, as before, it shows a creation and a change of mode: between
/// the two, any local user could connect and administer the queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_socket_appears_with_its_final_mode() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let dir = temp_dir("admin-socket-mode");
    let cfg = config(&dir, None);
    let data_dir = cfg.data_dir.clone();
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut watch = DirWatch::new(&data_dir);
    let (server, _) = start(cfg.clone()).await;
    let path = sluice::admin::socket_path(&data_dir);
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(watch.events("admin.sock"), ["moved_to"]);
    assert!(call(&data_dir, &list(Filter::default())).await.is_ok());
    server.shutdown().await;
    // Started again over a socket left by a daemon that died: the same.
    std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (server, _) = start(cfg).await;
    assert_eq!(watch.events("admin.sock"), ["create", "moved_to"]);
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert!(call(&data_dir, &list(Filter::default())).await.is_ok());
    let left: Vec<String> = std::fs::read_dir(&data_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("admin"))
        .collect();
    assert_eq!(left, ["admin.sock"], "nothing left of the binding");
    server.shutdown().await;
}
