//! Reading a real Postfix's log in the differential tests: its delivery
//! lines ([`Delivery`]), one per recipient.

/// One delivery line of the log: `QID: to=<…>, orig_to=<…>, relay=…,
/// delay=…, delays=…, dsn=…, status=… (…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub queue_id: String,
    /// The delivery agent (`discard`, `smtp`, `local` …).
    pub service: String,
    pub to: String,
    /// The recipient as received, when `to` is not it.
    pub orig_to: Option<String>,
    pub relay: String,
    pub dsn: String,
    /// `sent`, `bounced`, `deferred` …
    pub status: String,
    /// The text in parentheses after the status.
    pub detail: String,
}

impl Delivery {
    /// A log line's delivery, if it is a delivery line.
    pub fn parse(line: &str) -> Option<Delivery> {
        let (head, rest) = line.split_once("]: ")?;
        let service = head.rsplit_once("postfix/")?.1.split('[').next()?;
        let (queue_id, rest) = rest.split_once(": ")?;
        let rest = rest.strip_prefix("to=<")?;
        let (to, rest) = rest.split_once(">, ")?;
        let (orig_to, rest) = match rest.strip_prefix("orig_to=<") {
            Some(r) => {
                let (o, r) = r.split_once(">, ")?;
                (Some(o.to_string()), r)
            }
            None => (None, rest),
        };
        let field = |name: &str| -> Option<String> {
            let at = rest.find(&format!("{name}="))? + name.len() + 1;
            let end = rest[at..].find([',', ' ']).map_or(rest.len(), |e| at + e);
            Some(rest[at..end].to_string())
        };
        let status_at = rest.find("status=")?;
        let detail = rest[status_at..]
            .split_once(" (")
            .map_or("", |(_, d)| d.trim_end().trim_end_matches(')'));
        Some(Delivery {
            queue_id: queue_id.to_string(),
            service: service.to_string(),
            to: to.to_string(),
            orig_to,
            relay: field("relay")?,
            dsn: field("dsn")?,
            status: field("status")?,
            detail: detail.to_string(),
        })
    }
}

#[test]
fn a_delivery_line_reads_whole() {
    use super::postfix::Reply;
    let line = "Nov 28 06:14:01 pf postfix/discard[22944]: E6E7E98E04C: \
                to=<t1+Ext@hit.test>, orig_to=<User+Ext@virt.test>, relay=none, \
                delay=0.02, delays=0.02/0.01/0/0, dsn=2.0.0, status=sent (hit.test)";
    let d = Delivery::parse(line).unwrap();
    assert_eq!(d.queue_id, "E6E7E98E04C");
    assert_eq!(d.service, "discard");
    assert_eq!(d.to, "t1+Ext@hit.test");
    assert_eq!(d.orig_to.as_deref(), Some("User+Ext@virt.test"));
    assert_eq!((d.relay.as_str(), d.dsn.as_str()), ("none", "2.0.0"));
    assert_eq!((d.status.as_str(), d.detail.as_str()), ("sent", "hit.test"));
    let plain = line.replace("orig_to=<User+Ext@virt.test>, ", "");
    assert_eq!(Delivery::parse(&plain).unwrap().orig_to, None);
    assert!(Delivery::parse("Nov 28 pf postfix/qmgr[1]: E6E: removed").is_none());
    let r = Reply::parse("250-x\r\n250 2.1.5 Ok\r\n");
    assert_eq!(
        (r.code, r.enhanced.as_deref(), r.text.as_str()),
        (250, Some("2.1.5"), "Ok")
    );
    let r = Reply::parse("354 End data with <CR><LF>.<CR><LF>\r\n");
    assert_eq!(
        (r.code, r.enhanced, r.text.as_str()),
        (354, None, "End data with <CR><LF>.<CR><LF>")
    );
}
