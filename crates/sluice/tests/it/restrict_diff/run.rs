//! The differential runner shared by the restriction-list setups: a
//! setup's Postfix main.cf fragment and its translation for Sluice
//! (`sluice_of`), one conversation replayed against both, and the tally
//! of replies that differ (code and enhanced code) outside the known
//! differences.
//!
//! Lines are sent as written, but for: `DATA` (a small message follows a
//! `354`), `BDAT` (the same message in one `BDAT n LAST` chunk), `AUTH
//! PLAIN user:password` (sent as `AUTH PLAIN` with its base64 initial
//! response), and `a|b` (sent in one write, replies read for each).

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine;
use sluice::config::hop::NextHop;
use sluice::config::Config;

use crate::common::postfix::{Postfix, Reply};
use crate::common::*;

/// One conversation: the listener (index into the addresses a setup
/// runs with), the client's address, then lines; `HELO x`/`EHLO x`
/// first.
pub struct Conv {
    pub listener: usize,
    pub from: &'static str,
    pub lines: &'static [&'static str],
}

pub struct Setup {
    pub name: &'static str,
    pub files: &'static [(&'static str, &'static str)],
    pub main_cf: &'static [(&'static str, &'static str)],
    pub convs: &'static [Conv],
}

/// A known, deliberate difference: (setup, conversation, step) and why.
pub type Known = (&'static str, usize, usize, &'static str);

pub const fn c(from: &'static str, lines: &'static [&'static str]) -> Conv {
    Conv {
        listener: 0,
        from,
        lines,
    }
}

/// A conversation on the setup's listener `listener`.
pub const fn on(listener: usize, from: &'static str, lines: &'static [&'static str]) -> Conv {
    Conv {
        listener,
        from,
        lines,
    }
}

pub const OUT: &str = "127.0.0.7";
pub const IN: &str = "127.0.0.1";

pub const MAILBOXES: (&str, &str) = (
    "mailboxes",
    "user@local.test user/\nother@local.test other/\n",
);

/// `$config_directory` in Postfix's text is `dir` in Sluice's.
pub fn sluice_of(setup: &Setup, dir: &Path) -> Config {
    let mut cfg = config(dir, None);
    cfg.smtpd.mynetworks = vec![net("127.0.0.1/32")];
    cfg.smtpd.relay_domains = vec!["relay.test".parse().unwrap()];
    cfg.transport.insert("*".into(), NextHop::Discard);
    cfg.recipient_delimiter = "+".into();
    cfg.local.domains = vec!["local.test".parse().unwrap()];
    cfg.local.mailbox_table = Some("mailboxes".into());
    let text_table = |name: &str| {
        let mut tc = sluice::config::tables::TableConfig::of_kind("text");
        tc.path = Some(dir.join(name));
        tc
    };
    cfg.tables
        .insert("mailboxes".into(), text_table("mailboxes"));
    cfg.local.maildir_base = Some(dir.join("mail"));
    let r = &mut cfg.restrictions;
    r.relay = "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination".into();
    r.helo_required = false;
    let classes: Vec<String> = setup
        .main_cf
        .iter()
        .find(|(k, _)| *k == "smtpd_restriction_classes")
        .map(|(_, v)| {
            v.split(|c: char| c == ',' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    for (key, value) in setup.main_cf {
        let value = value.replace("$config_directory", &dir.display().to_string());
        let code = || value.parse::<u16>().expect("a reply code");
        match *key {
            "smtpd_client_restrictions" => r.client = value,
            "smtpd_helo_restrictions" => r.helo = value,
            "smtpd_sender_restrictions" => r.sender = value,
            "smtpd_relay_restrictions" => r.relay = value,
            "smtpd_recipient_restrictions" => r.recipient = value,
            "smtpd_data_restrictions" => r.data = value,
            "smtpd_end_of_data_restrictions" => r.end_of_data = value,
            "smtpd_delay_reject" => r.delay_reject = value == "yes",
            "smtpd_sender_login_maps" => r.sender_login_maps = vec![value],
            "smtpd_null_access_lookup_key" => r.null_access_lookup_key = value,
            "parent_domain_matches_subdomains" => {
                r.parent_domain_matches_subdomains = !value.is_empty()
            }
            "access_map_reject_code" => r.access_map_reject_code = code(),
            "access_map_defer_code" => r.access_map_defer_code = code(),
            "relay_domains_reject_code" => r.relay_domains_reject_code = code(),
            "non_fqdn_reject_code" => r.non_fqdn_reject_code = code(),
            "invalid_hostname_reject_code" => r.invalid_hostname_reject_code = code(),
            "reject_code" => r.reject_code = code(),
            "defer_code" => r.defer_code = code(),
            "multi_recipient_bounce_reject_code" => r.multi_recipient_bounce_reject_code = code(),
            "unknown_virtual_mailbox_reject_code" => r.unknown_virtual_mailbox_reject_code = code(),
            "unknown_relay_recipient_reject_code" => r.unknown_relay_recipient_reject_code = code(),
            "relay_recipient_maps" => {
                let file = value.rsplit('/').next().expect("a file").to_string();
                cfg.tables.insert(file.clone(), text_table(&file));
                cfg.smtpd.relay_recipient_table = Some(file);
            }
            "virtual_alias_maps" => cfg.rewrite.virtual_alias_maps = vec![value],
            "virtual_alias_domains" => {
                let domains = value.split(", ").map(|d| d.parse().unwrap()).collect();
                cfg.rewrite.virtual_alias_domains = Some(domains);
            }
            "unknown_virtual_alias_reject_code" => r.unknown_virtual_alias_reject_code = code(),
            "canonical_maps" => cfg.rewrite.canonical_maps = vec![value],
            "recipient_canonical_maps" => cfg.rewrite.recipient_canonical_maps = vec![value],
            "smtpd_restriction_classes" => {}
            class if classes.iter().any(|c| c == class) => {
                r.classes.insert(class.to_string(), value);
            }
            other => panic!("no Sluice translation for {other}"),
        }
    }
    cfg
}

/// The world both know (see restrict_diff.rs), the setup's fragment,
/// then `extra` (what only Postfix needs said).
pub fn postfix_main<'a>(setup: &'a Setup, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut main: Vec<(&str, &str)> = vec![
        ("mynetworks", "127.0.0.1/32"),
        ("virtual_mailbox_domains", "local.test"),
        (
            "virtual_mailbox_maps",
            "texthash:$config_directory/mailboxes",
        ),
        ("relay_domains", "relay.test"),
        ("recipient_delimiter", "+"),
        (
            "smtpd_relay_restrictions",
            "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination",
        ),
    ];
    main.extend(setup.main_cf.iter().copied());
    main.extend(extra.iter().copied());
    main
}

pub fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The bytes one line puts on the wire (see the head comment).
fn wire(part: &str) -> String {
    match part.strip_prefix("AUTH PLAIN ") {
        Some(creds) if creds.contains(':') => {
            let (user, password) = creds.split_once(':').expect("user:password");
            format!("AUTH PLAIN {}\r\n", b64(&format!("\0{user}\0{password}")))
        }
        _ => format!("{part}\r\n"),
    }
}

const MESSAGE: &[u8] = b"Subject: t\r\n\r\nhello\r\n";

/// Every reply of one conversation, as (code, enhanced).
pub async fn replay(addr: SocketAddr, conv: &Conv) -> Vec<Said> {
    let (mut client, greeting) = Client::connect_from(conv.from, addr).await;
    let mut out = vec![key(&greeting)];
    for line in conv.lines {
        if out.last().is_some_and(|s| s.code == 421 || s.code == 521) {
            break;
        }
        if *line == "BDAT" {
            let chunk = format!("BDAT {} LAST\r\n", MESSAGE.len());
            client.send(&[chunk.as_bytes(), MESSAGE].concat()).await;
            out.push(key(&client.reply().await));
            continue;
        }
        let parts: Vec<&str> = line.split('|').collect();
        let bytes: String = parts.iter().map(|p| wire(p)).collect();
        client.send(bytes.as_bytes()).await;
        for _ in &parts {
            out.push(key(&client.reply().await));
        }
        if *line == "DATA" && out.last().is_some_and(|s| s.code == 354) {
            client.send(&[MESSAGE, b".\r\n"].concat()).await;
            out.push(key(&client.reply().await));
        }
    }
    out
}

/// A reply: what is compared (code, enhanced code) and its text (shown
/// when they differ).
#[derive(Debug)]
pub struct Said {
    code: u16,
    enhanced: Option<String>,
    text: String,
}

impl PartialEq for Said {
    fn eq(&self, other: &Said) -> bool {
        (self.code, &self.enhanced) == (other.code, &other.enhanced)
    }
}

fn key(raw: &str) -> Said {
    let r = Reply::parse(raw);
    Said {
        code: r.code,
        enhanced: r.enhanced,
        text: r.text,
    }
}

/// Conversations compared so far, and the differences not known.
#[derive(Default)]
pub struct Tally {
    pub compared: usize,
    pub differences: Vec<String>,
}

impl Tally {
    /// Replays each conversation of `setup` against Postfix (`theirs`,
    /// by listener) and Sluice (`ours`).
    pub async fn compare(
        &mut self,
        setup: &Setup,
        theirs: &[SocketAddr],
        ours: &[SocketAddr],
        known: &[Known],
    ) {
        for (i, conv) in setup.convs.iter().enumerate() {
            let t = replay(theirs[conv.listener], conv).await;
            let o = replay(ours[conv.listener], conv).await;
            self.compared += 1;
            if std::env::var_os("RESTRICT_DIFF_SHOW").is_some() {
                eprintln!("{} #{i}:\n  Postfix {t:?}\n  Sluice  {o:?}", setup.name);
            }
            self.one(setup, i, conv, &t, &o, known);
        }
    }

    fn one(
        &mut self,
        setup: &Setup,
        i: usize,
        conv: &Conv,
        t: &[Said],
        o: &[Said],
        known: &[Known],
    ) {
        for (step, (t, o)) in t.iter().zip(o).enumerate() {
            let line = step
                .checked_sub(1)
                .and_then(|s| conv.lines.get(s))
                .copied()
                .unwrap_or("greeting");
            if t != o
                && !known
                    .iter()
                    .any(|d| (d.0, d.1, d.2) == (setup.name, i, step))
            {
                self.differences.push(format!(
                    "{} #{i} from {} step {step} ({line}):\n  Postfix {} {:?} {}\n  Sluice  {} {:?} {}",
                    setup.name, conv.from, t.code, t.enhanced, t.text, o.code, o.enhanced, o.text
                ));
            }
        }
        if t.len() != o.len() {
            self.differences.push(format!(
                "{} #{i}: Postfix {t:?}\n  Sluice {o:?}",
                setup.name
            ));
        }
    }

    /// Each setup with one Postfix and one Sluice of its own.
    pub async fn plain(&mut self, setups: &[Setup], known: &[Known]) {
        for setup in setups {
            let dir = temp_dir(&format!("restrict-{}", setup.name));
            write_files(setup, &dir);
            let postfix = Postfix::start_with(setup.files, &postfix_main(setup, &[]), "");
            let (server, addr) = start(sluice_of(setup, &dir)).await;
            self.compare(setup, &[postfix.addr], &[addr], known).await;
            drop(server);
        }
    }

    /// Fails the test with every difference, or when fewer than `at_least`
    /// conversations were compared.
    pub fn check(&self, at_least: usize) {
        assert!(self.compared >= at_least, "{} conversations", self.compared);
        assert!(
            self.differences.is_empty(),
            "{} differences:\n{}",
            self.differences.len(),
            self.differences.join("\n")
        );
    }
}

/// The setup's table files, in Sluice's directory.
pub fn write_files(setup: &Setup, dir: &Path) {
    for (name, text) in setup.files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}
