//! One argument of a pipe transport's `argv`, parsed once when the file
//! is read: literal text and pipe(8)'s macros (`${recipient}`, `$user`,
//! the deprecated `$(sender)`, `$$` for one `$`). An unknown macro name
//! is an error of the file (Postfix defers such mail with "mail system
//! configuration error"; Sluice refuses the file instead).
//!
//! Values only: `deliver/pipe/expand.rs` expands them. Trust: the
//! administrator's file. Invariant: `PipeArg::parse(a.text) == a`.

use serde::Deserialize;

/// A macro of pipe(8)'s `argv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Macro {
    Sender,
    Recipient,
    OriginalRecipient,
    User,
    Extension,
    Mailbox,
    Domain,
    Nexthop,
    QueueId,
    Size,
    ClientAddress,
    ClientHostname,
    ClientHelo,
    ClientPort,
    ClientProtocol,
    SaslMethod,
    SaslUsername,
    SaslSender,
    Envid,
}

impl Macro {
    fn named(name: &str) -> Option<Macro> {
        Some(match name {
            "sender" => Macro::Sender,
            "recipient" => Macro::Recipient,
            "original_recipient" => Macro::OriginalRecipient,
            "user" => Macro::User,
            "extension" => Macro::Extension,
            "mailbox" => Macro::Mailbox,
            "domain" => Macro::Domain,
            "nexthop" => Macro::Nexthop,
            "queue_id" => Macro::QueueId,
            "size" => Macro::Size,
            "client_address" => Macro::ClientAddress,
            "client_hostname" => Macro::ClientHostname,
            "client_helo" => Macro::ClientHelo,
            "client_port" => Macro::ClientPort,
            "client_protocol" => Macro::ClientProtocol,
            "sasl_method" => Macro::SaslMethod,
            "sasl_username" => Macro::SaslUsername,
            "sasl_sender" => Macro::SaslSender,
            "envid" => Macro::Envid,
            _ => return None,
        })
    }

    /// An argument holding this macro becomes one argument per recipient.
    pub fn per_recipient(self) -> bool {
        matches!(
            self,
            Macro::Recipient
                | Macro::OriginalRecipient
                | Macro::User
                | Macro::Extension
                | Macro::Mailbox
                | Macro::Domain
        )
    }
}

/// A piece of an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Macro(Macro),
}

/// One argument: its text as written, and its pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipeArg {
    pub text: String,
    pub parts: Vec<Part>,
}

impl PipeArg {
    pub fn parse(text: &str) -> Result<PipeArg, String> {
        if text.contains('\0') {
            return Err(format!("argv {text:?}: a NUL byte"));
        }
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(i) = rest.find('$') {
            lit.push_str(&rest[..i]);
            rest = &rest[i + 1..];
            let (name, after) = match rest.chars().next() {
                Some('$') => {
                    lit.push('$');
                    rest = &rest[1..];
                    continue;
                }
                Some(open @ ('{' | '(')) => {
                    let close = if open == '{' { '}' } else { ')' };
                    let end = rest
                        .find(close)
                        .ok_or_else(|| format!("argv {text:?}: unclosed {open}"))?;
                    (&rest[1..end], &rest[end + 1..])
                }
                _ => {
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    (&rest[..end], &rest[end..])
                }
            };
            let m = Macro::named(name)
                .ok_or_else(|| format!("argv {text:?}: unknown macro ${{{name}}}"))?;
            if !lit.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut lit)));
            }
            parts.push(Part::Macro(m));
            rest = after;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Text(lit));
        }
        Ok(PipeArg {
            text: text.into(),
            parts,
        })
    }

    /// It holds a per-recipient macro.
    pub fn per_recipient(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Macro(m) if m.per_recipient()))
    }
}

impl std::fmt::Display for PipeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for PipeArg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        PipeArg::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

super::as_text!(PipeArg);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macros_in_all_three_forms() {
        let a = PipeArg::parse("-f${sender}x$user$(domain)$$").unwrap();
        assert_eq!(
            a.parts,
            vec![
                Part::Text("-f".into()),
                Part::Macro(Macro::Sender),
                Part::Text("x".into()),
                Part::Macro(Macro::User),
                Part::Macro(Macro::Domain),
                Part::Text("$".into()),
            ]
        );
        assert!(a.per_recipient());
        assert!(!PipeArg::parse("${sender}").unwrap().per_recipient());
        for bad in ["${nope}", "${sender", "$", "a\0b"] {
            assert!(PipeArg::parse(bad).is_err(), "{bad}");
        }
    }
}
