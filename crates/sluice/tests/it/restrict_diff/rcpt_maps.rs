//! The rewriting maps at RCPT (issue 39), each setup a Postfix and a
//! Sluice of its own (as restrict_diff.rs): an address that
//! `virtual_alias_maps`, `canonical_maps` or `recipient_canonical_maps`
//! has is known in any domain; a virtual alias domain (Postfix's default
//! `virtual_alias_domains = $virtual_alias_maps`, or listed) is our
//! destination, so strangers may send to it, and an address of it that
//! the maps lack is unknown (`unknown_virtual_alias_reject_code`), also
//! to `reject_unlisted_recipient` and `reject_unlisted_sender`.

use super::run::*;

const E: &str = "EHLO c.test";
const M: &str = "MAIL FROM:<a@ext.test>";
const FAR: &str = "RCPT TO:<x@far.test>";

const VIRTUAL: (&str, &str) = (
    "virtual",
    "\
valias.test anything
info@valias.test user@local.test
sales@valias.test info@valias.test
alias@local.test user@local.test
list@far.test user@local.test
@catch.test other@local.test
catch.test anything
",
);
const CANONICAL: (&str, &str) = ("canonical", "old@local.test user@local.test\n");

const SETUPS: &[Setup] = &[
    Setup {
        name: "virtual-alias-default-domains",
        files: &[MAILBOXES, VIRTUAL],
        main_cf: &[("virtual_alias_maps", "texthash:$config_directory/virtual")],
        convs: &[
            c(
                OUT,
                &[
                    E,
                    M,
                    "RCPT TO:<info@valias.test>",
                    "RCPT TO:<Sales@VALIAS.test>",
                    "RCPT TO:<nobody@valias.test>",
                ],
            ),
            c(
                OUT,
                &[
                    E,
                    M,
                    "RCPT TO:<alias@local.test>",
                    "RCPT TO:<nobody@local.test>",
                    "RCPT TO:<list@far.test>",
                    FAR,
                ],
            ),
            c(
                OUT,
                &[
                    E,
                    M,
                    "RCPT TO:<x@catch.test>",
                    "RCPT TO:<x@sub.catch.test>",
                    "RCPT TO:<info+tag@valias.test>",
                    "DATA",
                ],
            ),
            c(
                IN,
                &[
                    E,
                    M,
                    "RCPT TO:<nobody@valias.test>",
                    "RCPT TO:<list@far.test>",
                    FAR,
                ],
            ),
        ],
    },
    Setup {
        name: "virtual-alias-listed-domains",
        files: &[MAILBOXES, VIRTUAL],
        main_cf: &[
            ("virtual_alias_maps", "texthash:$config_directory/virtual"),
            ("virtual_alias_domains", "valias.test, other.test"),
            ("unknown_virtual_alias_reject_code", "450"),
        ],
        convs: &[
            c(
                OUT,
                &[
                    E,
                    M,
                    "RCPT TO:<info@valias.test>",
                    "RCPT TO:<nobody@valias.test>",
                    "RCPT TO:<x@other.test>",
                ],
            ),
            c(OUT, &[E, M, "RCPT TO:<x@catch.test>", FAR]),
        ],
    },
    Setup {
        name: "virtual-alias-unlisted",
        files: &[MAILBOXES, VIRTUAL],
        main_cf: &[
            ("virtual_alias_maps", "texthash:$config_directory/virtual"),
            ("smtpd_sender_restrictions", "reject_unlisted_sender"),
            (
                "smtpd_recipient_restrictions",
                "reject_unlisted_recipient, permit_mynetworks, reject_unauth_destination",
            ),
        ],
        convs: &[
            c(
                OUT,
                &[
                    E,
                    "MAIL FROM:<nobody@valias.test>",
                    "RCPT TO:<info@valias.test>",
                ],
            ),
            c(
                OUT,
                &[
                    E,
                    "MAIL FROM:<info@valias.test>",
                    "RCPT TO:<nobody@valias.test>",
                    "RCPT TO:<sales@valias.test>",
                ],
            ),
            c(
                IN,
                &[
                    E,
                    M,
                    "RCPT TO:<nobody@valias.test>",
                    "RCPT TO:<alias@local.test>",
                ],
            ),
        ],
    },
    Setup {
        name: "canonical-known",
        files: &[MAILBOXES, CANONICAL],
        main_cf: &[("canonical_maps", "texthash:$config_directory/canonical")],
        convs: &[c(
            OUT,
            &[
                E,
                M,
                "RCPT TO:<old@local.test>",
                "RCPT TO:<new@local.test>",
                "DATA",
            ],
        )],
    },
    Setup {
        name: "recipient-canonical-known",
        files: &[MAILBOXES, CANONICAL],
        main_cf: &[(
            "recipient_canonical_maps",
            "texthash:$config_directory/canonical",
        )],
        convs: &[c(
            OUT,
            &[
                E,
                M,
                "RCPT TO:<old@local.test>",
                "RCPT TO:<old+x@local.test>",
            ],
        )],
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewriting_maps_decide_recipients_as_postfix_does() {
    let mut tally = Tally::default();
    tally.plain(SETUPS, &[]).await;
    tally.check(11);
}
