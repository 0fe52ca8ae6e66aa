//! The local counts and who is counted.

use super::*;
use crate::intake::{LocalUser, SmtpClient};

fn login(who: &str, messages: u64, recipients: u64) -> Subject {
    Subject {
        kind: Kind::Login,
        who: who.into(),
        messages,
        recipients,
    }
}

const T0: u64 = 1_800_000_000;

#[test]
fn the_message_over_the_limit_contains_the_login_once() {
    let counts = LocalCounts::open(None, Logger::disabled());
    let s = [login("alice", 3, 0)];
    let mut seen = Vec::new();
    for i in 0..5 {
        let (st, _) = counts.count_at(&s, 1, 0, T0 + i);
        seen.push((st[0].messages, st[0].held, st[0].newly));
    }
    assert_eq!(
        seen,
        [
            (1, false, false),
            (2, false, false),
            (3, false, false),
            (4, true, true),
            (5, true, false)
        ]
    );
    // An hour later the counts are gone, the containment is not (until
    // released).
    let (st, _) = counts.count_at(&s, 1, 0, T0 + 3 * 3600);
    assert_eq!((st[0].messages, st[0].held, st[0].newly), (1, true, false));
    let (was, text) = counts.release_now(Kind::Login, "ALICE");
    assert!(was);
    assert_eq!(text.as_deref(), Some(""));
    let (st, _) = counts.count_at(&s, 1, 0, T0 + 3 * 3600 + 1);
    assert_eq!((st[0].messages, st[0].held), (1, false));
}

#[test]
fn recipients_count_over_all_messages_and_containment_lapses() {
    let counts = LocalCounts::open(None, Logger::disabled());
    let s = [login("bob", 0, 10)];
    let (st, _) = counts.count_at(&s, 6, 3600, T0);
    assert!(!st[0].held);
    let (st, text) = counts.count_at(&s, 5, 3600, T0 + 1);
    assert_eq!(
        (st[0].recipients, st[0].held, st[0].newly),
        (11, true, true)
    );
    assert!(text.unwrap().contains("\"until\":1800003601"));
    // Within the hour: still contained; after its hour: free, and the
    // counts of that old hour are gone too.
    assert!(counts.count_at(&s, 0, 3600, T0 + 3000).0[0].held);
    let (st, _) = counts.count_at(&s, 1, 3600, T0 + 3602 + 3600);
    assert_eq!((st[0].held, st[0].recipients), (false, 1));
}

#[test]
fn the_hour_is_six_buckets() {
    let counts = LocalCounts::open(None, Logger::disabled());
    let s = [login("carol", 100, 0)];
    for i in 0..6 {
        counts.count_at(&s, 1, 0, T0 - T0 % BUCKET_SECS + i * BUCKET_SECS);
    }
    // The seventh bucket drops the first.
    let (st, _) = counts.count_at(&s, 1, 0, T0 - T0 % BUCKET_SECS + 6 * BUCKET_SECS);
    assert_eq!(st[0].messages, 6);
}

#[test]
fn containments_survive_a_restart_and_a_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let counts = LocalCounts::open(Some(dir.path().into()), Logger::disabled());
    let s = [login("dave", 1, 0)];
    counts.count_at(&s, 1, 0, T0);
    let (st, text) = counts.count_at(&s, 1, 0, T0 + 1);
    assert!(st[0].newly);
    let mut text = text.unwrap();
    text.push_str("not json\n");
    std::fs::write(dir.path().join(CONTAINED_LIST), text).unwrap();
    let again = LocalCounts::open(Some(dir.path().into()), Logger::disabled());
    let (st, _) = again.count_at(&s, 1, 0, T0 + 2);
    assert_eq!((st[0].messages, st[0].held, st[0].newly), (1, true, false));
}

#[test]
fn a_full_table_counts_no_new_subject_until_old_ones_lapse() {
    let counts = LocalCounts::open(None, Logger::disabled());
    for i in 0..MAX_SUBJECTS {
        counts.count_at(&[login(&format!("u{i}"), 5, 0)], 1, 0, T0);
    }
    let new = [login("late", 5, 0)];
    assert_eq!(counts.count_at(&new, 1, 0, T0).0[0].messages, 0);
    assert_eq!(counts.count_at(&new, 1, 0, T0 + 3600).0[0].messages, 1);
}

fn submission(origin: Origin, sender: &str) -> Submission {
    Submission {
        id: 1,
        origin,
        sender: sender.into(),
        recipients: vec!["r@x.test".into()],
        orig_rcpt: Vec::new(),
        flags: 0,
        dsn: None,
        body: Vec::new(),
        flaws: None,
        hold: None,
        redirect: None,
        bcc: Vec::new(),
        filter: Default::default(),
    }
}

fn smtp(trusted: bool, user: Option<&str>) -> Origin {
    Origin::Smtp(SmtpClient {
        peer: "192.0.2.1:25".parse().unwrap(),
        listener: "127.0.0.1:25".parse().unwrap(),
        helo: "h".into(),
        trusted,
        authenticated: user.is_some(),
        auth_user: user.map(Into::into),
        sender_auth: false,
        dmarc_reject: false,
    })
}

#[test]
fn only_our_own_users_mail_is_counted() {
    let limits = SenderLimits {
        login_messages_per_hour: 5,
        sender_messages_per_hour: 7,
        exempt: vec!["news@ours.test".into()],
        ..Default::default()
    };
    let who = |sub: &Submission| -> Vec<(Kind, String)> {
        subjects(&limits, sub)
            .into_iter()
            .map(|s| (s.kind, s.who))
            .collect()
    };
    let stranger = submission(smtp(false, None), "a@far.test");
    assert!(who(&stranger).is_empty());
    let user = submission(smtp(false, Some("Alice")), "A@Ours.test");
    assert_eq!(
        who(&user),
        [
            (Kind::Login, "alice".into()),
            (Kind::Sender, "a@ours.test".into())
        ]
    );
    let app = submission(smtp(true, None), "app@ours.test");
    assert_eq!(who(&app), [(Kind::Sender, "app@ours.test".into())]);
    let bounce = submission(smtp(true, None), "");
    assert!(who(&bounce).is_empty());
    let news = submission(smtp(true, None), "news@ours.test");
    assert!(who(&news).is_empty());
    let local = Origin::Local {
        uid: Some(1000),
        full_name: None,
        user: LocalUser::Account("eve".into()),
    };
    assert_eq!(who(&submission(local, "eve@ours.test"))[0].1, "eve");
    let root = Origin::Local {
        uid: Some(0),
        full_name: None,
        user: LocalUser::Trusted,
    };
    assert!(who(&submission(root, "root@ours.test")).is_empty());
    assert!(who(&submission(Origin::Notice, "x@ours.test")).is_empty());
}
