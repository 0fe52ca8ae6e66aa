//! Postfix's table search order, held to the real Postfix's
//! (`common::postfix`): the same table file, the same addresses, the
//! same answers.
//!
//! - Addresses: a Postfix with `virtual_alias_maps = texthash:FILE`
//!   where every key maps to its own target at a discarded domain, so a
//!   delivery line's `to=` says which key was found (and the extension
//!   it put back), and `orig_to=` what was asked. Sluice's answer:
//!   `search::address_keys`, the first key in `text::parse`'s map (keys
//!   folded to lower case, as texthash does), `search::mapped_address`.
//!   A recipient no key finds is refused at RCPT (`550 5.1.1`) in a
//!   virtual alias domain, and delivered as itself elsewhere. Seeded
//!   addresses (with and without extensions, the names Postfix never
//!   splits, empty local parts, upper case, quoted local parts, local
//!   and virtual domains)
//!   for `recipient_delimiter` `+` and `+-`, and `-+s` with
//!   `owner_request_special = no`.
//! - Domains: `relay_domains = texthash:FILE` with an `example.com` and
//!   a `.other.org` entry, `parent_domain_matches_subdomains` as by
//!   default (relay_domains in it) and empty; RCPT from outside
//!   mynetworks to subdomains: `250` (relay allowed) or `554 5.7.1`;
//!   Sluice's answer: any of `search::domain_keys` in the parsed map.
//!
//! Every comparison also checks it is not vacuous: each kind of key
//! (full, `user@domain`, `user+ext`, `user`, `@domain`, none) was found
//! by Postfix in some case.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sluice::tables::search::{self, Rules};
use sluice::tables::text;
use sluice_proto::address::parse_mailbox;

use crate::common::postfix::{Delivery, Postfix};

/// xorshift64*: the same addresses for the same seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// The virtual alias table's keys, in the file's spelling (upper case
/// included: texthash folds it). Each maps to `tN@hit.test`, N its
/// place, but for the `@domain` values that keep the local part.
const ALIAS_KEYS: [&str; 29] = [
    "user+ext@virt.test",
    "user@virt.test",
    "@virt.test",
    "first-last@virt.test",
    "first@virt.test",
    "owner@virt.test",
    "list@virt.test",
    "x@virt.test",
    "postmaster@virt2.test",
    "mailer@virt2.test",
    "Dave@Virt2.TEST",
    "+foo@virt2.test",
    "\"a b\"@virt2.test",
    "\"e f\"@virt2.test",
    "g@virt2.test",
    "@virt3.test",
    "po@virt3.test",
    "double@virt3.test",
    "alice+tag",
    "bob",
    "carol@local.test",
    "carol+ext",
    "dan+ext",
    "dan",
    "\"k l\"",
    "@local2.test",
    "eve@far.test",
    "@wild.test",
    "sam@wild.test",
];

const VIRTUAL_DOMAINS: &str = "virt.test, virt2.test, virt3.test, wild.test";
/// `mydestination`, and `myhostname` (= `myorigin`): local all.
const LOCAL_DOMAINS: [&str; 3] = ["local.test", "local2.test", "pf.test"];

fn alias_table() -> String {
    ALIAS_KEYS
        .iter()
        .enumerate()
        .map(|(n, key)| match *key {
            "@wild.test" => format!("{key} @hit2.test\n"),
            "sam@wild.test" => format!("{key}\t@hit3.test\n"),
            _ => format!("{key}  t{n}@hit.test\n"),
        })
        .collect()
}

/// The addresses asked: the cases each rule needs, then seeded ones.
fn addresses(seed: u64) -> Vec<String> {
    let fixed = [
        "user+ext@virt.test",
        "user+other@virt.test",
        "USER+Other@VIRT.test",
        "first-last@virt.test",
        "first-other@virt.test",
        "owner-x@virt.test",
        "x-request@virt.test",
        "list-request@virt.test",
        "mailer-daemon@virt2.test",
        "postmaster+x@virt2.test",
        "+foo@virt2.test",
        "\"e f\"@virt2.test",
        "g@virt2.test",
        "+bar@virt3.test",
        "postmaster@virt3.test",
        "double-bounce@virt3.test",
        "Double-Bounce+x@virt3.test",
        "user+@virt3.test",
        "alice+tag@local.test",
        "alice+tag@virt2.test",
        "bob+x@local.test",
        "bob@pf.test",
        "bob@virt2.test",
        "bob+x@local2.test",
        "carol+ext@local.test",
        "dan+ext@local.test",
        "dan+other@local2.test",
        "zed+x@local2.test",
        "Eve+X@far.test",
        "Sam+x@wild.test",
        "other+x@wild.test",
        "nobody@local.test",
        "\"a b\"@virt2.test",
        "\"A B\"@virt2.test",
        "\"e f+x\"@virt2.test",
        "\"g+h i\"@virt2.test",
        "\"c+d\"@virt.test",
        "\"user+ext\"@virt.test",
        "\"sam+y z\"@wild.test",
        "\"o p\"@wild.test",
        "\"k l+x\"@local.test",
    ];
    let bases = [
        "user",
        "first",
        "owner",
        "list",
        "x",
        "postmaster",
        "mailer",
        "dave",
        "bob",
        "alice",
        "carol",
        "eve",
        "sam",
        "nobody",
        "",
        "foo",
        "mailer-daemon",
        "owner-x",
        "x-request",
        "list-request",
        "first-last",
        "double-bounce",
        "dan",
        "zed",
    ];
    let extensions = [
        "", "", "+ext", "+Ext", "-ext", "+tag", "+", "-", "+a-b", "-a+b", "++", "+foo",
    ];
    let domains = [
        "virt.test",
        "virt2.test",
        "virt3.test",
        "local.test",
        "local2.test",
        "pf.test",
        "far.test",
        "wild.test",
        "Local.TEST",
        "VIRT.test",
    ];
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut all: BTreeSet<String> = fixed.iter().map(|a| a.to_string()).collect();
    assert_eq!(all.len(), fixed.len(), "each fixed case once");
    let mut out: Vec<String> = fixed.iter().map(|a| a.to_string()).collect();
    while out.len() < 80 {
        let local = format!("{}{}", rng.pick(&bases), rng.pick(&extensions));
        let local = match rng.below(5) {
            0 => local.to_uppercase(),
            1 => local.get(..1).unwrap_or("").to_uppercase() + local.get(1..).unwrap_or(""),
            _ => local,
        };
        let address = format!("{local}@{}", rng.pick(&domains));
        // smtpd refuses a local part that starts with `-` (501 5.1.3: it
        // could pass for a command's option): not a table's question.
        if !local.is_empty() && !local.starts_with('-') && all.insert(address.clone()) {
            out.push(address);
        }
    }
    out
}

/// `raw` as Sluice holds an address it received (sluice-proto's
/// canonical form, Postfix's external form: the local part quoted only
/// when it is not a dot-string), its domain as written.
fn canonical(raw: &str) -> String {
    let mailbox = parse_mailbox(raw).unwrap_or_else(|e| panic!("{raw}: {e:?}"));
    let domain = raw.rsplit_once('@').map_or("", |(_, d)| d);
    format!("{}@{domain}", mailbox.local)
}

/// Which key found the address (or none): the kinds the comparison must
/// all have seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Found {
    Full,
    Bare,
    LocalPart,
    BareLocalPart,
    AtDomain,
    Nothing,
}

/// Sluice's answer for `address`: the address it is rewritten to (none:
/// no key found), and which key found it.
fn ours(
    address: &str,
    map: &HashMap<String, String>,
    delimiters: &str,
    owner_request_special: bool,
) -> (Option<String>, Found) {
    let domain = address.rsplit_once('@').map_or("", |(_, d)| d);
    let rules = Rules {
        delimiters,
        local: LOCAL_DOMAINS.contains(&domain.to_ascii_lowercase().as_str()),
        owner_request_special,
    };
    for key in search::address_keys(address, &rules) {
        if let Some(found) = map.get(&key.text.to_ascii_lowercase()) {
            let kind = match (key.partial, key.text.find('@'), &key.extension) {
                (false, _, _) => Found::Full,
                (_, Some(0), _) => Found::AtDomain,
                (_, Some(_), _) => Found::Bare,
                (_, None, None) => Found::LocalPart,
                (_, None, Some(_)) => Found::BareLocalPart,
            };
            let extension = key.extension.as_deref();
            let to = search::mapped_address(address, found, extension, true);
            return (Some(to), kind);
        }
    }
    (None, Found::Nothing)
}

/// Postfix's answer for each address: what it was delivered to, or none
/// when no key found it (refused at RCPT in a virtual alias domain,
/// delivered as itself elsewhere). Twenty recipients a message: each
/// delivery line says which it is by its `orig_to` (or its `to`, when
/// nothing rewrote it).
async fn theirs(postfix: &Postfix, addresses: &[String]) -> Vec<Option<String>> {
    let mut session = postfix.session().await;
    let mut asked = HashMap::new();
    for message in messages(addresses) {
        let sent = session.send("sender@client.test", &message).await;
        for (address, reply) in message.iter().zip(sent.rcpts) {
            asked.insert(address.clone(), (reply, sent.queue_id.clone()));
        }
    }
    let mut queued: Vec<String> = asked.values().filter_map(|(_, q)| q.clone()).collect();
    queued.sort();
    queued.dedup();
    let deliveries = postfix.wait_done(&queued, 30).await;
    let answers: Vec<Option<String>> = addresses
        .iter()
        .map(|address| match &asked[address] {
            (reply, Some(qid)) if reply.code == 250 => {
                delivered(&deliveries, qid, &canonical(address))
            }
            (reply, _) => {
                let refused = (reply.code, reply.enhanced.as_deref());
                assert_eq!(refused, (550, Some("5.1.1")), "{address}: {reply:?}");
                let domain = address.rsplit_once('@').unwrap().1.to_ascii_lowercase();
                let virtual_domain = VIRTUAL_DOMAINS.split(", ").any(|d| d == domain);
                assert!(virtual_domain, "{address}: {reply:?}");
                None
            }
        })
        .collect();
    let taken = asked.values().filter(|(r, _)| r.code == 250).count();
    assert_eq!(taken, deliveries.len(), "one delivery each: {deliveries:?}");
    answers
}

/// The addresses in messages of at most twenty recipients, two that
/// differ only in case never in the same one: cleanup drops a recipient
/// whose original and final addresses both equal another's but for case.
fn messages(addresses: &[String]) -> Vec<Vec<String>> {
    let mut messages: Vec<Vec<String>> = Vec::new();
    for address in addresses {
        let fits = |m: &&mut Vec<String>| {
            m.len() < 20
                && !m
                    .iter()
                    .any(|a| canonical(a).eq_ignore_ascii_case(&canonical(address)))
        };
        match messages.iter_mut().find(fits) {
            Some(message) => message.push(address.clone()),
            None => messages.push(vec![address.clone()]),
        }
    }
    messages
}

/// What `address`, a recipient of message `qid`, was delivered to: none
/// when to itself.
fn delivered(deliveries: &[Delivery], qid: &str, address: &str) -> Option<String> {
    let mut lines = deliveries
        .iter()
        .filter(|d| d.queue_id == qid && d.orig_to.as_deref().unwrap_or(&d.to) == address);
    let d = lines
        .next()
        .unwrap_or_else(|| panic!("{address}: no delivery in {qid}"));
    assert!(lines.next().is_none(), "{address}: two deliveries");
    assert_eq!(
        (d.status.as_str(), d.dsn.as_str()),
        ("sent", "2.0.0"),
        "{d:?}"
    );
    d.orig_to.as_ref().map(|_| d.to.clone())
}

/// The whole comparison for one `recipient_delimiter` and
/// `owner_request_special`.
async fn aliases_compare(delimiters: &str, owner_request_special: bool, seed: u64) {
    let table = alias_table();
    let ownreq = if owner_request_special { "yes" } else { "no" };
    let postfix = Postfix::start_with(
        &[("virtual", &table)],
        &[
            ("myhostname", "pf.test"),
            ("mydestination", "local.test, local2.test"),
            ("virtual_alias_domains", VIRTUAL_DOMAINS),
            ("virtual_alias_maps", "texthash:$config_directory/virtual"),
            ("recipient_delimiter", delimiters),
            ("owner_request_special", ownreq),
        ],
        "",
    );
    let (map, warnings) = text::parse(&table);
    assert!(warnings.is_empty(), "{warnings:?}");
    let addresses = addresses(seed);
    let answers = theirs(&postfix, &addresses).await;
    let mut seen = BTreeMap::new();
    let mut wrong = Vec::new();
    for (address, theirs) in addresses.iter().zip(answers) {
        let canonical = canonical(address);
        let (ours, kind) = ours(&canonical, &map, delimiters, owner_request_special);
        if ours != theirs {
            wrong.push(format!(
                "{address} ({canonical}): postfix {theirs:?}, sluice {ours:?}"
            ));
        }
        *seen.entry(kind).or_insert(0) += 1;
    }
    assert!(
        wrong.is_empty(),
        "recipient_delimiter {delimiters:?}, owner_request_special {ownreq}:\n{}",
        wrong.join("\n")
    );
    let kinds: Vec<Found> = seen.keys().copied().collect();
    assert_eq!(
        kinds,
        [
            Found::Full,
            Found::Bare,
            Found::LocalPart,
            Found::BareLocalPart,
            Found::AtDomain,
            Found::Nothing
        ],
        "every kind of key found in some case: {seen:?}"
    );
}

#[tokio::test]
async fn addresses_find_the_keys_postfix_finds_with_plus() {
    aliases_compare("+", true, 1).await;
}

#[tokio::test]
async fn addresses_find_the_keys_postfix_finds_with_plus_and_dash() {
    aliases_compare("+-", true, 2).await;
}

/// With `s` a delimiter too: `postmaster` is never split (nor would be
/// without it: a reserved name shows only with a delimiter among its
/// letters).
#[tokio::test]
async fn addresses_find_the_keys_postfix_finds_without_owner_request_special() {
    aliases_compare("-+s", false, 3).await;
}

/// The relay table: a parent entry and a dot entry, and one in between.
///
/// In lower case: Postfix opens a table named in a domain list
/// (match_list) without case folding, as "databases are supposed to fold
/// case upon creation" (postmap folds a `hash:` file's keys), and
/// texthash does not fold on its own: a `Sub.Third.NET` entry of a
/// texthash file in `relay_domains` never matches (seen here; Sluice's
/// text tables fold always, as a `hash:` file postmap made does).
const RELAY_TABLE: &str = "example.com OK\n.other.org OK\nsub.third.net OK\n";

fn relay_domains() -> Vec<String> {
    let prefixes = ["", "sub.", "a.b.", "Sub.", "x-y.", "deep.er."];
    let bases = [
        "example.com",
        "EXAMPLE.com",
        "other.org",
        "com",
        "org",
        "notexample.com",
        "example.com.evil.test",
        "third.net",
        "sub.third.net",
        "net",
    ];
    let mut out = Vec::new();
    for base in bases {
        for prefix in prefixes {
            out.push(format!("{prefix}{base}"));
        }
    }
    out
}

/// `relay_domains` with `parent_domain_matches_subdomains` naming it
/// (`parent`: the default) or not.
async fn relay_compare(parent: bool) {
    let mut main_cf = vec![
        ("relay_domains", "texthash:$config_directory/relay"),
        ("mynetworks", "127.0.0.2/32"),
        ("smtpd_relay_restrictions", "reject_unauth_destination"),
    ];
    if !parent {
        main_cf.push(("parent_domain_matches_subdomains", ""));
    }
    let postfix = Postfix::start_with(&[("relay", RELAY_TABLE)], &main_cf, "");
    let (map, _) = text::parse(RELAY_TABLE);
    let domains = relay_domains();
    let rcpts: Vec<String> = domains.iter().map(|d| format!("rcpt@{d}")).collect();
    let replies = postfix
        .session_from("127.0.0.1")
        .await
        .rcpt_replies("sender@client.test", &rcpts)
        .await;
    let mut wrong = Vec::new();
    let mut relayed = 0;
    for (domain, reply) in domains.iter().zip(&replies) {
        let theirs = match (reply.code, reply.enhanced.as_deref()) {
            (250, _) => true,
            (554, Some("5.7.1")) => false,
            _ => panic!("{domain}: {reply:?}"),
        };
        let lower = domain.to_ascii_lowercase();
        let ours = search::domain_keys(&lower, parent)
            .iter()
            .any(|k| map.contains_key(*k));
        if ours != theirs {
            wrong.push(format!("{domain}: postfix relays {theirs}, sluice {ours}"));
        }
        relayed += usize::from(theirs);
    }
    assert!(
        wrong.is_empty(),
        "parent_domain_matches_subdomains {parent}:\n{}",
        wrong.join("\n")
    );
    assert!(
        relayed > 5 && relayed + 5 < domains.len(),
        "{relayed} of {} relayed: not a comparison",
        domains.len()
    );
}

#[tokio::test]
async fn domains_match_relay_domains_as_postfix_with_parent_matching() {
    relay_compare(true).await;
}

#[tokio::test]
async fn domains_match_relay_domains_as_postfix_without_parent_matching() {
    relay_compare(false).await;
}
