//! Restriction lists, differential: each setup is a Postfix main.cf
//! fragment (restriction lists, classes, codes, table files); a real
//! Postfix 3.7 runs it, and Sluice runs the same fragment translated
//! parameter by parameter (`sluice_of`: `smtpd_recipient_restrictions` →
//! `restrictions.recipient`, the same table files as Postfix specs).
//! Every conversation is replayed against both, from the same loopback
//! client address, and every reply (greeting, HELO, MAIL, RCPT, DATA, end
//! of data) must have the same code and enhanced status code.
//!
//! Both know the same world: mynetworks `127.0.0.1/32` (clients from
//! 127.0.0.7 are strangers), `local.test` a virtual mailbox domain with
//! `user@local.test` and `other@local.test`, `relay.test` a relay domain,
//! `recipient_delimiter = +`.
//!
//! Where Sluice differs on purpose, the case is listed in `DIFFERENT`
//! with the reason (docs/CONFIG.md says more).

mod more;
mod rcpt_maps;
mod run;
mod sasl;

use run::*;

const ACCESS: (&str, &str) = (
    "access",
    "\
ok@ext.test OK
reject@ext.test REJECT
text@ext.test REJECT go away
defer@ext.test DEFER
dunno@ext.test DUNNO
n550@ext.test 550 5.7.9 custom
n450@ext.test 450 later
bare550@ext.test 550 not here
dip@ext.test DEFER_IF_PERMIT not yet
dir@ext.test DEFER_IF_REJECT maybe
blocked.test REJECT domain
sub.parent.test OK
parent.test REJECT parent
user+tag@ext.test REJECT tagged
plain@ext.test REJECT plain
who@ REJECT localpart
<> REJECT null
class@ext.test strict
class2@ext.test permissive
disc@ext.test DISCARD
prep@ext.test PREPEND X-Test: yes
warn@ext.test WARN looked
hold@ext.test HOLD
n421@ext.test 421 4.3.2 bye
dsn@ext.test REJECT 5.7.9 with its own code
dsn4@ext.test DEFER_IF_PERMIT 4.2.0 later
",
);

const CLIENTS: (&str, &str) = (
    "clients",
    "\
127.0.0.7 REJECT no seven
127.0.0.8 OK
127.0.0 DUNNO
127.0.0.9 DEFER busy
127.0.0.10 reject_unauth_destination
",
);

const CIDR: (&str, &str) = ("net.cidr", "127.0.0.16/28 REJECT cidr\n127.0.0.0/8 DUNNO\n");

const HELOS: (&str, &str) = (
    "helos",
    "bad.example REJECT bad helo\nexample.net REJECT parent helo\ngood.example OK\n",
);

const LOGINS: (&str, &str) = ("logins", "owned@ext.test alice\n@team.test bob, carol\n");

/// The usual client: EHLO, then the lines.
const SETUPS: &[Setup] = &[
    Setup {
        name: "relay-default",
        files: &[MAILBOXES],
        main_cf: &[(
            "smtpd_relay_restrictions",
            "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination",
        )],
        convs: &[
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<nobody@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<any@relay.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@sub.relay.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RCPT TO:<user@local.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "DATA"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<nobody@local.test>"]),
        ],
    },
    Setup {
        name: "defer-unauth",
        files: &[MAILBOXES],
        main_cf: &[(
            "smtpd_relay_restrictions",
            "permit_mynetworks, defer_unauth_destination",
        )],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "recipient-access",
        files: &[MAILBOXES, ACCESS],
        main_cf: &[
            ("smtpd_restriction_classes", "strict, permissive"),
            ("strict", "reject_unauth_destination, reject"),
            ("permissive", "permit"),
            (
                "smtpd_recipient_restrictions",
                "check_recipient_access texthash:$config_directory/access, permit_mynetworks, reject_unauth_destination",
            ),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<ok@ext.test>", "RCPT TO:<reject@ext.test>", "RCPT TO:<text@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<defer@ext.test>", "RCPT TO:<dunno@ext.test>", "RCPT TO:<n550@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<n450@ext.test>", "RCPT TO:<bare550@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<dip@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<dir@ext.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<dip@ext.test>", "RCPT TO:<dir@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@blocked.test>", "RCPT TO:<x@sub.blocked.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@sub.parent.test>", "RCPT TO:<x@other.parent.test>", "RCPT TO:<x@parent.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user+tag@ext.test>", "RCPT TO:<plain+x@ext.test>", "RCPT TO:<plain@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<who@far.test>", "RCPT TO:<who+x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<class@ext.test>", "RCPT TO:<class2@ext.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<class@ext.test>", "RCPT TO:<class2@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<OK@EXT.TEST>", "RCPT TO:<Reject@Ext.Test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<disc@ext.test>", "RCPT TO:<prep@ext.test>", "RCPT TO:<warn@ext.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<nobody@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<n421@ext.test>"]),
        ],
    },
    Setup {
        name: "sender-access",
        files: &[MAILBOXES, ACCESS],
        main_cf: &[(
            "smtpd_sender_restrictions",
            "check_sender_access texthash:$config_directory/access",
        )],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<reject@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<ok@ext.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<x@sub.blocked.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<who@anywhere.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<dunno@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<defer@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<dip@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<dir@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<x@far.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<reject@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "sender-access-now",
        files: &[MAILBOXES, ACCESS],
        main_cf: &[
            ("smtpd_delay_reject", "no"),
            ("smtpd_sender_restrictions", "check_sender_access texthash:$config_directory/access"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<reject@ext.test>", "MAIL FROM:<ok@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RSET", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<dip@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "client-access",
        files: &[MAILBOXES, CLIENTS, CIDR],
        main_cf: &[(
            "smtpd_client_restrictions",
            "check_client_access texthash:$config_directory/clients, check_client_access cidr:$config_directory/net.cidr",
        )],
        convs: &[
            c("127.0.0.7", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c("127.0.0.8", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<x@far.test>"]),
            c("127.0.0.9", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c("127.0.0.10", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<x@far.test>"]),
            c("127.0.0.11", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c("127.0.0.20", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c("127.0.0.1", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "client-access-now",
        files: &[MAILBOXES, CLIENTS],
        main_cf: &[
            ("smtpd_delay_reject", "no"),
            ("smtpd_client_restrictions", "check_client_access texthash:$config_directory/clients"),
        ],
        convs: &[
            c("127.0.0.8", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c("127.0.0.11", &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "helo",
        files: &[MAILBOXES, HELOS],
        main_cf: &[(
            "smtpd_helo_restrictions",
            "check_helo_access texthash:$config_directory/helos, reject_invalid_helo_hostname, reject_non_fqdn_helo_hostname",
        )],
        convs: &[
            c(OUT, &["EHLO bad.example", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO x.example.net", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO good.example", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO localhost", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO bad..name", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO [127.0.0.7]", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO 12345", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO -dash.example", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["HELO mail.good.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO under_score.example", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(IN, &["EHLO localhost", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "non-fqdn",
        files: &[MAILBOXES],
        main_cf: &[(
            "smtpd_recipient_restrictions",
            "reject_non_fqdn_sender, reject_non_fqdn_recipient, permit_mynetworks, reject_unauth_destination",
        )],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@localhost>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@localhost>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@[127.0.0.7]>", "RCPT TO:<user@local.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@localhost>", "RCPT TO:<x@far.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@nodots>"]),
        ],
    },
    Setup {
        name: "generic",
        files: &[MAILBOXES],
        main_cf: &[
            ("smtpd_client_restrictions", "permit_mynetworks, defer_if_permit"),
            ("smtpd_recipient_restrictions", "permit_mynetworks, reject_unauth_destination, permit"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
        ],
    },
    Setup {
        name: "defer-if-reject",
        files: &[MAILBOXES],
        main_cf: &[
            ("smtpd_client_restrictions", "defer_if_reject"),
            ("smtpd_recipient_restrictions", "permit_mynetworks, reject_unauth_destination"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<x@far.test>"]),
        ],
    },
    Setup {
        name: "warn-if-reject",
        files: &[MAILBOXES],
        main_cf: &[
            ("smtpd_sender_restrictions", "warn_if_reject, reject_non_fqdn_sender, reject_non_fqdn_recipient"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@localhost>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@nodots>"]),
        ],
    },
    Setup {
        name: "reject-everything",
        files: &[MAILBOXES],
        main_cf: &[
            ("smtpd_client_restrictions", "permit_mynetworks, reject"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "defer-everything",
        files: &[MAILBOXES],
        main_cf: &[("smtpd_helo_restrictions", "defer")],
        convs: &[c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>"])],
    },
    Setup {
        name: "unlisted",
        files: &[MAILBOXES],
        main_cf: &[
            ("smtpd_sender_restrictions", "reject_unlisted_sender"),
            ("smtpd_recipient_restrictions", "reject_unlisted_recipient, permit_mynetworks, reject_unauth_destination"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<nobody@local.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<user@local.test>", "RCPT TO:<other@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<nobody@local.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<nobody@local.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "multi-bounce",
        files: &[MAILBOXES],
        main_cf: &[("smtpd_recipient_restrictions", "reject_multi_recipient_bounce, permit_mynetworks, reject_unauth_destination")],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RCPT TO:<user@local.test>", "RCPT TO:<other@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "RCPT TO:<other@local.test>"]),
        ],
    },
    Setup {
        name: "multi-bounce-data",
        files: &[MAILBOXES],
        main_cf: &[("smtpd_data_restrictions", "reject_multi_recipient_bounce")],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RCPT TO:<user@local.test>", "RCPT TO:<other@local.test>", "DATA"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<>", "RCPT TO:<user@local.test>", "DATA"]),
        ],
    },
    Setup {
        name: "pipelining",
        files: &[MAILBOXES],
        main_cf: &[
            ("smtpd_recipient_restrictions", "reject_unauth_pipelining, permit_mynetworks, reject_unauth_destination"),
            ("smtpd_data_restrictions", "reject_unauth_pipelining"),
        ],
        convs: &[
            c(OUT, &["HELO c.test", "MAIL FROM:<a@ext.test>|RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>|RCPT TO:<user@local.test>"]),
            c(OUT, &["HELO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "DATA"]),
        ],
    },
    Setup {
        name: "login-maps",
        files: &[MAILBOXES, LOGINS],
        main_cf: &[
            ("smtpd_sender_login_maps", "texthash:$config_directory/logins"),
            ("smtpd_sender_restrictions", "reject_unauthenticated_sender_login_mismatch"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<owned@ext.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<x@team.test>", "RCPT TO:<user@local.test>"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<free@ext.test>", "RCPT TO:<user@local.test>"]),
            c(IN, &["EHLO c.test", "MAIL FROM:<owned@ext.test>", "RCPT TO:<user@local.test>"]),
        ],
    },
    Setup {
        name: "data-and-end",
        files: &[MAILBOXES, ACCESS],
        main_cf: &[
            ("smtpd_data_restrictions", "check_sender_access texthash:$config_directory/access"),
            ("smtpd_end_of_data_restrictions", "check_recipient_access texthash:$config_directory/access"),
        ],
        convs: &[
            c(OUT, &["EHLO c.test", "MAIL FROM:<reject@ext.test>", "RCPT TO:<user@local.test>", "DATA"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<user@local.test>", "DATA"]),
            c(OUT, &["EHLO c.test", "MAIL FROM:<dunno@ext.test>", "RCPT TO:<user@local.test>", "DATA"]),
        ],
    },
];

/// Known, deliberate differences: (setup, conversation, line) and why.
const DIFFERENT: &[Known] = &[
    (
        "helo",
        4,
        1,
        "Sluice refuses a HELO name that is not a domain or an address \
         literal at EHLO (501 5.5.4, sluice-proto's parser); Postfix takes \
         it and refuses it later with reject_invalid_helo_hostname",
    ),
    (
        "helo",
        4,
        3,
        "the same: Sluice's session has no HELO name to refuse",
    ),
    (
        "helo",
        7,
        1,
        "as helo #4: `-dash.example` is refused at EHLO",
    ),
    ("helo", 7, 3, "the same"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restriction_lists_decide_as_postfix_does() {
    let mut tally = Tally::default();
    tally.plain(SETUPS, DIFFERENT).await;
    tally.check(95);
}
