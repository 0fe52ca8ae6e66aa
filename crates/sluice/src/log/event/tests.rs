//! Every variant round-trips through the JSON line the writer makes, and
//! a few lines read exactly as they did before events were typed.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::IpAddr;

use super::*;
use crate::log::write::{json_body, write_body};

fn t(s: &'static str) -> Text<'static> {
    Cow::Borrowed(s)
}

const Q: Qid = Qid(0x1A2B_3C4D);

fn ip() -> IpAddr {
    "192.0.2.1".parse().unwrap()
}

/// One event of each variant (and of each shape of the untagged ones).
fn samples() -> Vec<Event<'static>> {
    use Event::*;
    let ip = ip();
    vec![
        LogDropped { lines: 3 },
        LogReopened,
        LogReopenFailed { error: t("denied") },
        CrateLog { library: t("ldap3"), level: t("WARN"), message: t("x") },
        AcceptRecovered { listener: t("smtpd"), what: t("smtp"), failures: 2 },
        AcceptFailed { listener: t("smtpd"), what: t("smtp"), error: t("EMFILE") },
        AdminRequest { line: t("flush") },
        HttpRefused { peer: t("192.0.2.1:5"), cause: t("no_host"), line: t("refused a request from 192.0.2.1:5: no Host") },
        Warning { kind: t("metrics_connections"), open: Some(8), line: t("warning: 8 connections open (metrics.max_connections): answering 503") },
        Warning { kind: t("config"), open: None, line: t("x is deprecated") },
        NodeNameWait { node: t("n1"), wait_ms: 2000 },
        NodeNameUnchecked { node: t("n1"), error: t("no answer in 2 s") },
        NodeNameUnchecked { node: t("n1"), error: t("refused") },
        NodeNameTaken { node: t("n1") },
        NodeNameBack { node: t("n1") },
        RedisUnusable { error: t("bad url") },
        RedisBack { node: t("n1"), live_nodes: 2 },
        RedisLost { node: t("n1"), error: t("reset") },
        LeasesNotReturned { error: t("reset"), lapse_secs: 30 },
        DeadMarkShared { addr: t("192.0.2.1:25"), secs: 60 },
        ShadowWaiting { origin: t("n2") },
        ShadowClaimCutShort { origin: t("n2"), error: t("x") },
        ShadowClaiming { origin: t("n2"), incarnation: t("00000000000000ff"), copies: 3 },
        ShadowClaimed { origin: t("n2"), queue_id: Q, new_id: Qid(0xABCDEF01) },
        ShadowClaimDone { origin: t("n2"), queued: 2, elsewhere: 1 },
        ShadowPeerBack { peer: t("192.0.2.2:7") },
        ShadowPeerAway { peer: t("192.0.2.2:7"), error: t("timeout") },
        ShadowPeerUnproven { peer: t("192.0.2.2:7") },
        ShadowRefusedByPeer { peer: t("192.0.2.2:7"), reason: t("no") },
        ShadowPeerLinked { peer: t("192.0.2.2:7"), node: t("n2") },
        ShadowOutcomesDropped { peer: t("192.0.2.2:7"), kept: 100 },
        ShadowCopiesUnreadable { area: t("n2"), error: t("x") },
        ShadowHolding { origin: t("n2"), incarnation: t("01"), copies: 4 },
        ShadowLinkEnded { peer: t("192.0.2.2:7"), error: t("eof") },
        ShadowStrangersRefused { links: 2, last: t("192.0.2.9:1") },
        ShadowLinkRefused { peer: t("192.0.2.2:7"), reason: t("secret") },
        CopyMarked { origin: t("n2"), queue_id: Q, held: true, released: false },
        ShadowNewIncarnation { origin: t("n2"), incarnation: t("02") },
        ShadowNotCopied { queue_id: Q, error: t("no peer") },
        ShadowPeerUnresolved { peer: t("peer.test"), error: t("nxdomain") },
        Adopted { queue_id: Q, origin: t("n2"), origin_queue_id: Qid(5), from: t("a@b.test"), size: 10, nrcpt: 1 },
        AcmeFailed { error: t("x"), retry_secs: 60 },
        AcmeOrdering { domains: t("a.test,b.test"), reason: t("expires") },
        AcmeIssued { domains: t("a.test"), serial: t("01"), not_after: t("2027-01-01T00:00:00.000Z") },
        MaildirNoCommitThread { error: t("x") },
        StoppedListening { addr: t("[::]:25") },
        ListenFailed { addr: t("[::]:25"), error: t("in use") },
        Listening { addr: t("[::]:25"), kind: t("smtp") },
        Listening { addr: t("127.0.0.1:9"), kind: t("metrics") },
        Listening { addr: t("127.0.0.1:80"), kind: t("acme") },
        BalancerDrain { secs: 5 },
        Drained { finished: 3, abandoned: 0 },
        Stopped { messages: 10, syncs: 4 },
        LookupStats { line: t("table users: 3 lookups") },
        MaildirStats { files: 9, syncs: 2 },
        Started { segments: 2, to_deliver: 0, segment_mib: 64, reserve_mib: 256, unsafe_ack: true },
        SpoolDamage { damage: t("segment 3 cut at 77") },
        SpoolQuarantined { ranges: 2 },
        SpoolPinned { segments: vec![3, 4] },
        Reload(super::Reload::Refused { result: t("refused"), cause: t("config"), line: Some(7), addr: None, error: t("bad") }),
        Reload(super::Reload::Applied { result: t("applied"), sections: vec![t("smtpd")], later: vec![], line: t("reload: applied changes to smtpd") }),
        Reload(super::Reload::Certificate { result: t("certificate"), file: t("/etc/cert.pem") }),
        Reload(super::Reload::CertificateKept { result: t("certificate_kept"), error: t("bad pem") }),
        ReloadTables,
        AdminSocketFailed { dir: t("/run/sluice"), error: t("denied") },
        RunningAs { user: t("sluice"), uid: 999 },
        LauncherStarted { pid: 4242 },
        LookupFailed { table: t("users"), key: t("a@b"), error: t("timeout") },
        TableReloaded { table: t("aliases"), path: t("/etc/aliases"), keys: 4 },
        TableReloadRefused { table: t("aliases"), error: t("line 3") },
        TableWarning { table: t("aliases"), path: t("/etc/aliases"), line: 3, problem: t("duplicate entry") },
        DaneUnvalidated { domain: t("b.test") },
        DaneExcluded { domain: t("b.test"), hosts: vec![t("mx1.b.test"), t("mx2.b.test")] },
        DaneUnusable { line: t("DANE: no TLSA") },
        ConnectFailed(super::ConnectFailed::Host { host: t("mx.b.test"), ip, port: 25, down: true, tls: false, error: t("refused"), line: t("connect to mx.b.test[192.0.2.1]:25: Connection refused") }),
        ConnectFailed(super::ConnectFailed::Job { queue_id: Q, relay: t("mx.b.test"), error: t("refused") }),
        TlsFallback { host: t("mx.b.test"), ip, port: 25, error: t("bad cert") },
        TlsOut { relay: t("mx.b.test[192.0.2.1]:25"), verified: true, detail: t("TLSv1.3") },
        Egress { relay: t("mx.b.test[192.0.2.1]:25"), source: t("out2"), address: Some(ip), helo: t("out2.example"), bind_error: None },
        SaslOut { relay: t("smtp.b.test[192.0.2.1]:587"), sasl_username: t("user"), sasl_method: t("PLAIN") },
        Failover { queue_id: Q, peer: t("mx1"), sessions: 2, next: false },
        Failover { queue_id: Q, peer: t("mx1"), sessions: 1, next: true },
        MxTruncated { domain: t("b.test"), hosts: 9, limit: 5 },
        MxRefused { domain: t("b.test"), host: t("mx"), ip, port: 25, error: t("private") },
        MtaStsTesting { domain: t("b.test"), hosts: vec![t("mx")] },
        MtaStsMemoryOnly { error: t("ro") },
        MtaStsNotSaved { domain: t("b.test"), error: t("ro") },
        MtaSts { domain: t("b.test"), result: t("fetch_failed"), cause: t("dns"), error: t("nx"), policy_in_force: false },
        AddressProbed { address: t("u@b.test"), result: t("undeliverable"), reason: t("host h said: 550 5.1.1 unknown (in reply to RCPT TO command)") },
        VerifyCacheMemoryOnly { error: t("read-only") },
        VerifyBusy { address: t("u@b.test"), pending: 5000 },
        MilterDiscard { queue_id: Q },
        NoRecipientsLeft { queue_id: Q },
        Hold { queue_id: Q, cause: t("milter"), reason: t("spam") },
        HeaderCheck { queue_id: Q, check: t("header_checks"), action: t("reject"), content: t("Subject: x"), reason: t("550 5.7.1 no"), line: t("1A2B3C4D: reject: header Subject: x from local; from=<a@b>: 5.7.1 no") },
        Redirect { queue_id: Q, to: t("x@y.test"), replaced: 2 },
        Bcc { queue_id: Q, to: t("x@y.test") },
        LimitCrossed { queue_id: Q, kind: t("login"), who: t("a"), what: t("messages"), count: 4, limit: 3 },
        LimitReleased { kind: t("login"), who: t("a"), contained: true, released: 2 },
        LimitsAlone { error: Some(t("reset")) },
        LimitsAlone { error: None },
        MilterFailed { queue_id: Q, milter: t("inet:x:1"), error: t("eof") },
        DkimNotSigned { queue_id: Q, cause: t("from_not_own"), from: t("x@y"), user: t("u") },
        DkimLoop { queue_id: Q, hostname: t("mx.a.test") },
        DkimSigned { queue_id: Q, domain: t("a.test") },
        DkimFailed { queue_id: Q, error: t("key") },
        SenderAuth { queue_id: Q, spf: t("pass"), dkim: vec![t("pass")], dkim_not_evaluated: 0, dmarc: t("pass-or-none"), policy: t("none"), from_domain: t("a.test"), line: t("1A2B3C4D: sender authentication: spf=pass") },
        SrsForward { queue_id: Q, from: t("a@b.test"), srs: t("SRS0=abcd=AB=b.test=a@fwd.test") },
        SrsReverse { queue_id: Q, client_ip: ip, to: t("SRS0=abcd=AB=b.test=a@fwd.test"), orig_to: t("a@b.test") },
        SrsRefused { queue_id: Q, client_ip: ip, to: t("SRS0=x@fwd.test"), reason: t("malformed") },
        ArcSealed { queue_id: Q, domain: t("fwd.test"), cv: t("pass"), sealed: true, error: t("") },
        ArcSealed { queue_id: Q, domain: t("fwd.test"), cv: t("fail"), sealed: false, error: t("cv=fail") },
        Received { queue_id: Q, origin: t("smtpd"), client_ip: Some(ip), client_port: Some(4000), uid: None, from: t("a@b.test"), size: 100, nrcpt: 2 },
        Received { queue_id: Q, origin: t("sendmail"), client_ip: None, client_port: None, uid: Some(1000), from: t("u@a.test"), size: 100, nrcpt: 1 },
        Received { queue_id: Q, origin: t("bounce"), client_ip: None, client_port: None, uid: None, from: t(""), size: 100, nrcpt: 1 },
        SenderReplaced { uid: 1000, asked: t("x@y"), sender: t("u@a.test") },
        Connect { client_ip: ip, client_port: 4000 },
        LostConnection { client_ip: ip, cause: t("lost"), error: t("reset") },
        SessionEnd { client_ip: ip, client_port: 4000, cause: t("closed"), messages: 1, errors: 0, tls: false },
        SessionsFull { client_ip: ip },
        Pregreet { client_ip: ip, client_port: 4000 },
        Dnsbl { client_ip: ip, score: 3, listed_by: vec![t("a.test"), t("b.test")], unanswered: vec![t("c.test")] },
        Dnsbl { client_ip: ip, score: 0, listed_by: vec![], unanswered: vec![t("c.test")] },
        Reject(super::Reject::RateLimit { stage: t("rcpt"), client_ip: ip, code: 450, dsn: t("4.7.1"), cause: t("rate_limit"), from: t("a@b"), to: Some(t("c@d")), proto: t("ESMTP"), helo: t("h") }),
        Reject(super::Reject::RateLimit { stage: t("mail"), client_ip: ip, code: 450, dsn: t("4.7.1"), cause: t("rate_limit"), from: t("a@b"), to: None, proto: t("SMTP"), helo: t("") }),
        Reject(super::Reject::Policy { queue_id: Q, stage: t("RCPT"), client_ip: ip, to: t("c@d"), code: 554, dsn: t("5.7.1"), cause: t("policy"), why: t("no") }),
        Reject(super::Reject::Policy { queue_id: Qid(0), stage: t("END-OF-MESSAGE"), client_ip: ip, to: t(""), code: 450, dsn: t("4.7.1"), cause: t("policy"), why: t("later") }),
        Reject(super::Reject::Relay { stage: t("rcpt"), client_ip: ip, to: t("c@d"), code: 554, dsn: t("5.7.1"), cause: t("relay_denied"), why: t("not local") }),
        Reject(super::Reject::Restriction { queue_id: Q, stage: t("RCPT"), client_ip: ip, from: t("a@b"), to: t("c@d"), code: 554, dsn: t("5.7.1"), cause: t("restriction"), by: t("check_recipient_access"), text: t("<c@d>: Recipient address rejected: no") }),
        RestrictionWarn { queue_id: Q, client_ip: ip, by: t("reject_non_fqdn_sender"), reply: t("504 5.5.2 <a@b>: Sender address rejected: need fully-qualified address") },
        Reject(super::Reject::UnknownUser { stage: t("rcpt"), client_ip: ip, to: t("c@d"), code: 550, dsn: t("5.1.1"), cause: t("unknown_user"), table: t("users") }),
        Reject(super::Reject::LookupFailed { stage: t("rcpt"), client_ip: ip, to: t("c@d"), code: 451, dsn: t("4.3.0"), cause: t("lookup_failed"), error: t("ldap") }),
        Reject(super::Reject::Dnsbl { stage: t("connect"), client_ip: ip, code: 554, dsn: t("5.7.1"), cause: t("dnsbl"), list: t("zen.test") }),
        Reject(super::Reject::Queue { stage: t("queue"), queue_id: Q, cause: t("too_big"), error: t("too big"), from: t("a@b") }),
        Reject(super::Reject::Data { stage: t("data"), queue_id: Q, cause: t("milter"), code: 550, dsn: Some(t("5.7.1")), from: t("a@b"), line: t("1A2B3C4D: reject: end of data from [192.0.2.1]: 550 5.7.1 no; from=<a@b>") }),
        Reject(super::Reject::Connect { stage: t("connect"), client_ip: ip, code: 421, dsn: t("4.7.0"), cause: t("connection_rate") }),
        TlsIn { client_ip: ip, result: t("established"), detail: t("TLSv1.3") },
        TlsInFailed { client_ip: ip, error: t("bad") },
        TlsInTimeout { client_ip: ip },
        Timeout { client_ip: ip, cause: t("idle_timeout"), code: 421, dsn: t("4.4.2") },
        StarttlsInjection { client_ip: ip, octets: 12 },
        Auth { client_ip: ip, method: t("PLAIN"), username: Some(t("u")), result: t("ok"), error: None },
        Auth { client_ip: ip, method: t("PLAIN"), username: None, result: t("unavailable"), error: Some(t("ldap")) },
        AuthPenaltyClose { client_ip: ip },
        RetFullRefused { queue_id: Q, client_ip: ip },
        PipeliningViolation { client_ip: ip, after: t("DATA") },
        AliasTooMany { queue_id: Q, client_ip: ip, to: t("all@a"), max: 1000 },
        AliasDiscard { queue_id: Q, to: t("x@a") },
        DataRejected { queue_id: Q, client_ip: ip, reply: t("552 5.3.4 too big"), from: t("a@b") },
        PolicyFailed { queue_id: Q, client_ip: ip, server: t("inet:p:1"), error: t("eof") },
        PolicyUnsupported { queue_id: Q, client_ip: ip, server: t("inet:p:1"), action: t("FILTER x") },
        PolicyDiscard { queue_id: Q, client_ip: ip, why: t("spam") },
        AccessAnswerBad { queue_id: Q, client_ip: ip, error: t("access table answer \"BCC a@\": BCC address is not a mailbox: address syntax error") },
        PolicyWarn { queue_id: Q, client_ip: ip, text: t("look") },
        Proxied { client_ip: ip, client_port: 4000, lb_ip: ip, lb_port: 5000 },
        HealthCheckFailed { lb_ip: ip, lb_port: 5000 },
        ProxyRefused { lb_ip: ip, lb_port: 5000, cause: t("bad_header"), error: t("bad") },
        Notice { queue_id: Q, kind: t("failure"), notice_id: Qid(7) },
        NoticeRetry { queue_id: Q, error: t("full"), retry_secs: 30 },
        NoticeRefused { queue_id: Q, error: t("bad") },
        NoticeSkipped { queue_id: Q, to: t("c@d"), why: t("notify"), dsn: Shown::Text(t("5.1.1")), line: t("1A2B3C4D: to=<c@d>: no bounce sent, the sender asked for none (NOTIFY) (550 5.1.1 no)") },
        Delivery { queue_id: Q, to: t("c@d"), orig_to: Some(t("e@d")), relay: t("mx[192.0.2.1]:25"), transport: t("smtp"), delay: 0.5, dsn: Shown::Text(t("2.0.0")), status: t("sent"), reason: Shown::Text(t("250 2.0.0 ok")) },
        Delivery { queue_id: Q, to: t("c@d"), orig_to: None, relay: t("none"), transport: t("discard"), delay: 1.25, dsn: Shown::Text(t("2.0.0")), status: t("sent"), reason: Shown::Text(t("discarded")) },
        HoldListUnsaved { error: t("ro") },
        Flush { messages: 3 },
        Removed { queue_id: Q, by: t("administrator") },
        Removed { queue_id: Q, by: t("queue") },
        Held { queue_id: Q },
        Released { queue_id: Q },
        Requeued { queue_id: Q },
        Deleted { queue_id: Q },
        Returned { queue_id: Q },
        QueueFileUnreadable { queue_id: Q, error: t("crc") },
        DestinationDead { destination: t("mx.b.test"), deferred: 4 },
        Draining { in_flight: 2, bounces: 0 },
    ]
}

/// The JSON line the writer makes for `event`.
fn line_of(event: &Event<'_>) -> String {
    let mut out = Vec::new();
    write_body(&mut out, 1_700_000_000_000, &json_body("sluice", event));
    String::from_utf8(out).unwrap()
}

/// The names serde knows (its error for an unknown one lists them all).
fn every_name() -> BTreeSet<String> {
    let err = serde_json::from_str::<Event<'static>>(r#"{"event":"?"}"#).unwrap_err();
    let text = err.to_string();
    let list = text.split("expected one of ").nth(1).expect(&text);
    let list = list.split(" at line ").next().unwrap_or_default();
    list.split(", ")
        .map(|n| {
            n.trim_matches(|c: char| c == '`' || c.is_whitespace())
                .to_string()
        })
        .filter(|n| !n.is_empty() && !n.starts_with("at line"))
        .collect()
}

#[test]
fn every_variant_reads_back_as_it_was_written() {
    let mut seen = BTreeSet::new();
    for event in samples() {
        let line = line_of(&event);
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line}"
        );
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let back = Event::<'static>::deserialize(&value).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(back, event, "{line}");
        seen.insert(value["event"].as_str().unwrap().to_string());
        // The envelope: every line has them, `queue_id` exactly once.
        assert_eq!(value["program"], "sluice", "{line}");
        assert_eq!(value["component"], event.component(), "{line}");
        assert_eq!(value["ts"], "2023-11-14T22:13:20.000Z", "{line}");
        assert_eq!(line.matches(r#""queue_id":"#).count(), 1, "{line}");
        match event.queue_id() {
            Some(id) => assert_eq!(value["queue_id"], id.to_string(), "{line}"),
            None => assert!(value["queue_id"].is_null(), "{line}"),
        }
        if !event.has_text_field() {
            assert_eq!(value["text"], event.to_string(), "{line}");
        }
    }
    let names = every_name();
    assert!(names.len() > 100, "{names:?}");
    let missing: Vec<_> = names.difference(&seen).collect();
    assert!(missing.is_empty(), "no sample of {missing:?}");
}

/// A few lines as the code wrote them before events were typed.
#[test]
fn lines_read_as_they_always_did() {
    use Event::*;
    let ip = ip();
    let cases: Vec<(Event<'static>, &str, &str)> = vec![
        (
            Delivery { queue_id: Q, to: t("c@d"), orig_to: Some(t("e@d")), relay: t("mx[192.0.2.1]:25"), transport: t("smtp"), delay: 0.5, dsn: Shown::Text(t("2.0.0")), status: t("sent"), reason: Shown::Text(t("250 2.0.0 ok")) },
            "smtp",
            "1A2B3C4D: to=<c@d>, orig_to=<e@d>, relay=mx[192.0.2.1]:25, delay=0.50, dsn=2.0.0, status=sent (250 2.0.0 ok)",
        ),
        (
            Delivery { queue_id: Q, to: t("c@d"), orig_to: None, relay: t("none"), transport: t("none"), delay: 3.0, dsn: Shown::Text(t("4.4.0")), status: t("deferred"), reason: Shown::Text(t("no route")) },
            "qmgr",
            "1A2B3C4D: to=<c@d>, relay=none, delay=3.00, dsn=4.4.0, status=deferred (no route)",
        ),
        (
            Received { queue_id: Q, origin: t("smtpd"), client_ip: Some(ip), client_port: Some(4000), uid: None, from: t("a@b.test"), size: 100, nrcpt: 2 },
            "smtpd",
            "1A2B3C4D: client=[192.0.2.1]:4000, from=<a@b.test>, size=100, nrcpt=2 (queue active)",
        ),
        (
            Received { queue_id: Q, origin: t("sendmail"), client_ip: None, client_port: None, uid: None, from: t("u@a"), size: 1, nrcpt: 1 },
            "sendmail",
            "1A2B3C4D: uid=unknown, from=<u@a>, size=1, nrcpt=1 (queue active)",
        ),
        (
            ShadowClaimed { origin: t("n2"), queue_id: Q, new_id: Qid(0xABCDEF01) },
            "shadow",
            "1A2B3C4D: claimed from node n2, queued as ABCDEF01",
        ),
        (
            Reject(super::Reject::RateLimit { stage: t("rcpt"), client_ip: ip, code: 450, dsn: t("4.7.1"), cause: t("rate_limit"), from: t("a@b"), to: Some(t("c@d")), proto: t("ESMTP"), helo: t("h") }),
            "smtpd",
            "NOQUEUE: reject: RCPT from [192.0.2.1]: 450 4.7.1 Error: too many recipients from 192.0.2.1; from=<a@b> to=<c@d> proto=ESMTP helo=<h>",
        ),
        (
            Reject(super::Reject::Policy { queue_id: Q, stage: t("RCPT"), client_ip: ip, to: t("c@d"), code: 554, dsn: t("5.7.1"), cause: t("policy"), why: t("no") }),
            "smtpd",
            "1A2B3C4D: reject: RCPT from [192.0.2.1]: 554 5.7.1 <c@d>: Recipient address rejected: no",
        ),
        (
            Reject(super::Reject::Restriction { queue_id: Q, stage: t("RCPT"), client_ip: ip, from: t("a@b"), to: t("c@d"), code: 554, dsn: t("5.7.1"), cause: t("restriction"), by: t("check_recipient_access"), text: t("<c@d>: Recipient address rejected: no") }),
            "smtpd",
            "1A2B3C4D: reject: RCPT from [192.0.2.1]: 554 5.7.1 <c@d>: Recipient address rejected: no; from=<a@b> to=<c@d> (check_recipient_access)",
        ),
        (
            Dnsbl { client_ip: ip, score: 3, listed_by: vec![t("a.test"), t("b.test")], unanswered: vec![t("c.test")] },
            "smtpd",
            "DNSBL rank 3 for [192.0.2.1] (listed by: a.test b.test; no answer from c.test)",
        ),
        (
            Auth { client_ip: ip, method: t("PLAIN"), username: Some(t("u")), result: t("failed"), error: None },
            "smtpd",
            "warning: [192.0.2.1]: SASL PLAIN authentication failed for \"u\"",
        ),
        (
            Stopped { messages: 10, syncs: 4 },
            "master",
            "daemon stopped: spool stored 10 messages with 4 disk syncs (2.5 messages per sync)",
        ),
        (
            Listening { addr: t("127.0.0.1:9"), kind: t("metrics") },
            "master",
            "metrics and dashboard on http://127.0.0.1:9/",
        ),
        (
            CopyMarked { origin: t("n2"), queue_id: Q, held: false, released: true },
            "shadow",
            "copy 1A2B3C4D of node n2: released on its origin",
        ),
        (LogDropped { lines: 3 }, "log", "3 lines dropped (log writer behind)"),
    ];
    for (event, component, text) in cases {
        assert_eq!(event.to_string(), text);
        assert_eq!(event.component(), component, "{text}");
    }
}

/// A policy service's `warn` keeps its own `text` field, as it did.
#[test]
fn a_policy_warning_keeps_its_text_field() {
    let event = Event::PolicyWarn {
        queue_id: Q,
        client_ip: ip(),
        text: t("look"),
    };
    let value: serde_json::Value = serde_json::from_str(&line_of(&event)).unwrap();
    assert_eq!(value["text"], "look");
    assert_eq!(event.to_string(), "1A2B3C4D: warn: policy service: look");
}

/// A value written as shown needs no string of its own, and reads back
/// as its text.
#[test]
fn a_shown_value_is_written_as_its_text() {
    let code = crate::message::reply::Enhanced::parse("5.1.1");
    let shown = Shown::Value(code.as_ref().expect("a well-formed code"));
    assert_eq!(serde_json::to_string(&shown).unwrap(), r#""5.1.1""#);
    assert_eq!(shown, "5.1.1");
}
