//! pipe(8)'s argv macros, expanded: an argument holding a per-recipient
//! macro (`${recipient}`, `${user}`, …) becomes one argument per
//! recipient, the others one argument each (Postfix's `expand_argv`).
//! Each expansion is one argument whatever it holds (spaces, quotes,
//! `$(…)`, a leading `-`): nothing here is seen by a shell, and the
//! result is never split again.
//!
//! Trust: addresses come from the SMTP client (they may hold anything an
//! address may); the template is the administrator's. Pure: no I/O.

use crate::config::pipe::PipeFlags;
use crate::config::pipe_argv::{Macro, Part, PipeArg};

/// One recipient as the macros see it.
#[derive(Debug, Clone)]
pub struct Rcpt<'a> {
    pub address: &'a str,
    /// As given before aliasing (`${original_recipient}`, `O`).
    pub original: &'a str,
}

/// What the macros expand to that is the same for every recipient.
#[derive(Debug, Clone, Default)]
pub struct Values<'a> {
    /// The envelope sender, the null sender already replaced.
    pub sender: &'a str,
    pub nexthop: &'a str,
    pub queue_id: &'a str,
    pub size: u64,
    pub sasl_username: &'a str,
    /// Postfix's recipient_delimiter (any one of these characters).
    pub delimiter: &'a str,
}

/// The argument vector for `rcpts` (one command's recipients).
pub fn expand(
    template: &[PipeArg],
    values: &Values<'_>,
    rcpts: &[Rcpt<'_>],
    flags: PipeFlags,
) -> Vec<String> {
    let mut out = Vec::with_capacity(template.len() + rcpts.len());
    for arg in template {
        if arg.per_recipient() {
            out.extend(rcpts.iter().map(|r| one(arg, values, Some(r), flags)));
        } else {
            out.push(one(arg, values, None, flags));
        }
    }
    out
}

fn one(arg: &PipeArg, v: &Values<'_>, rcpt: Option<&Rcpt<'_>>, flags: PipeFlags) -> String {
    let mut s = String::new();
    for part in &arg.parts {
        match part {
            Part::Text(t) => s.push_str(t),
            Part::Macro(m) => s.push_str(&value(*m, v, rcpt, flags)),
        }
    }
    s
}

fn value(m: Macro, v: &Values<'_>, rcpt: Option<&Rcpt<'_>>, flags: PipeFlags) -> String {
    let address = &unquote(rcpt.map_or("", |r| r.address));
    let folded = || fold(address, flags);
    match m {
        Macro::Sender if flags.quote && !v.sender.is_empty() => quote_822_local(&unquote(v.sender)),
        Macro::Sender => unquote(v.sender),
        Macro::Recipient => morph(address, flags),
        Macro::OriginalRecipient => morph(&unquote(rcpt.map_or("", |r| r.original)), flags),
        Macro::Mailbox => local_part(&folded()).to_string(),
        Macro::User => split_extension(local_part(&folded()), v.delimiter).0.into(),
        Macro::Extension => split_extension(local_part(&folded()), v.delimiter).1.into(),
        Macro::Domain => domain_part(&folded()).to_string(),
        Macro::Nexthop if flags.fold_host => v.nexthop.to_lowercase(),
        Macro::Nexthop => v.nexthop.into(),
        Macro::QueueId => v.queue_id.into(),
        Macro::Size => v.size.to_string(),
        Macro::SaslUsername => v.sasl_username.into(),
        // What the queue does not keep of the client (Postfix passes it
        // from the queue file): empty.
        Macro::ClientAddress
        | Macro::ClientHostname
        | Macro::ClientHelo
        | Macro::ClientPort
        | Macro::ClientProtocol
        | Macro::SaslMethod
        | Macro::SaslSender
        | Macro::Envid => String::new(),
    }
}

/// Quoted (`q`), then folded (`h`, `u`): Postfix's morph_recipient.
fn morph(address: &str, flags: PipeFlags) -> String {
    let quoted = match flags.quote {
        true => quote_822_local(address),
        false => address.to_string(),
    };
    fold(&quoted, flags)
}

/// `u` lowers the local part, `h` the domain (right of the last `@`).
fn fold(address: &str, flags: PipeFlags) -> String {
    let (local, domain) = match address.rfind('@') {
        Some(at) => (&address[..at], &address[at..]),
        None => (address, ""),
    };
    let local = match flags.fold_user {
        true => local.to_lowercase(),
        false => local.to_string(),
    };
    let domain = match flags.fold_host {
        true => domain.to_lowercase(),
        false => domain.to_string(),
    };
    local + &domain
}

fn local_part(address: &str) -> &str {
    address.rfind('@').map_or(address, |at| &address[..at])
}

fn domain_part(address: &str) -> &str {
    address.rfind('@').map_or("", |at| &address[at + 1..])
}

/// (user, extension) at the first delimiter character; no delimiter or
/// none configured: (local, "").
pub fn split_extension<'a>(local: &'a str, delimiter: &str) -> (&'a str, &'a str) {
    if delimiter.is_empty() {
        return (local, "");
    }
    match local.find(|c| delimiter.contains(c)) {
        Some(i) => {
            let c = local[i..].chars().next().map_or(1, char::len_utf8);
            (&local[..i], &local[i + c..])
        }
        None => (local, ""),
    }
}

/// An address in Postfix's internal form: a quoted local part
/// (`"a b"@x`, as SMTP carries it) unquoted (`a b@x`), its backslash
/// escapes undone. Postfix's macros and headers start from this form.
pub fn unquote(address: &str) -> String {
    let (local, domain) = match address.rfind('@') {
        Some(at) => (&address[..at], &address[at..]),
        None => (address, ""),
    };
    let Some(inner) = local
        .strip_prefix('"')
        .and_then(|l| l.strip_suffix('"'))
        .filter(|_| local.len() >= 2)
    else {
        return address.to_string();
    };
    let mut out = String::with_capacity(address.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out + domain
}

/// The local part (of an address in internal form) quoted as RFC 822 requires when it is not a dot-atom
/// (Postfix's quote_822_local, 8-bit transparent): `"a b"@example`.
pub fn quote_822_local(address: &str) -> String {
    let (local, domain) = match address.rfind('@') {
        Some(at) => (&address[..at], &address[at..]),
        None => (address, ""),
    };
    if is_dot_string(local) {
        return address.to_string();
    }
    let mut q = String::with_capacity(local.len() + domain.len() + 4);
    q.push('"');
    for c in local.chars() {
        if matches!(c, '"' | '\\' | '\r') {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q + domain
}

fn is_dot_string(local: &str) -> bool {
    const SPECIALS: &str = "()<>@,;:\\\".[] ";
    !local.is_empty()
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .chars()
            .all(|c| c == '.' || !(c.is_ascii_control() || SPECIALS.contains(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(t: &[&str]) -> Vec<PipeArg> {
        t.iter().map(|a| PipeArg::parse(a).unwrap()).collect()
    }

    #[test]
    fn recipients_become_one_argument_each() {
        let v = Values {
            sender: "s@x.example",
            nexthop: "Host.Example",
            delimiter: "+",
            ..Default::default()
        };
        let r = |a| Rcpt {
            address: a,
            original: a,
        };
        let rcpts = [r("Al+ice@B.example"), r("\"$(touch /tmp/x)\"@x")];
        let flags = PipeFlags::parse("h").unwrap();
        let got = expand(
            &args(&[
                "/bin/p",
                "-f",
                "${sender}",
                "--",
                "${recipient}",
                "u=${user}",
                "e=$extension",
                "$nexthop",
            ]),
            &v,
            &rcpts,
            flags,
        );
        assert_eq!(
            got,
            [
                "/bin/p",
                "-f",
                "s@x.example",
                "--",
                "Al+ice@b.example",
                "$(touch /tmp/x)@x",
                "u=Al",
                "u=$(touch /tmp/x)",
                "e=ice",
                "e=",
                "host.example"
            ]
        );
    }

    #[test]
    fn quoting_as_rfc_822() {
        assert_eq!(quote_822_local("a b@x"), "\"a b\"@x");
        assert_eq!(quote_822_local("a.b@x"), "a.b@x");
        assert_eq!(quote_822_local("-flag@x"), "-flag@x");
        assert_eq!(quote_822_local("a\"b@x"), "\"a\\\"b\"@x");
        assert_eq!(split_extension("a-b+c", "+-"), ("a", "b+c"));
        assert_eq!(unquote("\"a \\\"b\"@x"), "a \"b@x");
        assert_eq!(quote_822_local(&unquote("\"a b\"@x")), "\"a b\"@x");
        assert_eq!(unquote("\"@x"), "\"@x");
    }
}
