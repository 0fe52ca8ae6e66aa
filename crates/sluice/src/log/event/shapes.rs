//! The events whose shape depends on what happened: a `reject`, a
//! `reload`, a `connect_failed`. Untagged: each shape is told apart by
//! the fields only it has (tried in order, the most specific first).
//!
//! Trusts nothing: a line that fits no shape fails to read. Each shape's
//! human line is here too.

use std::fmt::{self, Display, Formatter};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{Qid, Text};

/// A refused command, connection or message (event `reject`). Its shape
/// says which: untagged, told apart by the fields only it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reject<'a> {
    /// Over a per-minute rate at MAIL (`to` null) or RCPT (`rate_limit`).
    RateLimit {
        stage: Text<'a>,
        client_ip: IpAddr,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        from: Text<'a>,
        to: Option<Text<'a>>,
        proto: Text<'a>,
        helo: Text<'a>,
    },
    /// A policy service's refusal (`policy`; `stage` is `RCPT`, `DATA` or
    /// `END-OF-MESSAGE`; `to` empty but at RCPT).
    Policy {
        queue_id: Qid,
        stage: Text<'a>,
        client_ip: IpAddr,
        to: Text<'a>,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        why: Text<'a>,
    },
    /// A restriction list refused (`restriction`; `by` the keyword,
    /// `text` Postfix's reply text after the codes).
    Restriction {
        queue_id: Qid,
        stage: Text<'a>,
        client_ip: IpAddr,
        from: Text<'a>,
        to: Text<'a>,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        by: Text<'a>,
        #[serde(rename = "reply")]
        text: Text<'a>,
    },
    /// `relay_denied`.
    Relay {
        stage: Text<'a>,
        client_ip: IpAddr,
        to: Text<'a>,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        why: Text<'a>,
    },
    /// `unknown_user`.
    UnknownUser {
        stage: Text<'a>,
        client_ip: IpAddr,
        to: Text<'a>,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        table: Text<'a>,
    },
    /// `lookup_failed`.
    LookupFailed {
        stage: Text<'a>,
        client_ip: IpAddr,
        to: Text<'a>,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        error: Text<'a>,
    },
    /// `dnsbl`, at connect.
    Dnsbl {
        stage: Text<'a>,
        client_ip: IpAddr,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
        list: Text<'a>,
    },
    /// By the intake, before the message is queued (`stage` `queue`;
    /// component `cleanup`).
    Queue {
        stage: Text<'a>,
        queue_id: Qid,
        cause: Text<'a>,
        error: Text<'a>,
        from: Text<'a>,
    },
    /// By the intake at the end of data (`stage` `data`; component
    /// `cleanup`).
    Data {
        stage: Text<'a>,
        queue_id: Qid,
        cause: Text<'a>,
        code: u16,
        dsn: Option<Text<'a>>,
        from: Text<'a>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    /// At connect, over the session or connection-rate limit (`sessions`,
    /// `connection_rate`).
    Connect {
        stage: Text<'a>,
        client_ip: IpAddr,
        code: u16,
        dsn: Text<'a>,
        cause: Text<'a>,
    },
}

/// A reload (event `reload`), by its `result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reload<'a> {
    /// `refused`: what failed (`cause`), the file's line or the address.
    Refused {
        result: Text<'a>,
        cause: Text<'a>,
        line: Option<u64>,
        addr: Option<Text<'a>>,
        error: Text<'a>,
    },
    /// `applied`: the sections changed, those waiting for a restart.
    Applied {
        result: Text<'a>,
        sections: Vec<Text<'a>>,
        later: Vec<Text<'a>>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    /// `certificate`: read again from `file`.
    Certificate { result: Text<'a>, file: Text<'a> },
    /// `certificate_kept`: the new one could not be read.
    CertificateKept { result: Text<'a>, error: Text<'a> },
}

/// A connection that failed (event `connect_failed`): to one host, or a
/// job's to its relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConnectFailed<'a> {
    Host {
        host: Text<'a>,
        ip: IpAddr,
        port: u16,
        down: bool,
        tls: bool,
        error: Text<'a>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    Job {
        queue_id: Qid,
        relay: Text<'a>,
        error: Text<'a>,
    },
}

impl Display for Reject<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Reject::RateLimit { stage, client_ip: ip, from, to, proto, helo, .. } => {
                let (verb, what) = match &**stage {
                    "rcpt" => ("RCPT", "too many recipients"),
                    _ => ("MAIL", "too much mail"),
                };
                write!(
                    f,
                    "NOQUEUE: reject: {verb} from [{ip}]: 450 4.7.1 Error: {what} from {ip}; from=<{from}>"
                )?;
                if let Some(to) = to {
                    write!(f, " to=<{to}>")?;
                }
                write!(f, " proto={proto} helo=<{helo}>")
            }
            Reject::Policy { queue_id, stage, client_ip, to, code, dsn, why, .. } => {
                write!(f, "{queue_id}: reject: {stage} from [{client_ip}]: {code} {dsn} ")?;
                match (&**stage, &**to) {
                    ("RCPT", to) if !to.is_empty() => {
                        write!(f, "<{to}>: Recipient address rejected")?
                    }
                    ("END-OF-MESSAGE", _) => f.write_str("<END-OF-MESSAGE>: End-of-data rejected")?,
                    _ => f.write_str("<DATA>: Data command rejected")?,
                }
                write!(f, ": {why}")
            }
            Reject::Restriction { queue_id, stage, client_ip, from, to, code, dsn, by, text, .. } => {
                write!(
                    f,
                    "{queue_id}: reject: {stage} from [{client_ip}]: {code} {dsn} {text}; from=<{from}>"
                )?;
                if !to.is_empty() {
                    write!(f, " to=<{to}>")?;
                }
                write!(f, " ({by})")
            }
            Reject::Relay { client_ip, to, code, dsn, why, .. } => write!(
                f,
                "NOQUEUE: reject: RCPT from [{client_ip}]: {code} {dsn} <{to}>: Relay access denied ({why})"
            ),
            Reject::UnknownUser { client_ip, to, table, code, dsn, .. } => write!(
                f,
                "NOQUEUE: reject: RCPT from [{client_ip}]: {code} {dsn} <{to}>: User unknown in {table}"
            ),
            Reject::LookupFailed { client_ip, to, error, .. } => write!(
                f,
                "NOQUEUE: reject: RCPT from [{client_ip}]: 451 4.3.0 <{to}>: Temporary lookup failure: {error}"
            ),
            Reject::Dnsbl { client_ip: ip, list, .. } => write!(
                f,
                "NOQUEUE: reject: connect from [{ip}]: 554 5.7.1 Service unavailable; client [{ip}] blocked using {list}"
            ),
            Reject::Queue { queue_id, error, from, .. } => {
                write!(f, "{queue_id}: reject: {error}; from=<{from}>")
            }
            Reject::Data { line, .. } => f.write_str(line),
            Reject::Connect { client_ip, cause, .. } => {
                let what = match &**cause {
                    "connection_rate" => "too many connections per minute",
                    _ => "too many connections",
                };
                write!(
                    f,
                    "NOQUEUE: reject: connect from [{client_ip}]: 421 4.7.0 {what}"
                )
            }
        }
    }
}

impl Display for Reload<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Reload::Refused { error, .. } => {
                write!(f, "reload: {error}; keeping the running configuration")
            }
            Reload::Applied { line, .. } => f.write_str(line),
            Reload::Certificate { file, .. } => write!(f, "reload: TLS certificate {file}"),
            Reload::CertificateKept { error, .. } => {
                write!(f, "reload: {error}; keeping the previous certificate")
            }
        }
    }
}

impl Display for ConnectFailed<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ConnectFailed::Host { line, .. } => f.write_str(line),
            ConnectFailed::Job {
                queue_id,
                relay,
                error,
            } => {
                write!(f, "{queue_id}: connect to {relay}: {error}")
            }
        }
    }
}
