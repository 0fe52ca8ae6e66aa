//! Content filters over the Sendmail milter protocol (rspamd, OpenDKIM,
//! ClamAV's clamav-milter...), as Postfix's smtpd_milters and
//! non_smtpd_milters: every message from an SMTP client or a local user
//! goes through the configured filters, in order, at the intake, before
//! it is signed and stored. Each filter is told the whole conversation
//! at the end of the message (connect, HELO, MAIL, RCPT, header, body),
//! as Postfix does for non-SMTP mail, so both doors are filtered alike;
//! its answer and the changes it asks for are applied before the next
//! filter sees the message.
//!
//! Trust: a filter is the operator's, but may be down, slow or broken:
//! every read has a deadline (`milter_*_timeout_secs`), frames are parsed
//! with limits (`proto.rs`), header changes are made safe (`fields.rs`).
//! Invariant: a filter that cannot answer gets `milter_default_action`
//! (tempfail by default: the client tries again; never a silent accept
//! unless configured), and a message is refused only by a filter's
//! answer or that action.

mod conn;
pub mod fields;
pub mod proto;

use std::time::Duration;

use conn::Conn;
pub use conn::MilterError;
use fields::Message;
use proto::{step, Command, Response};

use crate::config::services::ServiceAddr;
use crate::config::smtpd::{MilterDefault, SmtpdConfig};
use crate::message::reply::Reply;

/// The filters for each door.
#[derive(Default)]
pub struct Filters {
    /// `smtpd.milters`: mail from SMTP clients.
    pub smtp: Option<Milters>,
    /// `smtpd.non_smtpd_milters`: mail from local users.
    pub local: Option<Milters>,
}

impl Filters {
    pub fn from_config(config: &crate::config::Config) -> Filters {
        let host = config.hostname.as_str();
        Filters {
            smtp: Milters::from_config(&config.smtpd, host, false),
            local: Milters::from_config(&config.smtpd, host, true),
        }
    }
}

/// What the filters made of a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Store it (perhaps changed).
    Pass,
    /// Drop it silently, reporting success (SMFIR_DISCARD).
    Discard,
    /// Refuse it with this SMTP reply.
    Refuse(Reply),
    /// Store it (perhaps changed) and put it on hold (SMFIR_QUARANTINE,
    /// Postfix's milter-hold), for this reason.
    Hold(String),
}

/// What the filters are told about the message's origin.
pub struct Client<'a> {
    pub addr: Option<std::net::SocketAddr>,
    pub helo: &'a str,
    pub auth_user: Option<&'a str>,
}

/// The filters of one kind (SMTP or local) and how to talk to them.
pub struct Milters {
    list: Vec<ServiceAddr>,
    default: MilterDefault,
    connect: Duration,
    command: Duration,
    content: Duration,
    hostname: String,
}

/// One filter's answer to the whole message, and the changes it asked for.
struct Answer {
    verdict: Verdict,
    changes: Vec<Response>,
    leading_space: bool,
}

impl Milters {
    /// The SMTP filters (`local`: the non-SMTP ones); None when none is
    /// configured.
    pub fn from_config(smtpd: &SmtpdConfig, hostname: &str, local: bool) -> Option<Milters> {
        let list = match local {
            false => &smtpd.milters,
            true => &smtpd.non_smtpd_milters,
        };
        (!list.is_empty()).then(|| Milters {
            list: list.clone(),
            default: smtpd.milter_default_action,
            connect: Duration::from_secs(smtpd.milter_connect_timeout_secs.max(1)),
            command: Duration::from_secs(smtpd.milter_command_timeout_secs.max(1)),
            content: Duration::from_secs(smtpd.milter_content_timeout_secs.max(1)),
            hostname: hostname.to_string(),
        })
    }

    /// Runs every filter over the message; `raw`, `sender` and
    /// `recipients` are changed as they ask. Errors are logged by the
    /// caller through `on_error` (filter, error).
    pub async fn filter(
        &self,
        queue_id: &str,
        client: &Client<'_>,
        envelope: (&mut String, &mut Vec<String>),
        raw: &mut Vec<u8>,
        on_error: &mut (dyn FnMut(&ServiceAddr, &MilterError) + Send),
    ) -> Verdict {
        let (sender, recipients) = envelope;
        let mut held = None;
        for service in &self.list {
            let answer = self
                .ask(service, queue_id, client, sender, recipients, raw)
                .await;
            let answer = match answer {
                Ok(a) => a,
                Err(e) => {
                    on_error(service, &e);
                    match self.default {
                        MilterDefault::Accept => continue,
                        MilterDefault::Tempfail => return Verdict::Refuse(conn::tempfail()),
                        MilterDefault::Reject => return Verdict::Refuse(conn::rejected()),
                    }
                }
            };
            if answer.verdict != Verdict::Pass {
                return answer.verdict;
            }
            apply(&answer, sender, recipients, raw);
            // The first filter's reason is kept; later filters still run.
            held = held.or_else(|| quarantine_reason(&answer.changes));
        }
        held.map_or(Verdict::Pass, Verdict::Hold)
    }

    /// One filter's conversation about the message.
    async fn ask(
        &self,
        service: &ServiceAddr,
        queue_id: &str,
        client: &Client<'_>,
        sender: &str,
        recipients: &[String],
        raw: &[u8],
    ) -> Result<Answer, MilterError> {
        let mut c = Conn::open(service, self.connect, self.command).await?;
        let leading_space = c.steps & step::HEADER_LEADING_SPACE != 0;
        let done = |verdict| Answer {
            verdict,
            changes: Vec::new(),
            leading_space,
        };
        let addr = client
            .addr
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        let client_addr = addr.ip().to_string();
        let macros = [
            ("j", self.hostname.clone()),
            ("{daemon_name}", "sluice".to_string()),
            ("v", "Sluice".to_string()),
            ("_", format!("[{client_addr}]")),
            ("{client_addr}", client_addr.clone()),
            ("{client_name}", "unknown".to_string()),
            ("i", queue_id.to_string()),
        ];
        c.macros(b'C', &macros).await?;
        let connect = Command::Connect {
            host: "unknown",
            addr,
        };
        if let Some(v) = c.stage(connect, step::NO_CONNECT, step::NR_CONNECT).await? {
            return Ok(done(v));
        }
        if let Some(v) = c
            .stage(Command::Helo(client.helo), step::NO_HELO, step::NR_HELO)
            .await?
        {
            return Ok(done(v));
        }
        let from = format!("<{sender}>");
        let mut mail = vec![
            ("i", queue_id.to_string()),
            ("{mail_addr}", sender.to_string()),
        ];
        if let Some(user) = client.auth_user {
            mail.push(("{auth_authen}", user.to_string()));
            mail.push(("{auth_type}", "PLAIN".to_string()));
        }
        c.macros(b'M', &mail).await?;
        if let Some(v) = c
            .stage(Command::Mail(&[&from]), step::NO_MAIL, step::NR_MAIL)
            .await?
        {
            return Ok(done(v));
        }
        for r in recipients {
            c.macros(b'R', &[("{rcpt_addr}", r.clone())]).await?;
            let to = format!("<{r}>");
            if let Some(v) = c
                .stage(Command::Rcpt(&[&to]), step::NO_RCPT, step::NR_RCPT)
                .await?
            {
                return Ok(done(v));
            }
        }
        if let Some(v) = c.stage(Command::Data, step::NO_DATA, step::NR_DATA).await? {
            return Ok(done(v));
        }
        let message = Message::parse(raw);
        for f in &message.fields {
            let value = match leading_space {
                true => f.value.clone(),
                false => f.value.strip_prefix(' ').unwrap_or(&f.value).to_string(),
            };
            let header = Command::Header {
                name: &f.name,
                value: &value.replace("\r\n", "\n"),
            };
            if let Some(v) = c.stage(header, step::NO_HEADERS, step::NR_HEADER).await? {
                return Ok(done(v));
            }
        }
        if let Some(v) = c
            .stage(Command::EndOfHeaders, step::NO_EOH, step::NR_EOH)
            .await?
        {
            return Ok(done(v));
        }
        if let Some(v) = c.body(&message.body, self.content).await? {
            return Ok(done(v));
        }
        c.macros(b'E', &[("i", queue_id.to_string())]).await?;
        let (verdict, changes) = c.end_of_message(self.content).await?;
        c.quit().await;
        Ok(Answer {
            verdict,
            changes,
            leading_space,
        })
    }
}

/// The reason of a quarantine request among a filter's changes.
fn quarantine_reason(changes: &[Response]) -> Option<String> {
    changes.iter().find_map(|c| match c {
        Response::Quarantine(reason) => Some(reason.clone()),
        _ => None,
    })
}

/// Applies a filter's changes to the envelope and the message.
fn apply(answer: &Answer, sender: &mut String, recipients: &mut Vec<String>, raw: &mut Vec<u8>) {
    if answer.changes.is_empty() {
        return;
    }
    // An address from the filter is parsed as strictly as one from an
    // SMTP client: one that does not parse (CR, LF, NUL, a second
    // command hidden in it) is not taken, so nothing a filter says can
    // become a command on an outbound connection.
    let bare = |a: &str| {
        let a = a.trim().trim_start_matches('<').trim_end_matches('>');
        sluice_proto::address::parse_mailbox(a)
            .map(|m| m.address())
            .unwrap_or_default()
    };
    let mut message = Message::parse(raw);
    let mut body: Option<Vec<u8>> = None;
    let lead = answer.leading_space;
    for change in &answer.changes {
        match change {
            Response::AddHeader { name, value } => message.add(Message::field(name, value, lead)),
            Response::InsertHeader { index, name, value } => {
                message.insert(*index, Message::field(name, value, lead))
            }
            Response::ChangeHeader { index, name, value } => {
                message.change(*index, Message::field(name, value, lead))
            }
            Response::ReplaceBody(chunk) => {
                body.get_or_insert_with(Vec::new).extend_from_slice(chunk)
            }
            Response::AddRcpt(r) | Response::AddRcptPar(r, _) => {
                let r = bare(r);
                if !r.is_empty() && !recipients.contains(&r) {
                    recipients.push(r);
                }
            }
            Response::DeleteRcpt(r) => {
                let r = r.trim().trim_start_matches('<').trim_end_matches('>');
                recipients.retain(|x| !x.eq_ignore_ascii_case(r));
            }
            Response::ChangeFrom(from, _) => {
                let wanted = from.trim().trim_start_matches('<').trim_end_matches('>');
                match wanted.is_empty() {
                    true => sender.clear(), // the null sender
                    false => match bare(from) {
                        parsed if parsed.is_empty() => {}
                        parsed => *sender = parsed,
                    },
                }
            }
            _ => {}
        }
    }
    if let Some(body) = body {
        message.replace_body(&body);
    }
    *raw = message.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// L3 of the 2026-11-27 review: a recipient or sender from a filter
    /// that hides a second SMTP command (CR LF) is not taken; a good one
    /// is, and `<>` makes the null sender.
    #[test]
    fn a_filters_addresses_are_parsed_like_a_clients() {
        let answer = Answer {
            verdict: Verdict::Pass,
            changes: vec![
                Response::AddRcpt("<extra@remote.test>\r\nRCPT TO:<injected@evil.test>".into()),
                Response::AddRcpt("<good@remote.test>".into()),
                Response::ChangeFrom("<a@b.test>\r\nDATA".into(), String::new()),
            ],
            leading_space: false,
        };
        let (mut sender, mut rcpts) = ("s@x.test".to_string(), vec!["r@x.test".to_string()]);
        let mut raw = b"Subject: x\r\n\r\nbody\r\n".to_vec();
        apply(&answer, &mut sender, &mut rcpts, &mut raw);
        assert_eq!(rcpts, vec!["r@x.test", "good@remote.test"]);
        assert_eq!(sender, "s@x.test");
        let null = Answer {
            verdict: Verdict::Pass,
            changes: vec![Response::ChangeFrom("<>".into(), String::new())],
            leading_space: false,
        };
        apply(&null, &mut sender, &mut rcpts, &mut raw);
        assert_eq!(sender, "");
    }
}
