//! The rule for each Postfix parameter: the Sluice setting it becomes
//! (and how its value converts), a function for the ones that need more
//! than a copy, or why it is not needed, cosmetic or not supported.
//! docs/CONFIG.md's "From Postfix: parameter by parameter" is the same
//! table in prose; a parameter absent here is reported `unsupported`
//! unless it is set to its default.
//!
//! Trust: as translate.rs's.

pub use super::out::Kind;
use super::out::{convert, maps, Out};
use super::postfix::{words, Postfix};
use super::report::Verdict;

pub type Custom = fn(&Postfix, &mut Out, &str) -> Verdict;

pub enum Rule {
    To(String, Kind),
    With(Custom),
    NotNeeded(&'static str),
    Cosmetic(&'static str),
    Unsupported(&'static str),
    None,
}

const SPOOL: &str = "Sluice keeps its own spool and state in data_dir";
const TLS_CACHE: &str = "TLS sessions are cached in memory, per process";
const MANUALS: &str = "where Postfix's manuals and samples are";

fn to(key: &str, kind: Kind) -> Rule {
    Rule::To(key.to_string(), kind)
}

/// One parameter's verdict (and its settings written).
pub fn one(pf: &Postfix, out: &mut Out, name: &str, value: &str) -> Verdict {
    if !pf.known(name) {
        return match restriction_class(pf, name) {
            true => class(out, name, value),
            false => Verdict::Unknown,
        };
    }
    match rule(name) {
        Rule::To(key, kind) => match convert(kind, value) {
            Ok(v) => {
                out.set(&key, v);
                Verdict::Translated(vec![key])
            }
            Err(why) => Verdict::Unsupported(why),
        },
        Rule::With(f) => f(pf, out, value),
        Rule::NotNeeded(why) => Verdict::NotNeeded(why.into()),
        Rule::Cosmetic(why) => Verdict::Cosmetic(why.into()),
        Rule::Unsupported(why) => Verdict::Unsupported(why.into()),
        Rule::None if pf.is_default(name, value) => {
            Verdict::Same("set to Postfix's default, which Sluice has too".into())
        }
        Rule::None => Verdict::Unsupported("no Sluice equivalent yet".into()),
    }
}

/// Whether `name` is one of `smtpd_restriction_classes`.
fn restriction_class(pf: &Postfix, name: &str) -> bool {
    let classes = pf.get("smtpd_restriction_classes").unwrap_or_default();
    words(&classes).iter().any(|c| c == name)
}

pub fn rule(name: &str) -> Rule {
    use Kind::*;
    use Rule::*;
    if let Some(r) = same_name(name) {
        return r;
    }
    if let Some(r) = receiving(name) {
        return r;
    }
    match name {
        "virtual_mailbox_domains" => With(mailbox_domains),
        "virtual_mailbox_maps" => to("local.mailbox_table", Str),
        "virtual_mailbox_base" => to("local.maildir_base", Str),
        "virtual_transport" => With(virtual_transport),
        "virtual_alias_domains" => to("rewrite.virtual_alias_domains", List),
        "relayhost" => With(relayhost),
        "smtp_tls_security_level" => With(smtp_tls_level),
        "smtp_tls_CAfile" => to("delivery.tls_ca_file", Str),
        "smtp_connect_timeout" => to("delivery.connect_timeout_secs", Secs('s')),
        "smtp_data_done_timeout" => to("delivery.data_done_timeout_secs", Secs('s')),
        "default_destination_concurrency_limit" | "smtp_destination_concurrency_limit" => {
            to("delivery.default_concurrency", Int)
        }
        "initial_destination_concurrency" => to("delivery.initial_concurrency", Int),
        "default_destination_recipient_limit" | "smtp_destination_recipient_limit" => {
            to("delivery.recipients_per_transaction", Int)
        }
        "smtp_mx_address_limit" => to("delivery.mx_address_limit", Int),
        "smtp_mx_session_limit" => to("delivery.mx_session_limit", Int),
        "minimal_backoff_time" => to("queue.minimal_backoff_secs", Secs('s')),
        "maximal_backoff_time" => to("queue.maximal_backoff_secs", Secs('s')),
        "maximal_queue_lifetime" => to("queue.maximal_lifetime_secs", Secs('d')),
        "qmgr_message_active_limit" => to("queue.active_limit", Int),
        "delay_warning_time" => to("queue.delay_warning_secs", Secs('h')),
        "alias_maps" | "alias_database" => With(aliases),
        "mydestination" => With(mydestination),
        "content_filter" => to("content_checks.content_filter", Str),
        "mail_owner" => NotNeeded("Sluice runs as its own account (`user`, default sluice)"),
        "compatibility_level" => NotNeeded("Sluice has Postfix 3.x's newest defaults; used here for $name expansion only"),
        "queue_directory" | "data_directory" => NotNeeded(SPOOL),
        "command_directory" | "daemon_directory" | "shlib_directory" | "meta_directory"
        | "setgid_group" | "sendmail_path" | "newaliases_path" | "mailq_path" => {
            NotNeeded("where Postfix's own programs are")
        }
        "smtpd_tls_session_cache_database" | "smtp_tls_session_cache_database" => {
            NotNeeded(TLS_CACHE)
        }
        "default_database_type" | "tls_random_source" => NotNeeded("Sluice reads the tables' text files itself and seeds TLS from the OS"),
        "inet_interfaces" | "inet_protocols" => With(listen),
        "readme_directory" | "html_directory" | "manpage_directory" | "sample_directory" => {
            Cosmetic(MANUALS)
        }
        "myorigin" => With(myorigin),
        "virtual_minimum_uid" => NotNeeded("one Maildir owner, given by the operator (local.maildir_owner)"),
        "virtual_uid_maps" | "virtual_gid_maps" => With(maildir_owner),
        "proxy_read_maps" | "proxy_write_maps" => {
            NotNeeded("Sluice's tables are shared and pooled in one process (what proxymap is for)")
        }
        "smtpd_tls_protocols" | "smtpd_tls_mandatory_protocols" | "smtp_tls_protocols"
        | "smtp_tls_mandatory_protocols" => {
            NotNeeded("Sluice (rustls) speaks TLS 1.2 and 1.3 only, never SSL or TLS 1.0/1.1")
        }
        "mydomain" => NotNeeded("used for $name expansion here; Sluice has no $mydomain"),
        "relay_recipient_maps" => With(one_table("smtpd.relay_recipient_table")),
        "transport_maps" => With(one_table("local.transport_table")),
        "disable_vrfy_command" => {
            NotNeeded("Sluice answers every VRFY 252 without looking the address up")
        }
        "smtpd_tls_loglevel" | "smtp_tls_loglevel" => Cosmetic("how much TLS detail is logged"),
        "postscreen_dnsbl_sites" => to("smtpd.dnsbl_sites", List),
        "postscreen_dnsbl_threshold" => to("smtpd.dnsbl_threshold", Int),
        "postscreen_dnsbl_ttl" => to("smtpd.dnsbl_cache_secs", Secs('s')),
        "postscreen_dnsbl_action" | "postscreen_greet_action" => Unsupported(
            "Sluice's action is fixed: 554 5.7.1 in place of the greeting, and disconnect",
        ),
        "smtp_tls_CApath" => With(ca_path),
        "biff" => NotNeeded("Sluice never notifies comsat"),
        "append_dot_mydomain" => With(append_dot_mydomain),
        "smtputf8_enable" => NotNeeded("Sluice always offers SMTPUTF8"),
        "mailbox_size_limit" => Unsupported("no mailbox size limit for system users' mbox files"),
        "mailbox_command" => Unsupported("local(8)'s mailbox_command (procmail, Dovecot's deliver): not yet; a pipe transport can run it"),
        _ => None,
    }
}

/// The rules of what the SMTP server takes (listeners, limits, milters,
/// restrictions, TLS and AUTH).
fn receiving(name: &str) -> Option<Rule> {
    use Kind::*;
    use Rule::*;
    Some(match name {
        "myhostname" => to("hostname", Str),
        "recipient_delimiter" => to("recipient_delimiter", Str),
        "maillog_file" => to("log_file", Str),
        "mynetworks" => With(mynetworks),
        "relay_domains" => With(relay_domains),
        "message_size_limit" => to("smtpd.message_size_limit", Int),
        "smtpd_recipient_limit" => to("smtpd.max_recipients", Int),
        "smtpd_hard_error_limit" => to("smtpd.max_errors", Int),
        "smtpd_junk_command_limit" => to("smtpd.junk_command_limit", Int),
        "hopcount_limit" => to("smtpd.hop_count_limit", Int),
        "smtpd_client_connection_count_limit" => to("smtpd.client_connection_limit", Int),
        "smtpd_client_connection_rate_limit" => to("smtpd.client_connection_rate_limit", Int),
        "smtpd_client_message_rate_limit" => to("smtpd.client_message_rate_limit", Int),
        "smtpd_client_recipient_rate_limit" => to("smtpd.client_recipient_rate_limit", Int),
        "smtpd_milters" => to("smtpd.milters", Maps),
        "non_smtpd_milters" => to("smtpd.non_smtpd_milters", Maps),
        "milter_default_action" => to("smtpd.milter_default_action", Str),
        "milter_connect_timeout" => to("smtpd.milter_connect_timeout_secs", Secs('s')),
        "milter_command_timeout" => to("smtpd.milter_command_timeout_secs", Secs('s')),
        "milter_content_timeout" => to("smtpd.milter_content_timeout_secs", Secs('s')),
        "smtpd_banner" => With(banner),
        "smtpd_client_restrictions" => to("restrictions.client", Str),
        "smtpd_helo_restrictions" => to("restrictions.helo", Str),
        "smtpd_sender_restrictions" => to("restrictions.sender", Str),
        "smtpd_relay_restrictions" => to("restrictions.relay", Str),
        "smtpd_recipient_restrictions" => to("restrictions.recipient", Str),
        "smtpd_data_restrictions" => to("restrictions.data", Str),
        "smtpd_end_of_data_restrictions" => to("restrictions.end_of_data", Str),
        "smtpd_delay_reject" => to("restrictions.delay_reject", Bool),
        "smtpd_helo_required" => to("restrictions.helo_required", Bool),
        "smtpd_sender_login_maps" => to("restrictions.sender_login_maps", Maps),
        "smtpd_restriction_classes" => {
            NotNeeded("each class is translated under its own name ([restrictions.classes])")
        }
        "smtpd_tls_cert_file" => to("tls.cert_file", Str),
        "smtpd_tls_key_file" => to("tls.key_file", Str),
        "smtpd_tls_security_level" => With(smtpd_tls_level),
        "smtpd_use_tls" => With(smtpd_use_tls),
        "smtpd_sasl_auth_enable" => to("auth.offer_on_smtp", Bool),
        "smtpd_sasl_type" => With(sasl_type),
        "smtpd_sasl_path" => With(sasl_path),
        "smtpd_tls_auth_only" => With(tls_auth_only),
        _ => return Option::None,
    })
}

/// Parameters Sluice takes under the same name, in one section.
fn same_name(name: &str) -> Option<Rule> {
    use Kind::*;
    let (section, kind) = match name {
        "canonical_maps"
        | "sender_canonical_maps"
        | "recipient_canonical_maps"
        | "smtp_generic_maps"
        | "virtual_alias_maps"
        | "sender_bcc_maps"
        | "recipient_bcc_maps" => ("rewrite", Maps),
        "canonical_classes"
        | "sender_canonical_classes"
        | "recipient_canonical_classes"
        | "masquerade_classes"
        | "masquerade_domains"
        | "masquerade_exceptions"
        | "local_header_rewrite_clients" => ("rewrite", List),
        "always_bcc" | "remote_header_rewrite_domain" => ("rewrite", Str),
        "virtual_alias_recursion_limit" | "virtual_alias_expansion_limit" => ("rewrite", Int),
        "header_checks" | "mime_header_checks" | "nested_header_checks" | "body_checks" => {
            ("content_checks", Maps)
        }
        "body_checks_size_limit" => ("content_checks", Int),
        "smtp_sasl_auth_enable" | "smtp_sender_dependent_authentication" => ("delivery", Bool),
        "smtp_sasl_password_maps"
        | "sender_dependent_relayhost_maps"
        | "sender_dependent_default_transport_maps" => ("delivery", Maps),
        "smtp_sasl_mechanism_filter" => ("delivery", List),
        "smtp_sasl_security_options" | "smtp_sasl_tls_security_options" => ("delivery", Str),
        "smtp_tls_cert_file"
        | "smtp_tls_key_file"
        | "smtp_bind_address"
        | "smtp_bind_address6"
        | "smtp_helo_name"
        | "empty_address_relayhost_maps_lookup_key" => ("delivery", Str),
        "smtp_bind_address_enforce" => ("delivery", Bool),
        "home_mailbox" | "mail_spool_directory" | "default_privs" => ("system", Str),
        "forward_path"
        | "allow_mail_to_commands"
        | "allow_mail_to_files"
        | "mailbox_delivery_lock" => ("system", List),
        "local_recipient_maps" => ("system", Maps),
        "relay_clientcerts" => ("restrictions", Maps),
        "parent_domain_matches_subdomains" => ("restrictions", List),
        n if n.ends_with("_reject_code") || n.ends_with("_defer_code") => ("restrictions", Int),
        "unknown_address_tempfail_action" | "unknown_helo_hostname_tempfail_action" => {
            ("restrictions", Str)
        }
        _ => return None,
    };
    Some(Rule::To(format!("{section}.{name}"), kind))
}

/// A restriction class (`smtpd_restriction_classes`).
pub fn class(out: &mut Out, name: &str, value: &str) -> Verdict {
    let key = format!("restrictions.classes.{name}");
    out.set(&key, toml::Value::String(value.to_string()));
    Verdict::Translated(vec![key])
}

/// Postfix writes IPv6 networks in brackets (`[::1]/128`); Sluice not.
fn mynetworks(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    let nets = maps(value);
    if nets.iter().any(|n| n.contains(':') && !n.starts_with('[')) {
        return Verdict::Unsupported("mynetworks from a table: list the networks".into());
    }
    let list = nets
        .iter()
        .map(|n| toml::Value::String(n.replace(['[', ']'], "")))
        .collect();
    out.set("smtpd.mynetworks", toml::Value::Array(list));
    Verdict::Translated(vec!["smtpd.mynetworks".into()])
}

/// `static:N` uid and gid maps: the Maildir owner, when Sluice writes
/// the Maildirs (not when Dovecot does, over LMTP).
fn maildir_owner(pf: &Postfix, out: &mut Out, _: &str) -> Verdict {
    if pf
        .get("virtual_transport")
        .unwrap_or_default()
        .starts_with("lmtp:")
    {
        return Verdict::NotNeeded(
            "the mailboxes are Dovecot's (virtual_transport is LMTP)".into(),
        );
    }
    let id = |name: &str| {
        let v = pf.get(name).unwrap_or_default();
        v.strip_prefix("static:")
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    match (id("virtual_uid_maps"), id("virtual_gid_maps")) {
        (Some(u), Some(g)) => set(out, "local.maildir_owner", Kind::Str, &format!("{u}:{g}")),
        _ => Verdict::Unsupported("uid or gid maps other than static:N (one owner for all)".into()),
    }
}

/// A setting that takes one table (`type:name`).
fn one_table(key: &'static str) -> Custom {
    match key {
        "smtpd.relay_recipient_table" => {
            |_, out, v| table_to(out, "smtpd.relay_recipient_table", v)
        }
        _ => |_, out, v| table_to(out, "local.transport_table", v),
    }
}

fn table_to(out: &mut Out, key: &str, value: &str) -> Verdict {
    match maps(value).as_slice() {
        [] => Verdict::Same("no table: Sluice's default".into()),
        [one] => {
            out.set(key, toml::Value::String(one.clone()));
            Verdict::Translated(vec![key.into()])
        }
        _ => Verdict::Unsupported("more than one table: make them one (a unionmap:{…})".into()),
    }
}

/// Sluice qualifies local senders (sendmail) with `hostname`.
fn myorigin(pf: &Postfix, _: &mut Out, value: &str) -> Verdict {
    let host = pf.get("myhostname").unwrap_or_default();
    match value.trim() {
        v if v == host => Verdict::Same("Sluice qualifies local senders with hostname".into()),
        v if v.starts_with('/') => Verdict::Unsupported(format!(
            "myorigin from the file {v}: Sluice qualifies local senders with hostname ({host}); \
             set hostname to the file's name if they differ"
        )),
        v => Verdict::Unsupported(format!(
            "myorigin = {v}: Sluice qualifies local senders with hostname ({host})"
        )),
    }
}

fn ca_path(_: &Postfix, _: &mut Out, value: &str) -> Verdict {
    match value.trim().trim_end_matches('/') {
        "/etc/ssl/certs" => Verdict::Same("the system's roots: Sluice's default".into()),
        _ => Verdict::Unsupported("smtp_tls_CApath: give one file (delivery.tls_ca_file)".into()),
    }
}

fn relay_domains(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    if maps(value).iter().any(|m| m.contains(':')) {
        return Verdict::Unsupported("relay_domains from a table: list the domains".into());
    }
    set(out, "smtpd.relay_domains", Kind::List, value)
}

fn set(out: &mut Out, key: &'static str, kind: Kind, value: &str) -> Verdict {
    match convert(kind, value) {
        Ok(v) => {
            out.set(key, v);
            Verdict::Translated(vec![key.into()])
        }
        Err(why) => Verdict::Unsupported(why),
    }
}

fn banner(pf: &Postfix, out: &mut Out, value: &str) -> Verdict {
    let host = pf.get("myhostname").unwrap_or_default();
    match value.strip_prefix(host.as_str()).map(str::trim_start) {
        Some(rest) if !rest.is_empty() => set(out, "smtpd.banner", Kind::Str, rest),
        _ => Verdict::Unsupported(
            "Sluice's banner always starts with the host name (smtpd.banner is the text after it)"
                .into(),
        ),
    }
}

fn mailbox_domains(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    let (tables, names): (Vec<String>, Vec<String>) =
        maps(value).into_iter().partition(|m| m.contains(':'));
    let mut keys = Vec::new();
    if !names.is_empty() {
        let list = names.into_iter().map(toml::Value::String).collect();
        out.set("local.domains", toml::Value::Array(list));
        keys.push("local.domains".to_string());
    }
    match tables.as_slice() {
        [] => {}
        [one] => {
            out.set("local.domain_table", toml::Value::String(one.clone()));
            keys.push("local.domain_table".into());
        }
        _ => return Verdict::Unsupported("more than one domain table: make them one".into()),
    }
    Verdict::Translated(keys)
}

/// `private/…` and other relative socket paths are under the queue
/// directory, as Postfix resolves them.
fn queue_path(pf: &Postfix, path: &str) -> String {
    match path.starts_with('/') {
        true => path.to_string(),
        false => format!("{}/{path}", pf.get("queue_directory").unwrap_or_default()),
    }
}

fn virtual_transport(pf: &Postfix, out: &mut Out, value: &str) -> Verdict {
    let value = value.trim();
    let hop = match value.split_once(':') {
        None if value == "virtual" => "maildir".to_string(),
        Some(("lmtp", rest)) => match rest.strip_prefix("unix:") {
            Some(path) => format!("lmtp:unix:{}", queue_path(pf, path)),
            None => format!("lmtp:{}", rest.strip_prefix("inet:").unwrap_or(rest)),
        },
        _ => {
            return Verdict::Unsupported(format!(
                "virtual_transport {value:?}: Sluice delivers to Maildir or over LMTP"
            ))
        }
    };
    set(out, "local.transport", Kind::Str, &hop)
}

fn relayhost(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    let v = value.trim();
    if v.is_empty() {
        return Verdict::Same("no relayhost: Sluice's default".into());
    }
    if v.contains([',', ' ']) {
        return Verdict::Unsupported("a list of relayhosts: give one".into());
    }
    set(out, "delivery.relayhost", Kind::Str, &format!("smtp:{v}"))
}

fn smtp_tls_level(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    match value.trim() {
        "" | "none" | "may" | "encrypt" | "verify" => {
            let level = if value.trim().is_empty() {
                "none"
            } else {
                value.trim()
            };
            set(out, "delivery.tls_security_level", Kind::Str, level)
        }
        "dane" | "dane-only" => {
            out.set("delivery.dane", toml::Value::Boolean(true));
            out.set("delivery.tls_security_level", "may".into());
            Verdict::Translated(vec![
                "delivery.dane".into(),
                "delivery.tls_security_level".into(),
            ])
        }
        other => Verdict::Unsupported(format!("smtp_tls_security_level {other:?}")),
    }
}

fn smtpd_tls_level(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    match value.trim() {
        "none" => set(out, "tls.enabled", Kind::Bool, "no"),
        "may" | "" => Verdict::Same("STARTTLS offered: Sluice's default".into()),
        other => Verdict::Unsupported(format!(
            "smtpd_tls_security_level = {other} on port 25: Sluice requires TLS on submission listeners only"
        )),
    }
}

fn smtpd_use_tls(pf: &Postfix, out: &mut Out, value: &str) -> Verdict {
    match value.trim() {
        "no" if pf.main.raw("smtpd_tls_security_level").is_none() => {
            set(out, "tls.enabled", Kind::Bool, "no")
        }
        _ => Verdict::Same("deprecated (smtpd_tls_security_level decides)".into()),
    }
}

fn sasl_type(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    match value.trim() {
        "dovecot" => set(out, "auth.type", Kind::Str, "dovecot"),
        other => Verdict::Unsupported(format!(
            "smtpd_sasl_type = {other}: Sluice speaks Dovecot's protocol or checks its own table"
        )),
    }
}

fn sasl_path(pf: &Postfix, out: &mut Out, value: &str) -> Verdict {
    if pf.get("smtpd_sasl_type").unwrap_or_default().trim() != "dovecot" {
        return Verdict::NotNeeded("only Dovecot's socket is used".into());
    }
    let path = match value.strip_prefix("inet:") {
        Some(addr) => format!("inet:{addr}"),
        None => queue_path(pf, value),
    };
    set(out, "auth.dovecot_path", Kind::Str, &path)
}

fn tls_auth_only(_: &Postfix, _: &mut Out, value: &str) -> Verdict {
    match value.trim() {
        "yes" => Verdict::Same("AUTH only after STARTTLS: Sluice's default".into()),
        _ => Verdict::Unsupported(
            "AUTH in clear on port 25: set auth_without_tls on a listener of your own".into(),
        ),
    }
}

fn aliases(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    // Both become [system]'s; the daemon reads the text files directly.
    let list: Vec<toml::Value> = maps(value).into_iter().map(toml::Value::String).collect();
    let key = match out.has("system.alias_maps") {
        true => "system.alias_database",
        false => "system.alias_maps",
    };
    out.set(key, toml::Value::Array(list));
    Verdict::Translated(vec![key.into()])
}

fn mydestination(_: &Postfix, out: &mut Out, value: &str) -> Verdict {
    if maps(value).iter().any(|m| m.contains(':')) {
        return Verdict::Unsupported("mydestination from a table: list the domains".into());
    }
    set(out, "system.mydestination", Kind::List, value)
}

fn listen(pf: &Postfix, out: &mut Out, _: &str) -> Verdict {
    super::implied::listeners(pf, out);
    Verdict::Translated(vec!["smtpd.listen".into()])
}

fn append_dot_mydomain(_: &Postfix, _: &mut Out, value: &str) -> Verdict {
    match value.trim() {
        "no" => Verdict::Same("Sluice never appends a domain to user@host".into()),
        _ => Verdict::Unsupported(
            "append_dot_mydomain = yes (user@host → user@host.$mydomain)".into(),
        ),
    }
}
