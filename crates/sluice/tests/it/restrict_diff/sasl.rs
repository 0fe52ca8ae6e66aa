//! The setups that need more than one Postfix and one Sluice: SMTP AUTH
//! through one real Dovecot that both ask (Postfix's
//! `smtpd_sasl_type = dovecot`, Sluice's `[auth] type = "dovecot"`),
//! listeners with lists of their own (master.cf `-o`, Sluice's
//! `[[smtpd.listeners]] restrictions`), and `check_policy_service` with
//! a real postgrey for each (two instances: greylisting keeps state).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sluice::config::listener::{ListenerConfig, ListenerKind};
use sluice::config::restrictions::ListOverrides;

use super::run::*;
use super::ACCESS;
use crate::common::dovecot::AuthServer;
use crate::common::postfix::Postfix;
use crate::common::postgrey::Postgrey;
use crate::common::*;

/// Dovecot's users (logins are lower-cased by it: `%Lu`).
const USERS: &[(&str, &str)] = &[
    ("alice@local.test", "wonderland"),
    ("bob@local.test", "builder"),
    ("carol@local.test", "singer"),
    ("dave@corp.test", "diver"),
];

const LOGINS: (&str, &str) = (
    "logins",
    "owned@ext.test alice@local.test\n\
     @team.test bob@local.test, carol@local.test\n\
     shared@ext.test alice@local.test bob@local.test\n\
     user@local.test carol@local.test\n",
);

const SASL: (&str, &str) = (
    "sasl",
    "alice@local.test REJECT no alice\nbob@local.test OK\ncorp.test REJECT corp\ncarol@ 550 5.7.9 carol\n",
);

const ALICE: &str = "AUTH PLAIN alice@local.test:wonderland";
const BOB: &str = "AUTH PLAIN bob@local.test:builder";
const CAROL: &str = "AUTH PLAIN carol@local.test:singer";
const DAVE: &str = "AUTH PLAIN dave@corp.test:diver";
const WRONG: &str = "AUTH PLAIN alice@local.test:wrong";

const E: &str = "EHLO c.test";
const TO: &str = "RCPT TO:<user@local.test>";
const FAR: &str = "RCPT TO:<x@far.test>";

const SASL_SETUPS: &[Setup] = &[
    Setup {
        name: "sasl-relay",
        files: &[MAILBOXES],
        main_cf: &[],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<a@ext.test>", FAR, TO]),
            c(OUT, &[E, WRONG, "MAIL FROM:<a@ext.test>", FAR, TO]),
            c(OUT, &[E, "AUTH PLAIN nobody@local.test:x", "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, "AUTH PLAIN ALICE@Local.Test:wonderland", BOB, "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, "MAIL FROM:<a@ext.test>", ALICE, FAR]),
            c(OUT, &[E, WRONG, ALICE, "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, "MAIL FROM:<a@ext.test>", FAR]),
            c(IN, &[E, "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, DAVE, "MAIL FROM:<a@ext.test>", "RCPT TO:<x@relay.test>", FAR, "DATA"]),
            c(OUT, &["HELO c.test", ALICE, "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, "AUTH PLAIN", "*", "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, "AUTH CRAM-MD5", "MAIL FROM:<a@ext.test>", FAR]),
            c(OUT, &[E, WRONG, "MAIL FROM:<a@ext.test>", "RCPT TO:<x@relay.test>", TO]),
        ],
    },
    Setup {
        name: "sasl-login-both",
        files: &[MAILBOXES, LOGINS],
        main_cf: &[
            ("smtpd_sender_login_maps", "texthash:$config_directory/logins"),
            ("smtpd_sender_restrictions", "reject_sender_login_mismatch"),
        ],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<x@team.test>", TO]),
            c(OUT, &[E, CAROL, "MAIL FROM:<y@team.test>", TO]),
            c(OUT, &[E, ALICE, "MAIL FROM:<free@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<free@ext.test>", TO]),
            c(OUT, &[E, ALICE, "MAIL FROM:<>", TO]),
            c(OUT, &[E, ALICE, "MAIL FROM:<owned+tag@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<shared@ext.test>", TO, "RSET", "MAIL FROM:<SHARED@EXT.TEST>", TO]),
            c(OUT, &[E, "AUTH PLAIN ALICE@LOCAL.TEST:wonderland", "MAIL FROM:<owned@ext.test>", TO]),
            c(IN, &[E, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, CAROL, "MAIL FROM:<user@local.test>", TO, "RSET", "MAIL FROM:<user+x@local.test>", TO]),
            c(OUT, &[E, WRONG, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<>", TO]),
        ],
    },
    Setup {
        name: "sasl-login-authenticated",
        files: &[MAILBOXES, LOGINS],
        main_cf: &[
            ("smtpd_sender_login_maps", "texthash:$config_directory/logins"),
            ("smtpd_recipient_restrictions", "reject_authenticated_sender_login_mismatch"),
        ],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<free@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, ALICE, "MAIL FROM:<owned@ext.test>", TO]),
        ],
    },
    Setup {
        name: "sasl-login-unauthenticated",
        files: &[MAILBOXES, LOGINS],
        main_cf: &[
            ("smtpd_sender_login_maps", "texthash:$config_directory/logins"),
            ("smtpd_sender_restrictions", "reject_unauthenticated_sender_login_mismatch"),
        ],
        convs: &[
            c(OUT, &[E, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<free@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<z@team.test>", TO]),
        ],
    },
    Setup {
        name: "sasl-login-known",
        files: &[MAILBOXES, LOGINS],
        main_cf: &[
            ("smtpd_sender_login_maps", "texthash:$config_directory/logins"),
            ("smtpd_sender_restrictions", "reject_known_sender_login_mismatch"),
        ],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<free@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<owned@ext.test>", TO]),
            c(OUT, &[E, CAROL, "MAIL FROM:<w@team.test>", TO]),
        ],
    },
    Setup {
        name: "sasl-permit",
        files: &[MAILBOXES],
        main_cf: &[("smtpd_client_restrictions", "permit_sasl_authenticated, permit_mynetworks, reject")],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<a@ext.test>", TO, FAR]),
            c(OUT, &[E, "MAIL FROM:<a@ext.test>", TO]),
            c(OUT, &[E, WRONG, "MAIL FROM:<a@ext.test>", TO]),
            c(IN, &[E, "MAIL FROM:<a@ext.test>", TO]),
        ],
    },
    Setup {
        name: "sasl-access",
        files: &[MAILBOXES, SASL],
        main_cf: &[
            ("smtpd_client_restrictions", "check_sasl_access texthash:$config_directory/sasl"),
            ("smtpd_sender_restrictions", "check_sasl_access texthash:$config_directory/sasl"),
        ],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<a@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<a@ext.test>", TO, FAR]),
            c(OUT, &[E, CAROL, "MAIL FROM:<a@ext.test>", TO]),
            c(OUT, &[E, DAVE, "MAIL FROM:<a@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<a@ext.test>", TO]),
        ],
    },
    Setup {
        name: "sasl-now",
        files: &[MAILBOXES, SASL],
        main_cf: &[
            ("smtpd_delay_reject", "no"),
            ("smtpd_sender_restrictions", "check_sasl_access texthash:$config_directory/sasl, permit_sasl_authenticated, reject"),
        ],
        convs: &[
            c(OUT, &[E, ALICE, "MAIL FROM:<a@ext.test>", TO]),
            c(OUT, &[E, BOB, "MAIL FROM:<a@ext.test>", TO]),
            c(OUT, &[E, "MAIL FROM:<a@ext.test>", TO]),
        ],
    },
];

/// Known differences in these setups.
const DIFFERENT: &[Known] = &[(
    "sasl-relay",
    11,
    2,
    "AUTH with a mechanism Dovecot does not offer: Sluice answers RFC \
     4954's 504 5.5.4 (as with its own table); Postfix passes Dovecot's \
     refusal on as a failed login, 535 5.7.8",
)];

/// Postfix's SASL settings for the Dovecot at `socket`.
fn postfix_sasl(socket: &str) -> [(&str, &str); 4] {
    [
        ("smtpd_sasl_auth_enable", "yes"),
        ("smtpd_sasl_type", "dovecot"),
        ("smtpd_sasl_path", socket),
        ("smtpd_tls_auth_only", "no"),
    ]
}

/// A listener of kind smtp at `listen` with `restrictions`.
fn listener(listen: &str, restrictions: ListOverrides, auth: bool) -> ListenerConfig {
    ListenerConfig {
        listen: listen.parse().unwrap(),
        kind: ListenerKind::Smtp,
        proxy_protocol: false,
        proxy_protocol_from: Vec::new(),
        auth: Some(auth),
        auth_without_tls: auth,
        sender_auth: false,
        dmarc_reject: false,
        restrictions,
        content_checks: Default::default(),
        overrides: Default::default(),
        smtpd_tls_ask_ccert: None,
        content_filter: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_decides_as_postfix_does() {
    let top = temp_dir("restrict-sasl");
    std::fs::set_permissions(top.join("."), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Neither sends `secured` without TLS, and the clients are not on
    // Dovecot's own address: PLAIN must be allowed in the clear.
    let dovecot = AuthServer::start_with(&top, USERS, "disable_plaintext_auth = no");
    let socket = dovecot.socket.display().to_string();
    let mut tally = Tally::default();
    for setup in SASL_SETUPS {
        let dir = temp_dir(&format!("restrict-{}", setup.name));
        write_files(setup, &dir);
        let main = postfix_main(setup, &postfix_sasl(&socket));
        let postfix = Postfix::start_with(setup.files, &main, "");
        let mut cfg = sluice_of(setup, &dir);
        cfg.auth = toml::from_str(&format!(
            "type = \"dovecot\"\ndovecot_path = {socket:?}\nfailure_delay_ms = 0\n"
        ))
        .unwrap();
        cfg.smtpd.client_auth_failure_limit = 1000;
        cfg.smtpd.listen = Vec::new();
        cfg.smtpd
            .listeners
            .push(listener("127.0.0.1:0", ListOverrides::default(), true));
        let (server, addr) = start(cfg).await;
        tally
            .compare(setup, &[postfix.addr], &[addr], DIFFERENT)
            .await;
        drop(server);
    }
    tally.check(52);
}

const LISTENERS: Setup = Setup {
    name: "listeners",
    files: &[MAILBOXES, ACCESS],
    main_cf: &[(
        "smtpd_recipient_restrictions",
        "check_recipient_access texthash:$config_directory/access",
    )],
    convs: &[
        on(
            0,
            OUT,
            &[
                E,
                "MAIL FROM:<a@ext.test>",
                "RCPT TO:<reject@ext.test>",
                TO,
                FAR,
            ],
        ),
        on(
            1,
            OUT,
            &[
                E,
                "MAIL FROM:<a@ext.test>",
                "RCPT TO:<reject@ext.test>",
                TO,
                FAR,
                "RCPT TO:<x@relay.test>",
            ],
        ),
        on(
            1,
            IN,
            &[
                E,
                "MAIL FROM:<a@ext.test>",
                "RCPT TO:<reject@ext.test>",
                TO,
                FAR,
            ],
        ),
        on(2, OUT, &[E, "MAIL FROM:<a@ext.test>", TO]),
        on(
            2,
            IN,
            &[
                E,
                "MAIL FROM:<a@ext.test>",
                TO,
                FAR,
                "RCPT TO:<reject@ext.test>",
            ],
        ),
        on(0, IN, &[E, "MAIL FROM:<a@ext.test>", TO, FAR]),
    ],
};

/// Listener 1's recipient list, listener 2's client and relay lists.
const ONE_RECIPIENT: &str = "permit_mynetworks, reject_unauth_destination, permit";
const TWO_CLIENT: &str = "permit_mynetworks, reject";
const TWO_RELAY: &str = "permit_mynetworks, defer_unauth_destination";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_lists_decide_as_postfix_does() {
    let setup = &LISTENERS;
    let dir = temp_dir("restrict-listeners");
    write_files(setup, &dir);
    let one = format!("smtpd -o {{ smtpd_recipient_restrictions = {ONE_RECIPIENT} }}");
    let two = format!(
        "smtpd -o {{ smtpd_client_restrictions = {TWO_CLIENT} }} \
         -o {{ smtpd_relay_restrictions = {TWO_RELAY} }}"
    );
    let main = postfix_main(setup, &[]);
    let postfix = Postfix::start_listening(setup.files, &main, "", &[&one, &two]);
    let mut cfg = sluice_of(setup, &dir);
    let first = ListOverrides {
        recipient: Some(ONE_RECIPIENT.into()),
        ..Default::default()
    };
    let second = ListOverrides {
        client: Some(TWO_CLIENT.into()),
        relay: Some(TWO_RELAY.into()),
        ..Default::default()
    };
    // Lists are found by the configured address: not the main one's.
    cfg.smtpd
        .listeners
        .push(listener("127.0.0.2:0", first, false));
    cfg.smtpd
        .listeners
        .push(listener("127.0.0.3:0", second, false));
    let (server, _) = start(cfg).await;
    let theirs = [postfix.addr, postfix.listeners[0], postfix.listeners[1]];
    let mut tally = Tally::default();
    tally.compare(setup, &theirs, &server.addrs, &[]).await;
    drop(server);
    tally.check(6);
}

const GREYLIST: Setup = Setup {
    name: "greylist",
    files: &[MAILBOXES, ACCESS],
    main_cf: &[
        ("smtpd_relay_restrictions", ""),
        (
            "smtpd_recipient_restrictions",
            "check_policy_service unix:$config_directory/postgrey/postgrey.sock, \
         check_recipient_access texthash:$config_directory/access, \
         permit_mynetworks, reject_unauth_destination",
        ),
    ],
    convs: &[
        c(
            OUT,
            &[
                E,
                "MAIL FROM:<a@ext.test>",
                TO,
                "RCPT TO:<other@local.test>",
            ],
        ),
        c(
            OUT,
            &[
                E,
                "MAIL FROM:<a@ext.test>",
                TO,
                "RCPT TO:<reject@ext.test>",
                "RCPT TO:<ok@ext.test>",
            ],
        ),
        c(
            OUT,
            &[E, "MAIL FROM:<a@ext.test>", "RCPT TO:<dunno@ext.test>", FAR],
        ),
        c(IN, &[E, "MAIL FROM:<a@ext.test>", TO, FAR]),
        c(
            OUT,
            &[
                E,
                "MAIL FROM:<b@ext.test>",
                "RCPT TO:<n550@ext.test>",
                "RCPT TO:<dir@ext.test>",
            ],
        ),
    ],
};

/// A postgrey in `dir` that Postfix's processes (user `postfix`) reach.
fn postgrey_in(dir: &Path) -> Postgrey {
    // Greylisted for longer than the test: every retry is early.
    let grey = Postgrey::start(dir, 3600);
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(&dir.join("postgrey"), 0o755).unwrap();
    open(&grey.socket, 0o666).unwrap();
    grey
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_service_in_a_list_decides_as_postfix_does() {
    let setup = &GREYLIST;
    let dir = temp_dir("restrict-greylist");
    write_files(setup, &dir);
    let postfix = Postfix::start_with(setup.files, &postfix_main(setup, &[]), "");
    // One postgrey each, in each one's $config_directory.
    let _theirs = postgrey_in(postfix.dir());
    let _ours = postgrey_in(&dir);
    let (server, addr) = start(sluice_of(setup, &dir)).await;
    let mut tally = Tally::default();
    tally.compare(setup, &[postfix.addr], &[addr], &[]).await;
    drop(server);
    tally.check(5);
}
