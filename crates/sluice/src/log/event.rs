//! Every line the mail log writes, as one type: [`Event`]. The writer
//! serialises it (`log_format = "json"`: the variant's name as `event`,
//! its fields beside it) or displays it (the Postfix-like text line);
//! the tests deserialise the same type and match on its variants, never
//! on the wording.
//!
//! Trusts nothing in its fields: they may hold whatever a peer sent (the
//! writer keeps one event on one line, `write.rs`).
//!
//! Invariants: a variant's fields are the JSON object's keys, with the
//! names and shapes the log has always had (log shippers read them); its
//! `Display` is the human line, byte for byte what admins grep for
//! (`event/text.rs`). Text fields are `Cow`: borrowed when written (no
//! allocation on the hot path), owned when read back (`Event<'static>`).
//! A field marked `rename = "text", skip_serializing` is the whole human
//! line of a variant whose wording cannot be rebuilt from its fields: it
//! is written once, as the envelope's `text`, and read back from there.
//!
//! Why this file is over 600 lines: it is the one declaration of the
//! enum (a Rust enum cannot be spread over files), grouped by component
//! with section comments. What the variants do is elsewhere: their text
//! (`text.rs`), component (`meta.rs`), multi-shape payloads (`shapes.rs`).

mod meta;
mod shapes;
#[cfg(test)]
mod tests;
mod text;
mod text_intake;
mod values;

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub use shapes::{ConnectFailed, Reject, Reload};
pub use values::{Qid, Shown, Text};

/// One line of the mail log. The variant's name (snake case) is the
/// JSON `event`; [`Event::component`] the program part of the line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    // ---- the log writer itself ("log", "master")
    LogDropped {
        lines: u64,
    },
    LogReopened,
    LogReopenFailed {
        error: Text<'a>,
    },
    /// A library's warning (the `log` crate), under its crate's name.
    CrateLog {
        library: Text<'a>,
        level: Text<'a>,
        message: Text<'a>,
    },

    // ---- listeners ("smtpd", "metrics", … : the listener's component)
    AcceptRecovered {
        listener: Text<'a>,
        what: Text<'a>,
        failures: u64,
    },
    AcceptFailed {
        listener: Text<'a>,
        what: Text<'a>,
        error: Text<'a>,
    },

    // ---- admin, metrics
    AdminRequest {
        line: Text<'a>,
    },
    HttpRefused {
        peer: Text<'a>,
        cause: Text<'a>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    /// A warning: `kind` says which (`metrics_connections`, with `open`;
    /// `spool_space`, `config`).
    Warning {
        kind: Text<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        open: Option<u64>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },

    // ---- cluster
    NodeNameWait {
        node: Text<'a>,
        wait_ms: u64,
    },
    /// `error` is `no answer in 2 s` when Redis did not answer.
    NodeNameUnchecked {
        node: Text<'a>,
        error: Text<'a>,
    },
    NodeNameTaken {
        node: Text<'a>,
    },
    NodeNameBack {
        node: Text<'a>,
    },
    RedisUnusable {
        error: Text<'a>,
    },
    RedisBack {
        node: Text<'a>,
        live_nodes: u64,
    },
    RedisLost {
        node: Text<'a>,
        error: Text<'a>,
    },
    LeasesNotReturned {
        error: Text<'a>,
        lapse_secs: u64,
    },
    DeadMarkShared {
        addr: Text<'a>,
        secs: u64,
    },

    // ---- shadow copies
    ShadowWaiting {
        origin: Text<'a>,
    },
    ShadowClaimCutShort {
        origin: Text<'a>,
        error: Text<'a>,
    },
    ShadowClaiming {
        origin: Text<'a>,
        incarnation: Text<'a>,
        copies: u64,
    },
    ShadowClaimed {
        origin: Text<'a>,
        queue_id: Qid,
        new_id: Qid,
    },
    ShadowClaimDone {
        origin: Text<'a>,
        queued: u64,
        elsewhere: u64,
    },
    ShadowPeerBack {
        peer: Text<'a>,
    },
    ShadowPeerAway {
        peer: Text<'a>,
        error: Text<'a>,
    },
    ShadowPeerUnproven {
        peer: Text<'a>,
    },
    ShadowRefusedByPeer {
        peer: Text<'a>,
        reason: Text<'a>,
    },
    ShadowPeerLinked {
        peer: Text<'a>,
        node: Text<'a>,
    },
    ShadowOutcomesDropped {
        peer: Text<'a>,
        kept: u64,
    },
    ShadowCopiesUnreadable {
        area: Text<'a>,
        error: Text<'a>,
    },
    ShadowHolding {
        origin: Text<'a>,
        incarnation: Text<'a>,
        copies: u64,
    },
    ShadowLinkEnded {
        peer: Text<'a>,
        error: Text<'a>,
    },
    ShadowStrangersRefused {
        links: u64,
        last: Text<'a>,
    },
    ShadowLinkRefused {
        peer: Text<'a>,
        reason: Text<'a>,
    },
    CopyMarked {
        origin: Text<'a>,
        queue_id: Qid,
        held: bool,
        released: bool,
    },
    ShadowNewIncarnation {
        origin: Text<'a>,
        incarnation: Text<'a>,
    },
    ShadowNotCopied {
        queue_id: Qid,
        error: Text<'a>,
    },
    ShadowPeerUnresolved {
        peer: Text<'a>,
        error: Text<'a>,
    },
    /// Under the shadow component: a claimed copy queued here.
    Adopted {
        queue_id: Qid,
        origin: Text<'a>,
        origin_queue_id: Qid,
        from: Text<'a>,
        size: u64,
        nrcpt: u64,
    },

    // ---- the daemon ("master", "acme", "lookup")
    AcmeFailed {
        error: Text<'a>,
        retry_secs: u64,
    },
    AcmeOrdering {
        domains: Text<'a>,
        reason: Text<'a>,
    },
    AcmeIssued {
        domains: Text<'a>,
        serial: Text<'a>,
        not_after: Text<'a>,
    },
    MaildirNoCommitThread {
        error: Text<'a>,
    },
    StoppedListening {
        addr: Text<'a>,
    },
    ListenFailed {
        addr: Text<'a>,
        error: Text<'a>,
    },
    /// `kind`: the listener's (`smtp`, `submission` …), `metrics`, `acme`.
    Listening {
        addr: Text<'a>,
        kind: Text<'a>,
    },
    BalancerDrain {
        secs: u64,
    },
    Drained {
        finished: u64,
        abandoned: u64,
    },
    Stopped {
        messages: u64,
        syncs: u64,
    },
    /// A lookup table's statistics line, as the table words it.
    LookupStats {
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    MaildirStats {
        files: u64,
        syncs: u64,
    },
    Started {
        segments: u64,
        to_deliver: u64,
        segment_mib: u64,
        reserve_mib: u64,
        unsafe_ack: bool,
    },
    SpoolDamage {
        damage: Text<'a>,
    },
    SpoolQuarantined {
        ranges: u64,
    },
    SpoolPinned {
        segments: Vec<u32>,
    },
    Reload(Reload<'a>),
    ReloadTables,
    AdminSocketFailed {
        dir: Text<'a>,
        error: Text<'a>,
    },
    RunningAs {
        user: Text<'a>,
        uid: u32,
    },
    /// The root launcher that runs commands as other accounts
    /// (`deliver::launch`) was started, before root was given up.
    LauncherStarted {
        pid: u32,
    },
    LookupFailed {
        table: Text<'a>,
        key: Text<'a>,
        error: Text<'a>,
    },
    TableReloaded {
        table: Text<'a>,
        path: Text<'a>,
        keys: u64,
    },
    TableReloadRefused {
        table: Text<'a>,
        error: Text<'a>,
    },
    /// A line of a table file skipped or overruled, as Postfix warns.
    TableWarning {
        table: Text<'a>,
        path: Text<'a>,
        line: u64,
        problem: Text<'a>,
    },

    // ---- outbound ("smtp")
    DaneUnvalidated {
        domain: Text<'a>,
    },
    DaneExcluded {
        domain: Text<'a>,
        hosts: Vec<Text<'a>>,
    },
    /// A DANE lookup that failed, as its error words it.
    DaneUnusable {
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    ConnectFailed(ConnectFailed<'a>),
    TlsFallback {
        host: Text<'a>,
        ip: IpAddr,
        port: u16,
        error: Text<'a>,
    },
    TlsOut {
        relay: Text<'a>,
        verified: bool,
        detail: Text<'a>,
    },
    /// A new SMTP connection left from a configured source
    /// (`deliver/smtp/egress.rs`): its name, the address bound (None: the
    /// system's choice) and the EHLO name; `bind_error` when the wanted
    /// address could not be bound and the system's was used.
    Egress {
        relay: Text<'a>,
        source: Text<'a>,
        address: Option<IpAddr>,
        helo: Text<'a>,
        bind_error: Option<Text<'a>>,
    },
    /// SMTP AUTH to a next hop succeeded (never the password).
    SaslOut {
        relay: Text<'a>,
        sasl_username: Text<'a>,
        sasl_method: Text<'a>,
    },
    /// `next`: the next host is tried (else the session limit is reached).
    Failover {
        queue_id: Qid,
        peer: Text<'a>,
        sessions: u64,
        next: bool,
    },
    MxTruncated {
        domain: Text<'a>,
        hosts: u64,
        limit: u64,
    },
    MxRefused {
        domain: Text<'a>,
        host: Text<'a>,
        ip: IpAddr,
        port: u16,
        error: Text<'a>,
    },
    MtaStsTesting {
        domain: Text<'a>,
        hosts: Vec<Text<'a>>,
    },
    MtaStsMemoryOnly {
        error: Text<'a>,
    },
    MtaStsNotSaved {
        domain: Text<'a>,
        error: Text<'a>,
    },
    /// `result` is `fetch_failed`.
    MtaSts {
        domain: Text<'a>,
        result: Text<'a>,
        cause: Text<'a>,
        error: Text<'a>,
        policy_in_force: bool,
    },

    // ---- address verification ("verify")
    /// A probe ended: `result` is `deliverable`, `undeliverable` or
    /// `unknown`; `reason` the next hop's reply as Postfix says it.
    AddressProbed {
        address: Text<'a>,
        result: Text<'a>,
        reason: Text<'a>,
    },
    /// The verification cache file could not be opened: answers are
    /// kept in memory only.
    VerifyCacheMemoryOnly {
        error: Text<'a>,
    },
    /// A probe was not started: `pending_request_limit` probes pending.
    VerifyBusy {
        address: Text<'a>,
        pending: u64,
    },

    // ---- intake ("cleanup", and the door's component for `received`)
    MilterDiscard {
        queue_id: Qid,
    },
    NoRecipientsLeft {
        queue_id: Qid,
    },
    Hold {
        queue_id: Qid,
        cause: Text<'a>,
        reason: Text<'a>,
    },
    /// An access table's `REDIRECT`: the `replaced` recipients gave way
    /// to `to`.
    Redirect {
        queue_id: Qid,
        to: Text<'a>,
        replaced: u64,
    },
    /// An access table's `BCC`: `to` added as a recipient.
    Bcc {
        queue_id: Qid,
        to: Text<'a>,
    },
    /// A header or body check matched (`intake/content_checks.rs`):
    /// `check` is the list (`header_checks`, `mime_header_checks`,
    /// `nested_header_checks`, `body_checks`), `action` Postfix's log word
    /// (`reject`, `warning`, `hold`, …), `content` the line (at most 200
    /// characters), `reason` the action's text. `line` is Postfix's.
    HeaderCheck {
        queue_id: Qid,
        check: Text<'a>,
        action: Text<'a>,
        content: Text<'a>,
        reason: Text<'a>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    /// A login or sender crossed a sender limit with this message: it
    /// and their new mail are held (`intake/limits.rs`).
    LimitCrossed {
        queue_id: Qid,
        /// `login` or `sender`.
        kind: Text<'a>,
        who: Text<'a>,
        /// `messages` or `recipients`.
        what: Text<'a>,
        count: u64,
        limit: u64,
    },
    /// An operator lifted a containment (`sluice queue release --login`):
    /// whether it was contained, and how many held messages were released.
    LimitReleased {
        kind: Text<'a>,
        who: Text<'a>,
        contained: bool,
        released: u64,
    },
    /// The sender limits' counts in Redis cannot be used (`error`): this
    /// node counts alone until they can (`None`: they can again).
    LimitsAlone {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Text<'a>>,
    },
    MilterFailed {
        queue_id: Qid,
        milter: Text<'a>,
        error: Text<'a>,
    },
    DkimNotSigned {
        queue_id: Qid,
        cause: Text<'a>,
        from: Text<'a>,
        user: Text<'a>,
    },
    DkimLoop {
        queue_id: Qid,
        hostname: Text<'a>,
    },
    DkimSigned {
        queue_id: Qid,
        domain: Text<'a>,
    },
    DkimFailed {
        queue_id: Qid,
        error: Text<'a>,
    },
    SenderAuth {
        queue_id: Qid,
        spf: Text<'a>,
        dkim: Vec<Text<'a>>,
        dkim_not_evaluated: u64,
        dmarc: Text<'a>,
        policy: Text<'a>,
        from_domain: Text<'a>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },
    /// A forwarded transaction left with an SRS envelope sender (`from`
    /// was the message's sender), at each attempt.
    SrsForward {
        queue_id: Qid,
        from: Text<'a>,
        srs: Text<'a>,
    },
    /// A recipient at the SRS domain was turned back into the address it
    /// stands for (a bounce to mail we forwarded).
    SrsReverse {
        queue_id: Qid,
        client_ip: IpAddr,
        to: Text<'a>,
        orig_to: Text<'a>,
    },
    /// A recipient at the SRS domain refused (`550 5.1.1`): `reason` is
    /// `bad_hash`, `expired`, `malformed` or `not_srs`.
    SrsRefused {
        queue_id: Qid,
        client_ip: IpAddr,
        to: Text<'a>,
        reason: Text<'a>,
    },
    /// A forwarded message ARC-sealed (`cv`: the chain it came with:
    /// `none`, `pass` or `fail`), or not (`sealed: false`, with `error`).
    ArcSealed {
        queue_id: Qid,
        domain: Text<'a>,
        cv: Text<'a>,
        sealed: bool,
        error: Text<'a>,
    },
    /// A message's first line: `origin` is the door (`smtpd`, `sendmail`,
    /// `bounce`) and the component it is logged under.
    Received {
        queue_id: Qid,
        origin: Text<'a>,
        client_ip: Option<IpAddr>,
        client_port: Option<u16>,
        uid: Option<u32>,
        from: Text<'a>,
        size: u64,
        nrcpt: u64,
    },
    SenderReplaced {
        uid: u32,
        asked: Text<'a>,
        sender: Text<'a>,
    },

    // ---- inbound SMTP ("smtpd")
    Connect {
        client_ip: IpAddr,
        client_port: u16,
    },
    LostConnection {
        client_ip: IpAddr,
        cause: Text<'a>,
        error: Text<'a>,
    },
    SessionEnd {
        client_ip: IpAddr,
        client_port: u16,
        cause: Text<'a>,
        messages: u64,
        errors: u64,
        tls: bool,
    },
    SessionsFull {
        client_ip: IpAddr,
    },
    Pregreet {
        client_ip: IpAddr,
        client_port: u16,
    },
    Dnsbl {
        client_ip: IpAddr,
        score: i32,
        listed_by: Vec<Text<'a>>,
        unanswered: Vec<Text<'a>>,
    },
    Reject(Reject<'a>),
    /// `result`: `established` (the only one written today).
    TlsIn {
        client_ip: IpAddr,
        result: Text<'a>,
        detail: Text<'a>,
    },
    TlsInFailed {
        client_ip: IpAddr,
        error: Text<'a>,
    },
    TlsInTimeout {
        client_ip: IpAddr,
    },
    /// `cause`: `session_limit` or `idle_timeout`.
    Timeout {
        client_ip: IpAddr,
        cause: Text<'a>,
        code: u16,
        dsn: Text<'a>,
    },
    StarttlsInjection {
        client_ip: IpAddr,
        octets: u64,
    },
    /// `result`: `ok`, `failed`, `penalised` or `unavailable` (with
    /// `error`, without `username`).
    Auth {
        client_ip: IpAddr,
        method: Text<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<Text<'a>>,
        result: Text<'a>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Text<'a>>,
    },
    AuthPenaltyClose {
        client_ip: IpAddr,
    },
    RetFullRefused {
        queue_id: Qid,
        client_ip: IpAddr,
    },
    PipeliningViolation {
        client_ip: IpAddr,
        after: Text<'a>,
    },
    AliasTooMany {
        queue_id: Qid,
        client_ip: IpAddr,
        to: Text<'a>,
        max: u64,
    },
    AliasDiscard {
        queue_id: Qid,
        to: Text<'a>,
    },
    DataRejected {
        queue_id: Qid,
        client_ip: IpAddr,
        reply: Text<'a>,
        from: Text<'a>,
    },
    PolicyFailed {
        queue_id: Qid,
        client_ip: IpAddr,
        server: Text<'a>,
        error: Text<'a>,
    },
    PolicyUnsupported {
        queue_id: Qid,
        client_ip: IpAddr,
        server: Text<'a>,
        action: Text<'a>,
    },
    PolicyDiscard {
        queue_id: Qid,
        client_ip: IpAddr,
        why: Text<'a>,
    },
    /// An access table's (or a policy service's) answer that cannot be
    /// acted on (`error` says why); the restriction answered "try again".
    AccessAnswerBad {
        queue_id: Qid,
        client_ip: IpAddr,
        error: Text<'a>,
    },
    /// Its `text` is the policy service's (the envelope's `text` is
    /// this field, as it always was).
    PolicyWarn {
        queue_id: Qid,
        client_ip: IpAddr,
        text: Text<'a>,
    },
    /// A refusal `warn_if_reject` turned into this warning (`by` the
    /// restriction, `reply` what the client would have been told).
    RestrictionWarn {
        queue_id: Qid,
        client_ip: IpAddr,
        by: Text<'a>,
        reply: Text<'a>,
    },
    Proxied {
        client_ip: IpAddr,
        client_port: u16,
        lb_ip: IpAddr,
        lb_port: u16,
    },
    HealthCheckFailed {
        lb_ip: IpAddr,
        lb_port: u16,
    },
    ProxyRefused {
        lb_ip: IpAddr,
        lb_port: u16,
        cause: Text<'a>,
        error: Text<'a>,
    },

    // ---- notices ("bounce")
    /// `kind`: `failure`, `delay`, `success` or `relayed`.
    Notice {
        queue_id: Qid,
        kind: Text<'a>,
        notice_id: Qid,
    },
    NoticeRetry {
        queue_id: Qid,
        error: Text<'a>,
        retry_secs: u64,
    },
    NoticeRefused {
        queue_id: Qid,
        error: Text<'a>,
    },
    /// `why`: `null_sender` or `notify`.
    NoticeSkipped {
        queue_id: Qid,
        to: Text<'a>,
        why: Text<'a>,
        dsn: Shown<'a>,
        #[serde(rename = "text", skip_serializing)]
        line: Text<'a>,
    },

    // ---- the queue ("qmgr"; `delivery` under the agent's service)
    /// One recipient's outcome, Postfix's delivery line. Logged under the
    /// service of `transport`: `smtp`, `lmtp`, `virtual` (`maildir`),
    /// `discard`, or `qmgr` (`none`).
    Delivery {
        queue_id: Qid,
        to: Text<'a>,
        orig_to: Option<Text<'a>>,
        relay: Text<'a>,
        transport: Text<'a>,
        delay: f64,
        dsn: Shown<'a>,
        status: Text<'a>,
        reason: Shown<'a>,
    },
    HoldListUnsaved {
        error: Text<'a>,
    },
    Flush {
        messages: u64,
    },
    /// `by`: `administrator` or `queue`.
    Removed {
        queue_id: Qid,
        by: Text<'a>,
    },
    Held {
        queue_id: Qid,
    },
    Released {
        queue_id: Qid,
    },
    Requeued {
        queue_id: Qid,
    },
    Deleted {
        queue_id: Qid,
    },
    Returned {
        queue_id: Qid,
    },
    QueueFileUnreadable {
        queue_id: Qid,
        error: Text<'a>,
    },
    DestinationDead {
        destination: Text<'a>,
        deferred: u64,
    },
    Draining {
        in_flight: u64,
        bounces: u64,
    },
}
