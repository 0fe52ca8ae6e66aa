//! master.cf service by service:
//! - `smtpd` on `inet` becomes a listener. Port 25 on the main addresses
//!   is `smtpd.listen`; every other one is an `[[smtpd.listeners]]`
//!   entry: 587 is `submission`, 465 or `smtpd_tls_wrappermode` is
//!   `submissions`. Each `-o` goes through main.cf's rules, and lands in
//!   the listener's `overrides`, `restrictions`, `content_checks` or
//!   `content_filter`; what a listener cannot hold is unsupported.
//! - A `pipe` service becomes `[transports.NAME] service = "pipe"`, and an
//!   `smtp` or `lmtp` one with `-o` becomes `service = "smtp"`, each only
//!   when main.cf names it (`NAME:`). The same services unused, and
//!   Postfix's own daemons, are not needed.
//!
//! Trust: as translate.rs's; `-o` values are expanded with main.cf's
//! parameters, as master does.

use super::maincf::expand;
use super::mastercf::Service;
use super::out::Out;
use super::postfix::Postfix;
use super::report::{Entry, Verdict};
use super::rules;

/// Postfix's own daemons, which Sluice has built in.
const INTERNAL: &[&str] = &[
    "pickup",
    "cleanup",
    "qmgr",
    "oqmgr",
    "tlsmgr",
    "trivial-rewrite",
    "bounce",
    "verify",
    "flush",
    "proxymap",
    "showq",
    "error",
    "discard",
    "local",
    "virtual",
    "anvil",
    "scache",
    "postlogd",
    "tlsproxy",
    "spawn",
];

pub fn services(pf: &Postfix, out: &mut Out, services: &[Service]) {
    let mut listeners = Vec::new();
    for s in services {
        let verdict = match (s.command.as_str(), s.kind.as_str()) {
            ("smtpd", "inet") => listener(pf, s, &mut listeners),
            ("pipe", _) if used(pf, services, &s.name) => pipe(out, s),
            ("smtp" | "lmtp", "unix") if !s.overrides.is_empty() && used(pf, services, &s.name) => {
                smtp_transport(pf, out, s)
            }
            ("pipe" | "smtp" | "lmtp", _) => Verdict::NotNeeded(format!(
                "{} service not named by main.cf (tables' contents were not searched)",
                s.command
            )),
            ("smtpd", "pass") | ("postscreen", _) | ("dnsblog", _) => Verdict::Unsupported(
                "postscreen: Sluice's listener has the DNSBL and pregreet tests built in \
                 (smtpd.dnsbl_sites, smtpd.greet_pause_ms); translate them by hand"
                    .into(),
            ),
            (cmd, _) if INTERNAL.contains(&cmd) => {
                Verdict::NotNeeded("a Postfix daemon Sluice has built in".into())
            }
            (cmd, _) => Verdict::Unsupported(format!("service command {cmd:?}")),
        };
        out.report.entries.push(Entry {
            source: format!("master.cf:{}", s.line),
            name: s.name.clone(),
            verdict,
        });
    }
    if !listeners.is_empty() {
        out.toml
            .entry("smtpd".to_string())
            .or_insert_with(|| toml::Table::new().into());
        if let Some(smtpd) = out.toml.get_mut("smtpd").and_then(|v| v.as_table_mut()) {
            smtpd.insert("listeners".into(), toml::Value::Array(listeners));
        }
    }
}

/// Whether main.cf's text, or a service's `-o`, names `service:` (a
/// transport or filter).
fn used(pf: &Postfix, services: &[Service], service: &str) -> bool {
    let needle = format!("{service}:");
    pf.main.params.iter().any(|p| p.value.contains(&needle))
        || services
            .iter()
            .flat_map(|s| &s.overrides)
            .any(|(_, v)| v.contains(&needle))
}

fn port_of(name: &str) -> Option<(Option<&str>, u16)> {
    let (host, port) = match name.rsplit_once(':') {
        Some((h, p)) => (Some(h.trim_matches(['[', ']'])), p),
        None => (None, name),
    };
    let port = match port {
        "smtp" => 25,
        "submission" => 587,
        "smtps" | "submissions" => 465,
        p => p.parse().ok()?,
    };
    Some((host, port))
}

fn listener(pf: &Postfix, s: &Service, list: &mut Vec<toml::Value>) -> Verdict {
    let Some((host, port)) = port_of(&s.name) else {
        return Verdict::Unsupported(format!("service name {:?} is no port", s.name));
    };
    if port == 25 && host.is_none() && s.overrides.is_empty() {
        return Verdict::Same("port 25 on inet_interfaces: smtpd.listen".into());
    }
    let wrapper = s
        .overrides
        .iter()
        .any(|(n, v)| n == "smtpd_tls_wrappermode" && v == "yes");
    let kind = match port {
        587 => "submission",
        465 => "submissions",
        _ if wrapper => "submissions",
        _ => "smtp",
    };
    let mut entry = toml::Table::new();
    entry.insert("kind".into(), kind.into());
    let mut unsupported = Vec::new();
    for (name, value) in &s.overrides {
        if let Err(why) = one_override(pf, &mut entry, name, value) {
            unsupported.push(format!("-o {name}: {why}"));
        }
    }
    let addrs: Vec<String> = match host {
        Some(h) if h.contains(':') => vec![format!("[{h}]:{port}")],
        Some(h) => vec![format!("{h}:{port}")],
        None => addresses(pf, port),
    };
    for a in &addrs {
        let mut e = entry.clone();
        e.insert("listen".into(), a.clone().into());
        list.push(toml::Value::Table(e));
    }
    match unsupported.is_empty() {
        true => Verdict::Translated(vec![format!(
            "smtpd.listeners ({kind}, {})",
            addrs.join(" ")
        )]),
        false => Verdict::Unsupported(unsupported.join("; ")),
    }
}

/// The addresses of `inet_interfaces`, with `port`.
fn addresses(pf: &Postfix, port: u16) -> Vec<String> {
    let mut scratch = Out {
        toml: toml::Table::new(),
        report: Default::default(),
    };
    super::implied::listeners(pf, &mut scratch);
    let listen = scratch.toml["smtpd"]["listen"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    listen
        .iter()
        .filter_map(|v| v.as_str())
        .filter_map(|a| a.rsplit_once(':').map(|(h, _)| format!("{h}:{port}")))
        .collect()
}

/// One `-o` of a listener, through main.cf's rules.
fn one_override(
    pf: &Postfix,
    entry: &mut toml::Table,
    name: &str,
    value: &str,
) -> Result<(), String> {
    let value = expand(value, pf).map_err(|e| e.to_string())?;
    match name {
        "syslog_name" | "milter_macro_daemon_name" | "smtpd_tls_wrappermode" => return Ok(()),
        "smtpd_sasl_auth_enable" => {
            entry.insert("auth".into(), (value == "yes").into());
            return Ok(());
        }
        "smtpd_tls_security_level" if value == "encrypt" => return Ok(()),
        "content_filter" => {
            entry.insert("content_filter".into(), value.into());
            return Ok(());
        }
        "receive_override_options" => return receive_overrides(entry, &value),
        _ => {}
    }
    let mut scratch = Out {
        toml: toml::Table::new(),
        report: Default::default(),
    };
    match rules::one(pf, &mut scratch, name, &value) {
        Verdict::Translated(keys) => {
            for key in keys {
                place(entry, &scratch, &key)?;
            }
            Ok(())
        }
        Verdict::Same(_) | Verdict::Cosmetic(_) | Verdict::NotNeeded(_) => Ok(()),
        Verdict::Unsupported(why) | Verdict::Error(why) => Err(why),
        Verdict::Unknown => Err("not a Postfix 3.7 parameter".into()),
    }
}

/// Moves a translated main setting into the listener's own tables.
fn place(entry: &mut toml::Table, scratch: &Out, key: &str) -> Result<(), String> {
    let (section, field) = key.split_once('.').ok_or("not a listener setting")?;
    let value = scratch.toml[section][field].clone();
    let table = match section {
        "smtpd" | "tls" => "overrides",
        "restrictions" if LISTS.contains(&field) => "restrictions",
        "content_checks" => "content_checks",
        _ => return Err(format!("{key} cannot be set per listener")),
    };
    let sub = entry
        .entry(table.to_string())
        .or_insert_with(|| toml::Table::new().into())
        .as_table_mut()
        .ok_or("listener table")?;
    let sub = match table {
        "overrides" => sub
            .entry(section.to_string())
            .or_insert_with(|| toml::Table::new().into())
            .as_table_mut()
            .ok_or("listener table")?,
        _ => sub,
    };
    sub.insert(field.to_string(), value);
    Ok(())
}

const LISTS: &[&str] = &[
    "client",
    "helo",
    "sender",
    "relay",
    "recipient",
    "data",
    "end_of_data",
];

fn receive_overrides(entry: &mut toml::Table, value: &str) -> Result<(), String> {
    for w in super::postfix::words(value) {
        match w.as_str() {
            "no_unknown_recipient_checks" | "no_address_mappings" => {}
            "no_header_body_checks" => {
                let mut checks = toml::Table::new();
                for list in [
                    "header_checks",
                    "mime_header_checks",
                    "nested_header_checks",
                    "body_checks",
                ] {
                    checks.insert(list.into(), toml::Value::Array(Vec::new()));
                }
                entry.insert("content_checks".into(), checks.into());
            }
            "no_milters" => {
                let o = entry
                    .entry("overrides".to_string())
                    .or_insert_with(|| toml::Table::new().into());
                let smtpd = o.as_table_mut().map(|o| {
                    o.entry("smtpd".to_string())
                        .or_insert_with(|| toml::Table::new().into())
                });
                if let Some(t) = smtpd.and_then(|s| s.as_table_mut()) {
                    t.insert("milters".into(), toml::Value::Array(Vec::new()));
                }
            }
            other => return Err(format!("receive_override_options {other}")),
        }
    }
    Ok(())
}

fn pipe(out: &mut Out, s: &Service) -> Verdict {
    let key = format!("transports.{}", s.name);
    let mut t = toml::Table::new();
    t.insert("service".into(), "pipe".into());
    let mut it = s.args.iter();
    while let Some(a) = it.next() {
        let (name, value) = a.split_once('=').unwrap_or((a, ""));
        match name {
            "flags" => t.insert("flags".into(), value.into()),
            "user" => t.insert("user".into(), value.into()),
            "size" => t.insert(
                "size_limit".into(),
                value.parse::<i64>().unwrap_or(0).into(),
            ),
            "argv" => {
                let argv: Vec<toml::Value> = std::iter::once(value.to_string())
                    .chain(it.by_ref().cloned())
                    .map(toml::Value::String)
                    .collect();
                t.insert("argv".into(), argv.into())
            }
            other => return Verdict::Unsupported(format!("pipe attribute {other}")),
        };
    }
    out.set(&key, t.into());
    Verdict::Translated(vec![key])
}

fn smtp_transport(pf: &Postfix, out: &mut Out, s: &Service) -> Verdict {
    let key = format!("transports.{}", s.name);
    let mut t = toml::Table::new();
    t.insert("service".into(), "smtp".into());
    for (name, value) in &s.overrides {
        let value = expand(value, pf).unwrap_or_default();
        match name.as_str() {
            "smtp_bind_address" | "smtp_bind_address6" | "smtp_helo_name"
            | "smtp_tls_cert_file" | "smtp_tls_key_file" => {
                t.insert(name.clone(), value.into());
            }
            // XFORWARD is always sent to a filter that offers it; a
            // bracketed next hop is never looked up in DNS anyway.
            "syslog_name" | "smtp_send_xforward_command" | "disable_dns_lookups" | "max_use" => {}
            // Sluice's is one value for every hop: the longest wins.
            "smtp_data_done_timeout" => {
                let secs = super::out::seconds(&value, 's').unwrap_or(600);
                let now = out
                    .toml
                    .get("delivery")
                    .and_then(|d| d.get("data_done_timeout_secs"));
                if now.and_then(|v| v.as_integer()).is_none_or(|n| n < secs) {
                    out.set("delivery.data_done_timeout_secs", secs.into());
                }
            }
            other => return Verdict::Unsupported(format!("-o {other} on an smtp transport")),
        }
    }
    out.set(&key, t.into());
    Verdict::Translated(vec![key])
}
