//! Postfix defaults that Sluice's defaults do not match, written out
//! when main.cf leaves them unset, so the translation decides as Postfix
//! would: the host name, the listeners (`inet_interfaces`,
//! `inet_protocols`: port 25 on every address by default), the relay and
//! recipient restrictions in force at the file's `compatibility_level`,
//! `smtpd_helo_required = no`, local delivery for `mydestination` with
//! its aliases, and a data_dir of Sluice's own (the package's).
//!
//! Trust: as translate.rs's.

use super::out::Out;
use super::postfix::list_of;
use super::postfix::Postfix;

/// Where the Debian package keeps its spool (packaging/sluice.toml).
pub const DATA_DIR: &str = "/var/spool/sluice";

pub fn defaults(pf: &Postfix, out: &mut Out) {
    let unset = |name: &str| pf.main.raw(name).is_none();
    put(out, "data_directory", "data_dir", DATA_DIR.into());
    if unset("myhostname") {
        let host = pf.get("myhostname").unwrap_or_default();
        put(out, "myhostname", "hostname", host.into());
    }
    if unset("inet_interfaces") && unset("inet_protocols") && !out.has("smtpd.listen") {
        listeners(pf, out);
        let keys = vec!["smtpd.listen".to_string()];
        out.report.implied.push(("inet_interfaces".into(), keys));
    }
    for (name, key) in [
        ("smtpd_relay_restrictions", "restrictions.relay"),
        ("smtpd_recipient_restrictions", "restrictions.recipient"),
    ] {
        if unset(name) {
            put(out, name, key, pf.get(name).unwrap_or_default().into());
        }
    }
    if unset("smtpd_helo_required") {
        put(
            out,
            "smtpd_helo_required",
            "restrictions.helo_required",
            false.into(),
        );
    }
    let destinations = list_of(pf, "mydestination");
    if unset("mydestination") && !destinations.is_empty() {
        let list = destinations.into_iter().map(toml::Value::String).collect();
        put(
            out,
            "mydestination",
            "system.mydestination",
            toml::Value::Array(list),
        );
    }
    if out.has("system.mydestination") && unset("alias_maps") {
        // Postfix's default also names nis:mail.aliases, which Debian's
        // main.cf drops and Sluice cannot ask.
        let aliases = toml::Value::Array(vec!["hash:/etc/aliases".into()]);
        put(out, "alias_maps", "system.alias_maps", aliases);
    }
}

/// Writes an implied default unless the translation set `key` already.
fn put(out: &mut Out, name: &str, key: &str, value: toml::Value) {
    if !out.has(key) {
        out.set(key, value);
        out.report
            .implied
            .push((name.to_string(), vec![key.to_string()]));
    }
}

/// `smtpd.listen` from `inet_interfaces` and `inet_protocols`, port 25.
pub fn listeners(pf: &Postfix, out: &mut Out) {
    let protocols = list_of(pf, "inet_protocols");
    let all = protocols.iter().any(|p| p == "all");
    let v4 = all || protocols.iter().any(|p| p == "ipv4");
    let v6 = all || protocols.iter().any(|p| p == "ipv6");
    let mut listen = Vec::new();
    for iface in list_of(pf, "inet_interfaces") {
        match iface.as_str() {
            "all" => {
                if v4 {
                    listen.push("0.0.0.0:25".to_string());
                }
                if v6 {
                    listen.push("[::]:25".to_string());
                }
            }
            "loopback-only" | "localhost" => {
                if v4 {
                    listen.push("127.0.0.1:25".to_string());
                }
                if v6 {
                    listen.push("[::1]:25".to_string());
                }
            }
            addr => match addr.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(a)) => listen.push(format!("[{a}]:25")),
                Ok(a) => listen.push(format!("{a}:25")),
                // A host name: Postfix resolves it at start; so must the
                // administrator here.
                Err(_) => {}
            },
        }
    }
    let list = listen.into_iter().map(toml::Value::String).collect();
    out.set("smtpd.listen", toml::Value::Array(list));
}
