//! Access-table answers read as Postfix reads them (issue 38's first
//! piece): each answer of access(5)'s grammar sits in a real Postfix's
//! `check_recipient_access texthash:FILE` under its own address, and the
//! RCPT reply Postfix gives is held to what `receive::access::parse`
//! says the answer means, in the list `check_recipient_access, permit`:
//!
//! - OK, all-numerical, DUNNO, DEFER_IF_REJECT, and the actions that
//!   only mark the message (HOLD, DISCARD, INFO, WARN, PREPEND, FILTER,
//!   REDIRECT, BCC): 250 (the list goes on to `permit`);
//! - REJECT: 554 5.7.1; DEFER: 450 4.7.1; DEFER_IF_PERMIT: 450 4.7.1
//!   (the `permit` after it); `4NN`/`5NN`: that code, with the text's
//!   enhanced code or Postfix's default for the class;
//! - a restriction list (`reject`): its own decision, 554 5.7.1.
//!
//! The restriction lists themselves are issue 38's; this holds the
//! reading of an answer, which every list will share, to Postfix's.

use sluice::receive::access::{parse, Action, Reply};

use crate::common::postfix::Postfix;

/// (answer in the table, Postfix's RCPT reply code and enhanced code).
fn expected(action: &Action) -> (u16, String) {
    let class = |code: u16| format!("{}.7.1", code / 100);
    match action {
        Action::Reject(_) | Action::Restrictions(_) => (554, "5.7.1".into()),
        Action::Defer(_) | Action::DeferIfPermit(_) => (450, "4.7.1".into()),
        Action::Reply(Reply { code, enhanced, .. }) => {
            (*code, enhanced.clone().unwrap_or_else(|| class(*code)))
        }
        _ => (250, "2.1.5".into()),
    }
}

const ANSWERS: &[&str] = &[
    "OK",
    "ok",
    "12345",
    "DUNNO",
    "REJECT",
    "REJECT go away",
    "reject lower case",
    "DEFER",
    "DEFER come back later",
    "DEFER_IF_REJECT maybe",
    "DEFER_IF_PERMIT not yet",
    "550 5.7.1 No thanks",
    "550 not here",
    "450 4.7.0 busy",
    "421 4.3.2 closing",
    "521 5.3.2 never",
    "HOLD for review",
    "DISCARD quietly",
    "INFO noted",
    "WARN watch this",
    "PREPEND X-Access: seen",
    "FILTER smtp:[127.0.0.1]:10025",
    "REDIRECT elsewhere@example.net",
    "BCC archive@example.net",
    "reject",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_mean_what_they_mean_to_postfix() {
    let table: String = ANSWERS
        .iter()
        .enumerate()
        .map(|(i, a)| format!("a{i}@example.com {a}\n"))
        .collect();
    let postfix = Postfix::start_with(
        &[("access", &table)],
        &[
            // Postfix insists on a relay check somewhere; the client
            // (127.0.0.1) passes this one.
            ("mynetworks", "127.0.0.0/8"),
            ("smtpd_relay_restrictions", "permit_mynetworks, reject"),
            (
                "smtpd_recipient_restrictions",
                "check_recipient_access texthash:$config_directory/access, permit",
            ),
        ],
        "",
    );
    let mut differences = Vec::new();
    for (i, answer) in ANSWERS.iter().enumerate() {
        let action = parse(answer).unwrap_or_else(|e| panic!("{answer:?}: {e}"));
        let want = expected(&action);
        let rcpt = [format!("a{i}@example.com")];
        // A session each: a 421 or 521 answer ends Postfix's session.
        let mut session = postfix.session().await;
        let mail = session.cmd("MAIL FROM:<s@example.org>").await;
        assert_eq!(mail.code, 250, "{mail:?}");
        let got = session.cmd(&format!("RCPT TO:<{}>", rcpt[0])).await;
        let got = (got.code, got.enhanced.unwrap_or_default());
        if got != want {
            differences.push(format!(
                "{answer:?} read as {action:?}: Postfix {got:?}, ours {want:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
