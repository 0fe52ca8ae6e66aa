//! One framed command line to a typed command, strictly.
//!
//! Hand-written on purpose (with [`crate::address`]): the session needs
//! what general parsers smooth over — arguments after `DATA`/`RSET`/`QUIT`/
//! `STARTTLS` are errors (RFC 5321 §4.1.1), a parameter we did not
//! advertise is `555` (RFC 5321 §4.1.1.11), a control character or invalid
//! UTF-8 anywhere is refused rather than dropped or replaced, and the HELO
//! name must be a domain or an address literal, so it can go into a
//! `Received:` header as it is.
//!
//! Trust: the line comes from a hostile client; [`crate::line`] has
//! already checked its length, its CRLF ending and NUL. Nothing here
//! panics on input.

use crate::address::{parse_domain, parse_path, AddressError, Path};
use crate::dsn::{self, Ret};

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    Ehlo(String),
    Helo(String),
    Mail(Path, MailParams),
    Rcpt(Path, RcptParams),
    Data,
    Bdat {
        size: usize,
        last: bool,
    },
    Rset,
    Noop,
    Quit,
    Vrfy,
    Expn,
    Help,
    StartTls,
    /// `AUTH mechanism [initial-response]`.
    Auth(&'a str, Option<&'a str>),
}

/// `BODY=` values we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    SevenBit,
    EightBitMime,
}

/// Parameters of `MAIL FROM` (RFC 1870 SIZE, RFC 6152 BODY, RFC 6531
/// SMTPUTF8, RFC 4954 AUTH, RFC 3461 RET and ENVID).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailParams {
    pub size: Option<u64>,
    pub body: Option<Body>,
    pub smtputf8: bool,
    /// `AUTH=` as given (xtext), only meaningful when AUTH was offered.
    pub auth: Option<String>,
    pub ret: Option<Ret>,
    /// `ENVID=` as given (xtext).
    pub envid: Option<String>,
}

/// Parameters of `RCPT TO` (RFC 3461 NOTIFY and ORCPT).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RcptParams {
    /// [`dsn`] NOTIFY bits; 0 when not given.
    pub notify: u8,
    /// `ORCPT=` as given (`addr-type;xtext`).
    pub orcpt: Option<String>,
}

impl MailParams {
    pub fn any(&self) -> bool {
        *self != MailParams::default()
    }
}

/// Why a line is refused, with the reply the session sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// `500 5.5.1`
    Unknown,
    /// `501 5.5.4 Syntax: {usage}`
    Syntax(&'static str),
    /// `501 5.5.2`: a control character or invalid UTF-8.
    BadOctet,
    /// `501 5.1.7` (MAIL) or `501 5.1.3` (RCPT).
    Address { rcpt: bool, why: AddressError },
    /// `555 5.5.4`: a parameter that was not advertised, or a bad value.
    Parameter(String),
    /// `501 5.5.4`: a DSN parameter with a malformed value.
    BadValue(String),
    /// A BDAT line whose chunk size cannot be read: the chunk that follows
    /// cannot be found, so the session must close.
    BdatSyntax,
}

impl CommandError {
    /// The reply line (without CRLF).
    pub fn reply(&self) -> String {
        match self {
            CommandError::Unknown => "500 5.5.1 Error: command not recognized".into(),
            CommandError::Syntax(usage) => format!("501 5.5.4 Syntax: {usage}"),
            CommandError::BadOctet => {
                "501 5.5.2 Error: control character or invalid UTF-8 in command".into()
            }
            CommandError::Address { rcpt: false, why } => {
                format!("501 5.1.7 Bad sender address syntax: {}", why.text())
            }
            CommandError::Address { rcpt: true, why } => {
                format!("501 5.1.3 Bad recipient address syntax: {}", why.text())
            }
            CommandError::Parameter(p) => format!("555 5.5.4 Unsupported parameter {p:?}"),
            CommandError::BadValue(p) => format!("501 5.5.4 Bad parameter value {p:?}"),
            CommandError::BdatSyntax => "501 5.5.4 Syntax: BDAT size [LAST]".into(),
        }
    }
}

/// Parses a complete command line, CRLF included.
pub fn parse_command(line: &[u8]) -> Result<Command<'_>, CommandError> {
    let line = line.strip_suffix(b"\r\n").unwrap_or(line);
    let line = std::str::from_utf8(line).map_err(|_| CommandError::BadOctet)?;
    // C0, DEL and the C1 controls (U+0080 to U+009F, e.g. NEL).
    if line.contains(char::is_control) {
        return Err(CommandError::BadOctet);
    }
    let (verb, rest) = match line.find(' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, ""),
    };
    let no_args = |c: Command<'static>, usage| {
        if rest.trim_end_matches(' ').is_empty() {
            Ok(c)
        } else {
            Err(CommandError::Syntax(usage))
        }
    };
    // Verbs are ASCII and case-insensitive; compared without allocating.
    let is = |name: &str| verb.eq_ignore_ascii_case(name);
    if is("MAIL") {
        mail(rest)
    } else if is("RCPT") {
        rcpt(rest)
    } else if is("EHLO") {
        hello(rest, "EHLO hostname").map(Command::Ehlo)
    } else if is("HELO") {
        hello(rest, "HELO hostname").map(Command::Helo)
    } else if is("DATA") {
        no_args(Command::Data, "DATA")
    } else if is("BDAT") {
        bdat(rest)
    } else if is("RSET") {
        no_args(Command::Rset, "RSET")
    } else if is("QUIT") {
        no_args(Command::Quit, "QUIT")
    } else if is("STARTTLS") {
        no_args(Command::StartTls, "STARTTLS")
    } else if is("NOOP") {
        Ok(Command::Noop)
    } else if is("HELP") {
        Ok(Command::Help)
    } else if is("VRFY") {
        match rest.trim().is_empty() {
            true => Err(CommandError::Syntax("VRFY address")),
            false => Ok(Command::Vrfy),
        }
    } else if is("EXPN") {
        Ok(Command::Expn)
    } else if is("AUTH") {
        auth(rest)
    } else {
        Err(CommandError::Unknown)
    }
}

/// The HELO/EHLO argument: one domain or address literal.
fn hello(rest: &str, usage: &'static str) -> Result<String, CommandError> {
    let name = rest.trim_matches(' ');
    if name.is_empty() || name.contains(' ') || !name.is_ascii() {
        return Err(CommandError::Syntax(usage));
    }
    let ok = match name.strip_prefix('[') {
        Some(lit) => lit
            .strip_suffix(']')
            .is_some_and(|l| l.parse::<std::net::Ipv4Addr>().is_ok() || is_v6_literal(l)),
        // Underscores are common in real HELO names; allow them, as Postfix does.
        None => parse_domain(&name.replace('_', "-")).is_ok(),
    };
    if ok {
        Ok(name.to_string())
    } else {
        Err(CommandError::Syntax(usage))
    }
}

fn is_v6_literal(l: &str) -> bool {
    l.get(..5).is_some_and(|t| t.eq_ignore_ascii_case("IPv6:"))
        && l[5..].parse::<std::net::Ipv6Addr>().is_ok()
}

/// `FROM:` or `TO:` then the path (spaces after the colon tolerated, as
/// Postfix does), then the parameters.
fn path_arg<'a>(rest: &'a str, keyword: &str) -> Option<&'a str> {
    let head = rest.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    Some(rest[keyword.len()..].trim_start_matches(' '))
}

fn mail(rest: &str) -> Result<Command<'static>, CommandError> {
    let arg = path_arg(rest, "FROM:").ok_or(CommandError::Syntax("MAIL FROM:<address>"))?;
    let (path, params) =
        parse_path(arg).map_err(|why| CommandError::Address { rcpt: false, why })?;
    let mut out = MailParams::default();
    for p in parameters(params)? {
        let (key, value) = p;
        match (key.to_ascii_uppercase().as_str(), value) {
            ("SIZE", Some(v)) if out.size.is_none() => {
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    // A known parameter with a bad value: a syntax error
                    // in parameters (RFC 5321 §4.2.3, RFC 1870), not 555.
                    return Err(CommandError::BadValue(format!("SIZE={v}")));
                }
                out.size = Some(v.parse().unwrap_or(u64::MAX));
            }
            ("BODY", Some(v)) if out.body.is_none() => {
                out.body = Some(match v.to_ascii_uppercase().as_str() {
                    "7BIT" => Body::SevenBit,
                    "8BITMIME" => Body::EightBitMime,
                    _ => return Err(CommandError::Parameter(format!("BODY={v}"))),
                })
            }
            ("SMTPUTF8", None) if !out.smtputf8 => out.smtputf8 = true,
            ("AUTH", Some(v)) if out.auth.is_none() => out.auth = Some(v.to_string()),
            ("RET", Some(v)) if out.ret.is_none() => {
                out.ret = Some(dsn::parse_ret(v).ok_or_else(|| bad(key, v))?);
            }
            ("ENVID", Some(v)) if out.envid.is_none() => {
                if !dsn::valid_envid(v) {
                    return Err(bad(key, v));
                }
                out.envid = Some(v.to_string());
            }
            _ => return Err(CommandError::Parameter(display(key, value))),
        }
    }
    Ok(Command::Mail(path, out))
}

fn rcpt(rest: &str) -> Result<Command<'static>, CommandError> {
    let arg = path_arg(rest, "TO:").ok_or(CommandError::Syntax("RCPT TO:<address>"))?;
    let (path, params) =
        parse_path(arg).map_err(|why| CommandError::Address { rcpt: true, why })?;
    let mut out = RcptParams::default();
    for (key, value) in parameters(params)? {
        match (key.to_ascii_uppercase().as_str(), value) {
            ("NOTIFY", Some(v)) if out.notify == 0 => {
                out.notify = dsn::parse_notify(v).ok_or_else(|| bad(key, v))?;
            }
            ("ORCPT", Some(v)) if out.orcpt.is_none() => {
                if !dsn::valid_orcpt(v) {
                    return Err(bad(key, v));
                }
                out.orcpt = Some(v.to_string());
            }
            _ => return Err(CommandError::Parameter(display(key, value))),
        }
    }
    Ok(Command::Rcpt(path, out))
}

fn bad(key: &str, value: &str) -> CommandError {
    CommandError::BadValue(format!("{key}={value}"))
}

fn display(key: &str, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{key}={v}"),
        None => key.to_string(),
    }
}

/// `SP key[=value]` pairs after a path (RFC 5321 §4.1.2 esmtp-param).
fn parameters(s: &str) -> Result<impl Iterator<Item = (&str, Option<&str>)>, CommandError> {
    if !s.is_empty() && !s.starts_with(' ') {
        return Err(CommandError::Syntax("address must be followed by a space"));
    }
    let params: Vec<_> = s
        .split(' ')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (p, None),
        })
        .collect();
    for (key, _) in &params {
        let good = key.starts_with(|c: char| c.is_ascii_alphanumeric())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !good {
            return Err(CommandError::Syntax("bad parameter"));
        }
    }
    Ok(params.into_iter())
}

fn bdat(rest: &str) -> Result<Command<'static>, CommandError> {
    let mut words = rest.split(' ').filter(|w| !w.is_empty());
    let size = words.next().ok_or(CommandError::BdatSyntax)?;
    if !size.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CommandError::BdatSyntax);
    }
    let size: usize = size.parse().map_err(|_| CommandError::BdatSyntax)?;
    let last = match words.next() {
        None => false,
        Some(w) if w.eq_ignore_ascii_case("LAST") => true,
        Some(_) => return Err(CommandError::BdatSyntax),
    };
    if words.next().is_some() {
        return Err(CommandError::BdatSyntax);
    }
    Ok(Command::Bdat { size, last })
}

fn auth(rest: &str) -> Result<Command<'_>, CommandError> {
    let mut words = rest.split(' ').filter(|w| !w.is_empty());
    let mechanism = words.next().ok_or(CommandError::Syntax("AUTH mechanism"))?;
    let initial = words.next();
    if words.next().is_some() {
        return Err(CommandError::Syntax("AUTH mechanism [initial-response]"));
    }
    Ok(Command::Auth(mechanism, initial))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Command<'_>, CommandError> {
        parse_command(s.as_bytes())
    }

    #[test]
    fn verbs() {
        assert_eq!(
            parse("ehlo  client.example\r\n"),
            Ok(Command::Ehlo("client.example".into()))
        );
        assert_eq!(
            parse("HELO [127.0.0.1]\r\n"),
            Ok(Command::Helo("[127.0.0.1]".into()))
        );
        assert_eq!(
            parse("HELO my_host\r\n"),
            Ok(Command::Helo("my_host".into()))
        );
        assert_eq!(parse("DATA\r\n"), Ok(Command::Data));
        assert_eq!(
            parse("BDAT 10 LAST\r\n"),
            Ok(Command::Bdat {
                size: 10,
                last: true
            })
        );
        assert_eq!(parse("NOOP anything\r\n"), Ok(Command::Noop));
        assert_eq!(
            parse("AUTH PLAIN AGEAYg==\r\n"),
            Ok(Command::Auth("PLAIN", Some("AGEAYg==")))
        );
        assert_eq!(parse("FROB\r\n"), Err(CommandError::Unknown));
    }

    #[test]
    fn strict_refusals() {
        for line in [
            "DATA foo\r\n",
            "RSET x\r\n",
            "QUIT now\r\n",
            "STARTTLS x\r\n",
        ] {
            assert!(
                matches!(parse(line), Err(CommandError::Syntax(_))),
                "{line}"
            );
        }
        for line in [
            "EHLO a;b(\r\n",
            "EHLO a b\r\n",
            "HELO\r\n",
            "EHLO [1.2.3]\r\n",
        ] {
            assert!(
                matches!(parse(line), Err(CommandError::Syntax(_))),
                "{line}"
            );
        }
        for line in [
            &b"EHLO a\x1bb\r\n"[..],
            b"RCPT TO:<us\rer@x.example>\r\n",
            b"RCPT TO:<a\x7fb@x.example>\r\n",
            b"MAIL FROM:<\xff@x.example>\r\n",
        ] {
            assert_eq!(parse_command(line), Err(CommandError::BadOctet), "{line:?}");
        }
        for line in [
            "BDAT 99999999999999999999999 LAST\r\n",
            "BDAT x\r\n",
            "BDAT 1 FIRST\r\n",
            "BDAT\r\n",
        ] {
            assert_eq!(parse(line), Err(CommandError::BdatSyntax), "{line}");
        }
    }

    #[test]
    fn parameters_are_known_or_555() {
        match parse("MAIL FROM: <a@b.example> SIZE=1234 body=8bitmime SMTPUTF8\r\n") {
            Ok(Command::Mail(_, p)) => {
                assert_eq!(p.size, Some(1234));
                assert_eq!(p.body, Some(Body::EightBitMime));
                assert!(p.smtputf8);
            }
            other => panic!("{other:?}"),
        }
        for line in [
            "MAIL FROM:<a@b.example> REQUIRETLS\r\n",
            "MAIL FROM:<a@b.example> BODY=BINARYMIME\r\n",
            "MAIL FROM:<a@b.example> SIZE=1 SIZE=2\r\n",
            "MAIL FROM:<a@b.example> HOLDUNTIL=1\r\n",
            "RCPT TO:<a@b.example> NOTIFY=NEVER NOTIFY=NEVER\r\n",
            "RCPT TO:<a@b.example> XFORWARD=1\r\n",
        ] {
            assert!(
                matches!(parse(line), Err(CommandError::Parameter(_))),
                "{line}"
            );
        }
        assert!(matches!(
            parse("RCPT TO:<a@b.example>junk\r\n"),
            Err(CommandError::Syntax(_))
        ));
        for size in ["abc", "", "-1", "1e3"] {
            let line = format!("MAIL FROM:<a@b> SIZE={size}\r\n");
            let err = parse(&line).unwrap_err();
            assert!(err.reply().starts_with("501 5.5.4"), "{line}: {err:?}");
        }
    }

    #[test]
    fn dsn_parameters() {
        match parse("RCPT TO:<a@b.example> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;a+2Bx@b.example\r\n")
        {
            Ok(Command::Rcpt(_, p)) => {
                assert_eq!(p.notify, dsn::NOTIFY_SUCCESS | dsn::NOTIFY_FAILURE);
                assert_eq!(p.orcpt.as_deref(), Some("rfc822;a+2Bx@b.example"));
            }
            other => panic!("{other:?}"),
        }
        match parse("MAIL FROM:<a@b.example> RET=HDRS ENVID=QQ314159\r\n") {
            Ok(Command::Mail(_, p)) => {
                assert_eq!(p.ret, Some(Ret::Hdrs));
                assert_eq!(p.envid.as_deref(), Some("QQ314159"));
            }
            other => panic!("{other:?}"),
        }
        for line in [
            "RCPT TO:<a@b.example> NOTIFY=NEVER,SUCCESS\r\n",
            "RCPT TO:<a@b.example> ORCPT=x@y\r\n",
            "MAIL FROM:<a@b.example> RET=ALL\r\n",
            "MAIL FROM:<a@b.example> ENVID=a+zz\r\n",
        ] {
            assert!(
                matches!(parse(line), Err(CommandError::BadValue(_))),
                "{line}"
            );
        }
    }
}
