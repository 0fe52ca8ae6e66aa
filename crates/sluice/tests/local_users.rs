//! Any local user can send mail and list the queue, as with Postfix's
//! postdrop and showq: sendmail(1) and mailq run as a real unprivileged
//! account the test creates, through the submission socket (0666); the
//! envelope sender is that user's login at our hostname whatever `-f`
//! said, the `Received:` names their uid (from the socket's peer
//! credentials, not from anything they send); administering the queue
//! stays with root and the daemon's group.

mod common;

use std::path::Path;
use std::process::Command;

use common::users::TestUser;
use common::*;

/// `program args…` as `user`, `stdin` in: (exit status, stdout, stderr).
fn run_as(user: &TestUser, program: &Path, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.uid))
        .arg("--clear-groups")
        .arg(program)
        .args(args)
        .env("USER", "root"); // a lie: the daemon does not believe it
    output_of(cmd, stdin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_user_can_send_mail_as_themselves_only() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test creates a local account: run the suite as root, as CI does");
    }
    let user = TestUser::create("u");
    let dir = temp_dir("local-users");
    // The user may pass through the test's directory, as through /var/spool.
    std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sink = recording_sink().await;
    let cfg = config(&dir, Some(sink.addr));
    let conf = client_config(&dir, &cfg.data_dir).display().to_string();
    let (sendmail, mailq) = (dir.join("sendmail"), dir.join("mailq"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &mailq).unwrap();
    let (server, _) = start(cfg).await;

    let msg = b"From: The CEO <ceo@ours.test>\nSubject: from a user\n\nhello\n";
    let (code, _, err) = run_as(
        &user,
        &sendmail,
        &["-C", &conf, "-f", "ceo@ours.test", "x@ours.test"],
        msg,
    );
    assert_eq!(code, 0, "sendmail as {}: {err}", user.name);
    let (code, out, err) = run_as(&user, &mailq, &["-C", &conf], b"");
    assert_eq!(code, 0, "mailq as {}: {out} {err}", user.name);
    let bin = Path::new(env!("CARGO_BIN_EXE_sluice"));
    let (code, _, err) = run_as(&user, bin, &["queue", "flush", "--config", &conf], b"");
    assert_ne!(code, 0, "an ordinary user flushed the queue");
    assert!(err.contains("Permission denied"), "{err}");

    assert!(
        wait_until(15, || sink.count() == 1).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let got = &sink.messages()[0];
    let own = format!("{}@mx.test", user.name);
    assert_eq!(got.sender, own, "the envelope sender is the user's own");
    let text = String::from_utf8_lossy(&got.body);
    assert!(
        text.contains(&format!("(Sluice sendmail, from userid {})", user.uid)),
        "{text}"
    );
    assert!(
        has_event(&dir, "sender_replaced", |e| e["asked"] == "ceo@ours.test"
            && e["sender"] == own.as_str()
            && e["uid"] == user.uid),
        "{}",
        read_log(&dir)
    );
}
