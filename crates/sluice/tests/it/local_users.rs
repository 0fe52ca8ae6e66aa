//! Any local user can send mail and list the queue, as with Postfix's
//! postdrop and showq: sendmail(1) and mailq run as a real unprivileged
//! account the test creates, through the submission socket (0666); the
//! envelope sender is that user's login at our hostname whatever `-f`
//! said, the `Received:` names their uid (from the socket's peer
//! credentials, not from anything they send); administering the queue
//! stays with root and the daemon's group.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use sluice::daemon::Server;
use sluice_bench::sink::Sink;

use common::users::TestUser;
use common::*;

/// `program args…` as `user`, `stdin` in: (exit status, stdout, stderr).
fn run_as(user: &TestUser, program: &Path, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    output_of(as_user(user, program, args), stdin)
}

/// The command line of `program args…` as `user`.
fn as_user(user: &TestUser, program: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.uid))
        .arg("--clear-groups")
        .arg(program)
        .args(args)
        .env("USER", "root"); // a lie: the daemon does not believe it
    cmd
}

fn need_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test creates a local account: run the suite as root, as CI does");
    }
}

/// H1 of the 2026-11-27 review: with no `-C`, sendmail and mailq (as an
/// ordinary user) and `sluice queue` (as root) never look for the daemon
/// under the current directory, where another account planted
/// `./var/public/submit.sock` and `./var/admin.sock`; the plant gets no
/// connection and the tool names the absolute socket it tried.
#[test]
fn client_tools_never_use_a_socket_in_the_current_directory() {
    use std::os::unix::fs::PermissionsExt;
    need_root();
    let user = TestUser::create("p");
    let dir = temp_dir("local-plant");
    let trap = dir.join("trap");
    std::fs::create_dir_all(trap.join("var/public")).unwrap();
    for d in [&*dir, trap.as_path()] {
        std::fs::set_permissions(d, PermissionsExt::from_mode(0o1777)).unwrap();
    }
    let plant = |p: &Path| {
        let l = std::os::unix::net::UnixListener::bind(p).unwrap();
        std::fs::set_permissions(p, PermissionsExt::from_mode(0o666)).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    };
    let submit = plant(&trap.join("var/public/submit.sock"));
    let admin = plant(&trap.join("var/admin.sock"));
    let bin = Path::new(env!("CARGO_BIN_EXE_sluice"));
    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(bin, &sendmail).unwrap();
    let runs: [(Command, &[u8]); 3] = [
        (
            as_user(&user, &sendmail, &["-i", "boss@remote.test"]),
            b"Subject: payroll\n\nsalary\n",
        ),
        (as_user(&user, &sendmail, &["-bp"]), b""),
        (
            {
                let mut c = Command::new(bin);
                c.args(["queue", "list"]);
                c
            },
            b"",
        ),
    ];
    for (mut cmd, input) in runs {
        cmd.current_dir(&trap).env_remove("SLUICE_CONFIG");
        let (code, out, err) = output_of(cmd, input);
        assert_ne!(
            code, 0,
            "no daemon runs here, yet it succeeded: {out} {err}"
        );
        assert!(!err.contains("./var"), "a relative socket: {err}");
        assert!(
            err.contains("/var/spool/sluice/") || err.contains("/etc/sluice/"),
            "names the absolute place it tried: {err}"
        );
    }
    for (name, l) in [("submit", &submit), ("admin", &admin)] {
        assert!(
            matches!(l.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the planted {name} socket got a connection"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_user_can_send_mail_as_themselves_only() {
    need_root();
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
        any_logged(&dir, |e| matches!(
            e,
            Event::SenderReplaced { asked, sender, uid }
                if asked == "ceo@ours.test" && sender == own.as_str() && *uid == user.uid
        )),
        "{}",
        read_log(&dir)
    );
}

/// L1 of the 2026-11-27 review: an ordinary user's mailq lists only the
/// mail they sent; root's lists everything (Postfix lists everything to
/// anyone by default: `queue.mailq_anyone = true` does that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_users_mailq_shows_only_their_own_mail() {
    need_root();
    let user = TestUser::create("q");
    let dir = temp_dir("local-mailq");
    std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A next hop that is not there: the mail waits in the queue.
    let dead = reserve();
    let cfg = config(&dir, Some(dead.addr));
    let conf = client_config(&dir, &cfg.data_dir).display().to_string();
    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    let (server, _) = start(cfg).await;
    let mut root = Command::new(&sendmail);
    root.args([
        "-C",
        &conf,
        "-f",
        "hr-director@ours.test",
        "lawyer@outside.test",
    ]);
    let (code, _, err) = output_of(root, b"Subject: secret\n\nx\n");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_as(
        &user,
        &sendmail,
        &["-C", &conf, "friend@outside.test"],
        b"Subject: mine\n\nx\n",
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run_as(&user, &sendmail, &["-C", &conf, "-bp"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("friend@outside.test"), "their own mail: {out}");
    assert!(
        !out.contains("hr-director") && !out.contains("lawyer@"),
        "another's mail listed to {}: {out}",
        user.name
    );
    let mut root = Command::new(&sendmail);
    root.args(["-C", &conf, "-bp"]);
    let (code, out, err) = output_of(root, b"");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lawyer@outside.test") && out.contains("friend@outside.test"),
        "{out}"
    );
    server.shutdown().await;
}

/// M5 of the 2026-11-27 review: an ordinary local account's mail is
/// DKIM-signed only when its From: is the account's own address; with
/// any other From: (`ceo@` of a domain we sign for) it goes unsigned, and
/// the event says why. Root's mail is signed whatever its From:.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_user_gets_our_signature_only_on_their_own_from() {
    need_root();
    let user = TestUser::create("d");
    let dir = temp_dir("local-dkim");
    std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let key = dir.join("dkim.pem");
    sluice::tools::keygen::keygen(
        sluice::tools::keygen::Algorithm::Ed25519,
        "mx.test",
        "s1",
        &key,
    )
    .unwrap();
    let sink = recording_sink().await;
    let mut cfg = config(&dir, Some(sink.addr));
    cfg.dkim.keys.push(dkim_key("mx.test", "s1", key));
    let conf = client_config(&dir, &cfg.data_dir).display().to_string();
    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    let (server, _) = start(cfg).await;
    let own = format!("{}@mx.test", user.name);
    let forged = b"From: CEO <ceo@mx.test>\nSubject: urgent wire transfer\n\nx\n";
    let (code, _, err) = run_as(&user, &sendmail, &["-C", &conf, "t1@ours.test"], forged);
    assert_eq!(code, 0, "{err}");
    let mine = format!("From: Me <{own}>\nSubject: mine\n\nx\n");
    let (code, _, err) = run_as(
        &user,
        &sendmail,
        &["-C", &conf, "t2@ours.test"],
        mine.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    let mut root = Command::new(&sendmail);
    root.args(["-C", &conf, "t3@ours.test"]);
    let (code, _, err) = output_of(root, forged);
    assert_eq!(code, 0, "{err}");
    assert!(
        wait_until(15, || sink.count() == 3).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let signed = |to: &str| {
        let m = sink
            .messages()
            .into_iter()
            .find(|m| m.recipients == [to])
            .unwrap();
        String::from_utf8_lossy(&m.body).contains("DKIM-Signature:")
    };
    assert!(
        !signed("t1@ours.test"),
        "a local user's ceo@ From: was signed"
    );
    assert!(signed("t2@ours.test"), "the user's own From: is signed");
    assert!(signed("t3@ours.test"), "root's mail is signed");
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::DkimNotSigned { cause, from, user, .. }
                if cause == "local_from" && from == "ceo@mx.test" && user == own.as_str()
        )),
        "{}",
        read_log(&dir)
    );
}

/// A daemon that signs for `domains` (an Ed25519 key each), delivering to
/// `sink`, with `tweak` applied; (the server, the client configuration's
/// path, the sendmail link).
async fn signing_daemon(
    dir: &Path,
    sink: SocketAddr,
    domains: &[&str],
    tweak: impl FnOnce(&mut sluice::config::Config),
) -> (Server, String, std::path::PathBuf) {
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cfg = config(dir, Some(sink));
    for domain in domains {
        let key = dir.join(format!("{domain}.pem"));
        sluice::tools::keygen::keygen(
            sluice::tools::keygen::Algorithm::Ed25519,
            domain,
            "s1",
            &key,
        )
        .unwrap();
        cfg.dkim.keys.push(dkim_key(domain, "s1", key));
    }
    tweak(&mut cfg);
    let conf = client_config(dir, &cfg.data_dir).display().to_string();
    let sendmail = dir.join("sendmail");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &sendmail).unwrap();
    let (server, _) = start(cfg).await;
    (server, conf, sendmail)
}

/// Whether the message the sink got for `to` carries our signature.
fn signed_for(sink: &Sink, to: &str) -> bool {
    let m = sink
        .messages()
        .into_iter()
        .find(|m| m.recipients == [to])
        .unwrap_or_else(|| panic!("nothing for {to}"));
    String::from_utf8_lossy(&m.body).contains("DKIM-Signature:")
}

/// Issue 38 (with M5 of the 2026-11-27 review): with
/// `[restrictions] sender_login_maps`, a local account's mail is signed
/// for a From: the map gives that login, looked up as Postfix's
/// smtpd_sender_login_maps are (the full address, then without its
/// extension, then `@domain`), the owners a list separated by commas and
/// blanks; a From: the map gives someone else or does not list, or a
/// From: naming several authors, goes unsigned, with the event saying
/// why. The account's own login@hostname is signed as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_users_signature_follows_the_sender_login_map() {
    need_root();
    let user = TestUser::create("m");
    let dir = temp_dir("local-dkim-map");
    let sink = recording_sink().await;
    let logins = dir.join("logins");
    std::fs::write(
        &logins,
        format!(
            "# address  logins that own it\n\
             sales@ours.test  someone,{0} other\n\
             @team.test  nobody {0}\n\
             ceo@ours.test  boss\n",
            user.name.to_uppercase()
        ),
    )
    .unwrap();
    let domains = ["mx.test", "ours.test", "team.test", "victim.test"];
    let (server, conf, sendmail) = signing_daemon(&dir, sink.addr, &domains, |cfg| {
        cfg.recipient_delimiter = "+".into();
        cfg.restrictions.sender_login_maps = vec![format!("texthash:{}", logins.display())];
    })
    .await;
    let own = format!("{}@mx.test", user.name);
    let sends = [
        ("t1@ours.test", "Sales <sales@ours.test>".to_string()),
        ("t2@ours.test", "sales+news@ours.test".to_string()),
        ("t3@ours.test", "Team <Anyone@team.test>".to_string()),
        ("t4@ours.test", "CEO <ceo@ours.test>".to_string()),
        ("t5@ours.test", "ceo@victim.test".to_string()),
        ("t6@ours.test", format!("Me <{own}>")),
        (
            "t7@ours.test",
            "ceo@ours.test, Sales <sales@ours.test>".to_string(),
        ),
    ];
    for (to, from) in &sends {
        let msg = format!("From: {from}\nSubject: to {to}\n\nx\n");
        let (code, _, err) = run_as(&user, &sendmail, &["-C", &conf, to], msg.as_bytes());
        assert_eq!(code, 0, "{to}: {err}");
    }
    assert!(
        wait_until(15, || sink.count() == sends.len() as u64).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    let signed: Vec<bool> = sends.iter().map(|(to, _)| signed_for(&sink, to)).collect();
    assert_eq!(
        signed,
        [true, true, true, false, false, true, false],
        "signed, in order: the map's address, its extension, its @domain, \
         another login's, unlisted, the account's own, two authors\n{}",
        read_log(&dir)
    );
    let not_signed = |want_cause: &str, want_from: &str| {
        any_logged(&dir, |e| {
            matches!(
                e,
                Event::DkimNotSigned { cause, from, user, .. }
                    if cause == want_cause && from == want_from && user == own.as_str()
            )
        })
    };
    assert!(
        not_signed("local_from", "ceo@ours.test"),
        "{}",
        read_log(&dir)
    );
    assert!(
        not_signed("local_from", "ceo@victim.test"),
        "{}",
        read_log(&dir)
    );
    assert!(
        not_signed("local_from_authors", "sales@ours.test"),
        "{}",
        read_log(&dir)
    );
}

/// A sender login map that cannot answer (a `tcp:` table whose server is
/// down, after the text table) leaves the mail unsigned, never refused,
/// with the cause logged; what the text table answers first, and the
/// account's own address, are still signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_login_map_that_is_down_leaves_the_mail_unsigned() {
    need_root();
    let user = TestUser::create("f");
    let dir = temp_dir("local-dkim-down");
    let sink = recording_sink().await;
    let logins = dir.join("logins");
    std::fs::write(&logins, format!("sales@ours.test {}\n", user.name)).unwrap();
    let down = reserve();
    let (server, conf, sendmail) =
        signing_daemon(&dir, sink.addr, &["mx.test", "ours.test"], |cfg| {
            cfg.restrictions.sender_login_maps = vec![
                format!("texthash:{}", logins.display()),
                format!("tcp:{}", down.addr),
            ];
        })
        .await;
    let own = format!("{}@mx.test", user.name);
    let sends = [
        ("t1@ours.test", "sales@ours.test".to_string()),
        ("t2@ours.test", "support@ours.test".to_string()),
        ("t3@ours.test", own.clone()),
    ];
    for (to, from) in &sends {
        let msg = format!("From: {from}\nSubject: to {to}\n\nx\n");
        let (code, _, err) = run_as(&user, &sendmail, &["-C", &conf, to], msg.as_bytes());
        assert_eq!(code, 0, "{to}: a map that is down refused the mail: {err}");
    }
    assert!(
        wait_until(15, || sink.count() == sends.len() as u64).await,
        "{}",
        read_log(&dir)
    );
    server.shutdown().await;
    drop(down);
    let signed: Vec<bool> = sends.iter().map(|(to, _)| signed_for(&sink, to)).collect();
    assert_eq!(signed, [true, false, true], "{}", read_log(&dir));
    assert!(
        any_logged(&dir, |e| matches!(
            e,
            Event::DkimNotSigned { cause, from, .. }
                if cause == "sender_login_map_failed" && from == "support@ours.test"
        )),
        "{}",
        read_log(&dir)
    );
}
