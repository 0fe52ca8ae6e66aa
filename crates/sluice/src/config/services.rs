//! Value types for the outside services Sluice asks (policy servers, and
//! later milters): where they listen, and what a policy answer means.
//!
//! Both are parsed when the file is read (a bad one names its line); the
//! policy client (`receive/policy.rs`) parses answers with the same
//! [`PolicyAction::parse`], so the configured default action and a
//! server's answer can never mean different things.
//! Trust: addresses are the operator's; an action may come from a policy
//! server's reply, so its text is stripped of control characters before it
//! can reach an SMTP reply or a header.

use std::path::PathBuf;

use crate::message::reply::{Enhanced, Reply};

/// Where a service listens: `inet:host:port` (or `host:port`) or
/// `unix:/path` (Postfix's notation).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum ServiceAddr {
    Inet { host: String, port: u16 },
    Unix(PathBuf),
}

/// A service address that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad service address {0:?} (want inet:host:port or unix:/path)")]
pub struct BadService(pub String);

impl TryFrom<String> for ServiceAddr {
    type Error = BadService;
    fn try_from(text: String) -> Result<ServiceAddr, BadService> {
        text.parse()
    }
}

impl std::str::FromStr for ServiceAddr {
    type Err = BadService;
    fn from_str(text: &str) -> Result<ServiceAddr, BadService> {
        let bad = || BadService(text.to_string());
        if let Some(path) = text.strip_prefix("unix:") {
            return match path.starts_with('/') {
                true => Ok(ServiceAddr::Unix(PathBuf::from(path))),
                false => Err(bad()),
            };
        }
        let inet = text.strip_prefix("inet:").unwrap_or(text);
        let (host, port) = inet.rsplit_once(':').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port: u16 = port.parse().map_err(|_| bad())?;
        let name_ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c));
        if port == 0 || !name_ok {
            return Err(bad());
        }
        Ok(ServiceAddr::Inet {
            host: host.to_string(),
            port,
        })
    }
}

super::as_text!(ServiceAddr, PolicyAction);

impl std::fmt::Display for PolicyAction {
    /// access(5) text that parses back to the same action.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyAction::Dunno => f.write_str("DUNNO"),
            PolicyAction::Ok => f.write_str("OK"),
            PolicyAction::Reject(r) | PolicyAction::Defer(r) => write!(f, "{r}"),
            PolicyAction::DeferIfReject => f.write_str("DEFER_IF_REJECT"),
            PolicyAction::Prepend(h) => write!(f, "PREPEND {h}"),
            PolicyAction::Discard(t) => write!(f, "DISCARD {t}"),
            PolicyAction::Log(t) => write!(f, "WARN {t}"),
            PolicyAction::Unsupported(t) => f.write_str(t),
        }
    }
}

impl std::fmt::Display for ServiceAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceAddr::Inet { host, port } if host.contains(':') => {
                write!(f, "inet:[{host}]:{port}")
            }
            ServiceAddr::Inet { host, port } => write!(f, "inet:{host}:{port}"),
            ServiceAddr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// When the policy service is asked (Postfix's `protocol_state` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyStage {
    /// Each RCPT TO, once Sluice itself would accept the recipient.
    Rcpt,
    /// The DATA (or first BDAT) command, for the whole transaction.
    Data,
    /// The end of the message, before it is queued.
    EndOfMessage,
}

impl PolicyStage {
    /// The `protocol_state` attribute's value.
    pub fn protocol_state(self) -> &'static str {
        match self {
            PolicyStage::Rcpt => "RCPT",
            PolicyStage::Data => "DATA",
            PolicyStage::EndOfMessage => "END-OF-MESSAGE",
        }
    }
}

/// An access(5) action, as a policy server answers or as the configured
/// default: what happens to the recipient (or transaction).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum PolicyAction {
    /// No opinion: Sluice's own decision stands.
    Dunno,
    /// Accept (Sluice's own checks have already passed).
    Ok,
    /// A 5xx: `REJECT [text]` or `5NN [x.y.z] text` (always with a
    /// status).
    Reject(Reply),
    /// A 4xx: `DEFER [text]`, `DEFER_IF_PERMIT [text]` or `4NN text`
    /// (Sluice asks only once it would accept, so "if permit" holds).
    Defer(Reply),
    /// `DEFER_IF_REJECT`: Sluice would accept, so nothing happens.
    DeferIfReject,
    /// Add this header field (`Name: value`) to the message.
    Prepend(String),
    /// Accept, then throw the whole message away.
    Discard(String),
    /// `WARN`/`INFO text`: log it and go on.
    Log(String),
    /// Anything else (HOLD, FILTER, REDIRECT, BCC, restriction names):
    /// not supported, so the default action applies rather than a guess.
    Unsupported(String),
}

/// A default action that does not parse, or is itself unsupported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad policy action {0:?} (want DUNNO, OK, REJECT, DEFER, DEFER_IF_PERMIT, 4NN or 5NN text)"
)]
pub struct BadAction(pub String);

impl TryFrom<String> for PolicyAction {
    type Error = BadAction;
    fn try_from(text: String) -> Result<PolicyAction, BadAction> {
        match PolicyAction::parse(&text) {
            PolicyAction::Unsupported(_) => Err(BadAction(text)),
            action => Ok(action),
        }
    }
}

impl PolicyAction {
    /// Postfix's default for a policy service that cannot answer.
    pub fn server_problem() -> PolicyAction {
        let text = "Server configuration problem";
        PolicyAction::Defer(Reply::smtp(451, Enhanced::new(4, 3, 5), text))
    }

    /// Parses the value of an `action=` line (case-insensitive keyword).
    pub fn parse(text: &str) -> PolicyAction {
        let text = clean(text);
        let (word, rest) = match text.split_once(' ') {
            Some((w, r)) => (w, r.trim()),
            None => (text.as_str(), ""),
        };
        let with = |code: u16, default: &str| {
            let text = if rest.is_empty() { default } else { rest };
            let class = (code / 100) as u8;
            Reply::smtp(code, Enhanced::new(class, 7, 1), text)
        };
        match word.to_ascii_uppercase().as_str() {
            "DUNNO" => PolicyAction::Dunno,
            "OK" => PolicyAction::Ok,
            "REJECT" => PolicyAction::Reject(with(554, "Access denied")),
            "DEFER" | "DEFER_IF_PERMIT" => PolicyAction::Defer(with(450, "Service unavailable")),
            "DEFER_IF_REJECT" => PolicyAction::DeferIfReject,
            "PREPEND" if is_header(rest) => PolicyAction::Prepend(rest.to_string()),
            "DISCARD" => PolicyAction::Discard(rest.to_string()),
            "WARN" | "INFO" => PolicyAction::Log(rest.to_string()),
            _ => numeric(word, rest).unwrap_or(PolicyAction::Unsupported(text.clone())),
        }
    }
}

/// `4NN [x.y.z] text` or `5NN [x.y.z] text` (text required, as Postfix):
/// the policy service's answer, parsed once, here, where it comes in.
fn numeric(word: &str, rest: &str) -> Option<PolicyAction> {
    let code: u16 = word.parse().ok().filter(|c| (400..600).contains(c))?;
    if word.len() != 3 || rest.is_empty() {
        return None;
    }
    let class = (code / 100) as u8;
    // An enhanced status code whose class matches the reply's.
    let status = |text: &str| Enhanced::parse(text).filter(|s| s.class() == class);
    let (first, after) = rest.split_once(' ').unwrap_or((rest, ""));
    let (status, text) = match status(first) {
        Some(s) => (s, after.trim()),
        None => (Enhanced::new(class, 7, 1)?, rest),
    };
    let reply = Reply::smtp(code, Some(status), text);
    Some(match class {
        4 => PolicyAction::Defer(reply),
        _ => PolicyAction::Reject(reply),
    })
}

/// `Name: value` with a field name of printable ASCII but colon (RFC 5322).
fn is_header(text: &str) -> bool {
    text.split_once(':').is_some_and(|(name, _)| {
        !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
    })
}

/// Control characters (CR, NUL, ...) become spaces; at most 400 bytes.
fn clean(text: &str) -> String {
    let mut out: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > 400 {
        let mut end = 400;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_addresses_parse() {
        let a: ServiceAddr = "inet:127.0.0.1:10023".parse().unwrap();
        assert_eq!(a.to_string(), "inet:127.0.0.1:10023");
        let b: ServiceAddr = "[::1]:10023".parse().unwrap();
        assert_eq!(b.to_string(), "inet:[::1]:10023");
        let c: ServiceAddr = "unix:/run/postgrey.sock".parse().unwrap();
        assert_eq!(c, ServiceAddr::Unix("/run/postgrey.sock".into()));
        for bad in ["inet:host", "unix:relative", "inet:a b:1", "inet:h:0", "x"] {
            assert!(bad.parse::<ServiceAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn actions_parse_as_postfix_reads_them() {
        use PolicyAction::*;
        assert_eq!(PolicyAction::parse("dunno"), Dunno);
        assert_eq!(PolicyAction::parse("OK"), Ok);
        let grey = PolicyAction::parse("DEFER_IF_PERMIT Greylisted, see x");
        assert_eq!(
            grey,
            Defer(Reply::smtp(
                450,
                Enhanced::new(4, 7, 1),
                "Greylisted, see x"
            ))
        );
        let five = PolicyAction::parse("550 5.7.0 No thanks");
        assert!(
            matches!(&five, Reject(r) if r.code == 550 && r.status == Enhanced::new(5, 7, 0) && r.text == "No thanks")
        );
        let four = PolicyAction::parse("421 try later");
        let four_seven_one = Enhanced::new(4, 7, 1);
        assert!(matches!(&four, Defer(r) if r.status == four_seven_one && r.text == "try later"));
        let not_its_class = PolicyAction::parse("450 5.1.1 x");
        assert!(matches!(not_its_class, Defer(r) if r.status == four_seven_one));
        assert_eq!(
            PolicyAction::parse("PREPEND X-Greylist: delayed 2 seconds"),
            Prepend("X-Greylist: delayed 2 seconds".into())
        );
        for unsupported in ["PREPEND no colon", "HOLD", "REDIRECT a@b", "250 fine", "5"] {
            assert!(
                matches!(PolicyAction::parse(unsupported), Unsupported(_)),
                "{unsupported}"
            );
        }
    }

    #[test]
    fn a_server_cannot_put_line_breaks_into_a_reply() {
        let a = PolicyAction::parse("REJECT bad\r\n250 ok");
        assert!(
            matches!(&a, PolicyAction::Reject(r) if !r.text.contains('\r') && !r.text.contains('\n'))
        );
    }

    #[test]
    fn the_default_action_must_be_one_sluice_applies() {
        let ok: PolicyAction = String::from("451 4.3.5 Server configuration problem")
            .try_into()
            .unwrap();
        assert_eq!(ok, PolicyAction::server_problem());
        assert!(PolicyAction::try_from(String::from("HOLD")).is_err());
    }
}
