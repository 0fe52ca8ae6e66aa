//! Bounces: RFC 3464 delivery status notifications.
//!
//! A bounce is an ordinary message from the null sender (so it can never
//! bounce again) to the original sender, stored through the same spool
//! path as received mail. Only when it is on disk are the failed
//! recipients marked final (see the scheduler), so a crash can at worst
//! duplicate a bounce, never lose one.

use std::sync::Arc;

use sluice_spool::{BodyRef, Envelope, Spool};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::log::{qid, Logger};
use crate::schedule::{dsn_of, Event, Incoming};
use crate::{log, timefmt};

/// Envelope flag marking a bounce we generated.
pub const FLAG_BOUNCE: u32 = 4;

#[allow(clippy::too_many_arguments)]
pub fn spawn_bounce(
    original: Arc<Envelope>,
    body: Option<Arc<Vec<u8>>>,
    body_ref: BodyRef,
    failed: Vec<(u16, String)>,
    config: Arc<Config>,
    spool: Spool,
    logger: Logger,
    events: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let body = crate::deliver::load_body(&spool, &body, body_ref)
            .await
            .ok();
        let headers = body
            .as_deref()
            .map(|b| original_headers(b))
            .unwrap_or_default();
        let id = spool.new_id();
        let text = build_dsn(&config.hostname, &original, &failed, headers, id);
        let envelope = Envelope {
            id,
            arrival: timefmt::now_millis(),
            sender: String::new(),
            recipients: vec![original.sender.clone()],
            flags: FLAG_BOUNCE,
        };
        let text = Arc::new(text);
        let recipients: Vec<u16> = failed.iter().map(|(i, _)| *i).collect();
        // Retry the store until it works: the failed recipients stay open meanwhile.
        let mut wait = std::time::Duration::from_secs(1);
        loop {
            match spool.store(envelope.clone(), text.clone()).await {
                Ok(bounce_ref) => {
                    log!(
                        logger,
                        "bounce",
                        "{}: sender non-delivery notification: {}",
                        qid(original.id),
                        qid(id)
                    );
                    let _ = events.send(Event::BounceStored {
                        msg: original.id,
                        recipients,
                    });
                    let _ = events.send(Event::Incoming(Incoming {
                        envelope,
                        body_ref: bounce_ref,
                        body: Some(text),
                        done: vec![false],
                    }));
                    return;
                }
                Err(err) => {
                    log!(
                        logger,
                        "bounce",
                        "{}: cannot store bounce: {err}; retrying",
                        qid(original.id)
                    );
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(std::time::Duration::from_secs(300));
                }
            }
        }
    });
}

/// The header section of a stored body (up to the first empty line).
fn original_headers(body: &[u8]) -> &[u8] {
    match memchr::memmem::find(body, b"\r\n\r\n") {
        Some(end) => &body[..end + 2],
        None => &body[..body.len().min(64 << 10)],
    }
}

/// Builds the DSN message (headers and multipart/report body, CRLF lines).
pub fn build_dsn(
    hostname: &str,
    original: &Envelope,
    failed: &[(u16, String)],
    headers: &[u8],
    id: u64,
) -> Vec<u8> {
    let boundary = format!("{}.{}/{}", qid(id), timefmt::now_millis(), hostname);
    let date = timefmt::rfc5322(timefmt::now_millis());
    let mut m = String::with_capacity(2048 + headers.len());
    m.push_str(&format!(
        "From: MAILER-DAEMON@{hostname} (Mail Delivery System)\r\n"
    ));
    m.push_str(&format!("To: <{}>\r\n", original.sender));
    m.push_str("Subject: Undelivered Mail Returned to Sender\r\n");
    m.push_str(&format!("Date: {date}\r\n"));
    m.push_str(&format!("Message-ID: <{}.bounce@{hostname}>\r\n", qid(id)));
    m.push_str("Auto-Submitted: auto-replied\r\n");
    m.push_str("MIME-Version: 1.0\r\n");
    m.push_str(&format!(
        "Content-Type: multipart/report; report-type=delivery-status;\r\n\tboundary=\"{boundary}\"\r\n"
    ));
    m.push_str("\r\nThis is a MIME-encapsulated message.\r\n\r\n");
    m.push_str(&format!("--{boundary}\r\nContent-Description: Notification\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"));
    m.push_str(&format!(
        "This is the mail system at host {hostname}.\r\n\r\nI'm sorry to have to inform you that your message could not\r\nbe delivered to one or more recipients. It's attached below.\r\n\r\n"
    ));
    for (i, reason) in failed {
        m.push_str(&format!(
            "<{}>: {}\r\n",
            original.recipients[*i as usize], reason
        ));
    }
    m.push_str(&format!(
        "\r\n--{boundary}\r\nContent-Description: Delivery report\r\nContent-Type: message/delivery-status\r\n\r\n"
    ));
    m.push_str(&format!("Reporting-MTA: dns; {hostname}\r\n"));
    m.push_str(&format!("X-Sluice-Queue-ID: {}\r\n", qid(original.id)));
    m.push_str(&format!("X-Sluice-Sender: rfc822; {}\r\n", original.sender));
    m.push_str(&format!(
        "Arrival-Date: {}\r\n",
        timefmt::rfc5322(original.arrival)
    ));
    for (i, reason) in failed {
        let status = dsn_of(
            reason.split_once(": ").map(|(_, r)| r).unwrap_or(reason),
            "5.0.0",
        );
        m.push_str(&format!(
            "\r\nFinal-Recipient: rfc822; {}\r\nAction: failed\r\nStatus: {status}\r\n",
            original.recipients[*i as usize]
        ));
        if let Some((relay, reply)) = reason.split_once(": ") {
            if relay != "none" {
                let host = relay.split('[').next().unwrap_or(relay);
                m.push_str(&format!(
                    "Remote-MTA: dns; {host}\r\nDiagnostic-Code: smtp; {reply}\r\n"
                ));
            } else {
                m.push_str(&format!("Diagnostic-Code: X-Sluice; {reply}\r\n"));
            }
        }
    }
    m.push_str(&format!(
        "\r\n--{boundary}\r\nContent-Description: Undelivered Message Headers\r\nContent-Type: text/rfc822-headers\r\n\r\n"
    ));
    let mut out = m.into_bytes();
    out.extend_from_slice(headers);
    out.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_has_the_rfc3464_parts() {
        let env = Envelope {
            id: 0xABC,
            arrival: 0,
            sender: "s@a.example".into(),
            recipients: vec!["ok@b.example".into(), "gone@b.example".into()],
            flags: 0,
        };
        let dsn = build_dsn(
            "mx.example",
            &env,
            &[(
                1,
                "mx.b.example[127.0.0.1]:25: 550 5.1.1 User unknown".into(),
            )],
            b"Subject: hi\r\nMessage-ID: <1@a>\r\n",
            0xDEF,
        );
        let text = String::from_utf8(dsn).unwrap();
        assert!(text.contains("Content-Type: multipart/report; report-type=delivery-status;"));
        assert!(text.contains("Final-Recipient: rfc822; gone@b.example"));
        assert!(text.contains("Status: 5.1.1"));
        assert!(text.contains("Diagnostic-Code: smtp; 550 5.1.1 User unknown"));
        assert!(text.contains("Remote-MTA: dns; mx.b.example"));
        assert!(text.contains("Subject: hi"));
        assert!(!text.contains("ok@b.example>:"));
        assert!(text.lines().all(|l| l.len() < 1000));
    }
}
