//! What each event is about: the component it is logged under, its
//! queue ID, and whether it has a `text` field of its own.
//!
//! Trusts the event's fields.

use super::{Event, Qid};

impl Event<'_> {
    /// The component the line is logged under (`sluice/<component>:`).
    pub fn component(&self) -> &str {
        use Event::*;
        match self {
            LogDropped { .. } => "log",
            CrateLog { library, .. } => library,
            AcceptRecovered { listener, .. } | AcceptFailed { listener, .. } => listener,
            AdminRequest { .. } => "admin",
            HttpRefused { .. } => "metrics",
            Warning { kind, .. } if kind == "metrics_connections" => "metrics",
            NodeNameWait { .. }
            | NodeNameUnchecked { .. }
            | NodeNameTaken { .. }
            | NodeNameBack { .. }
            | RedisUnusable { .. }
            | RedisBack { .. }
            | RedisLost { .. }
            | LeasesNotReturned { .. }
            | DeadMarkShared { .. } => "cluster",
            ShadowWaiting { .. }
            | ShadowClaimCutShort { .. }
            | ShadowClaiming { .. }
            | ShadowClaimed { .. }
            | ShadowClaimDone { .. }
            | ShadowPeerBack { .. }
            | ShadowPeerAway { .. }
            | ShadowPeerUnproven { .. }
            | ShadowRefusedByPeer { .. }
            | ShadowPeerLinked { .. }
            | ShadowOutcomesDropped { .. }
            | ShadowCopiesUnreadable { .. }
            | ShadowHolding { .. }
            | ShadowLinkEnded { .. }
            | ShadowStrangersRefused { .. }
            | ShadowLinkRefused { .. }
            | CopyMarked { .. }
            | ShadowNewIncarnation { .. }
            | ShadowNotCopied { .. }
            | ShadowPeerUnresolved { .. }
            | Adopted { .. } => "shadow",
            AcmeFailed { .. } | AcmeOrdering { .. } | AcmeIssued { .. } => "acme",
            LookupStats { .. }
            | LookupFailed { .. }
            | TableReloaded { .. }
            | TableReloadRefused { .. }
            | TableWarning { .. } => "lookup",
            LogReopened
            | LogReopenFailed { .. }
            | Warning { .. }
            | MaildirNoCommitThread { .. }
            | StoppedListening { .. }
            | ListenFailed { .. }
            | Listening { .. }
            | BalancerDrain { .. }
            | Drained { .. }
            | Stopped { .. }
            | MaildirStats { .. }
            | Started { .. }
            | SpoolDamage { .. }
            | SpoolQuarantined { .. }
            | SpoolPinned { .. }
            | Reload(_)
            | ReloadTables
            | AdminSocketFailed { .. }
            | RunningAs { .. }
            | LauncherStarted { .. } => "master",
            DaneUnvalidated { .. }
            | DaneExcluded { .. }
            | DaneUnusable { .. }
            | ConnectFailed(_)
            | TlsFallback { .. }
            | TlsOut { .. }
            | SaslOut { .. }
            | Egress { .. }
            | Failover { .. }
            | MxTruncated { .. }
            | MxRefused { .. }
            | MtaStsTesting { .. }
            | MtaStsMemoryOnly { .. }
            | MtaStsNotSaved { .. }
            | MtaSts { .. }
            | SrsForward { .. } => "smtp",
            AddressProbed { .. } | VerifyCacheMemoryOnly { .. } | VerifyBusy { .. } => "verify",
            MilterDiscard { .. }
            | NoRecipientsLeft { .. }
            | Hold { .. }
            | Redirect { .. }
            | Bcc { .. }
            | HeaderCheck { .. }
            | LimitCrossed { .. }
            | LimitReleased { .. }
            | LimitsAlone { .. }
            | MilterFailed { .. }
            | DkimNotSigned { .. }
            | DkimLoop { .. }
            | DkimSigned { .. }
            | DkimFailed { .. }
            | SenderAuth { .. }
            | ArcSealed { .. }
            | Reject(super::Reject::Queue { .. } | super::Reject::Data { .. }) => "cleanup",
            Received { origin, .. } => origin,
            SenderReplaced { .. } => "sendmail",
            Connect { .. }
            | LostConnection { .. }
            | SessionEnd { .. }
            | SessionsFull { .. }
            | Pregreet { .. }
            | Dnsbl { .. }
            | Reject(_)
            | TlsIn { .. }
            | TlsInFailed { .. }
            | TlsInTimeout { .. }
            | Timeout { .. }
            | StarttlsInjection { .. }
            | Auth { .. }
            | AuthPenaltyClose { .. }
            | RetFullRefused { .. }
            | PipeliningViolation { .. }
            | AliasTooMany { .. }
            | AliasDiscard { .. }
            | SrsReverse { .. }
            | SrsRefused { .. }
            | DataRejected { .. }
            | PolicyFailed { .. }
            | PolicyUnsupported { .. }
            | PolicyDiscard { .. }
            | AccessAnswerBad { .. }
            | PolicyWarn { .. }
            | RestrictionWarn { .. }
            | Proxied { .. }
            | HealthCheckFailed { .. }
            | ProxyRefused { .. } => "smtpd",
            Notice { .. } | NoticeRetry { .. } | NoticeRefused { .. } | NoticeSkipped { .. } => {
                "bounce"
            }
            Delivery { transport, .. } => match &**transport {
                "maildir" => "virtual",
                "none" => "qmgr",
                other => other,
            },
            HoldListUnsaved { .. }
            | Flush { .. }
            | Removed { .. }
            | Held { .. }
            | Released { .. }
            | Requeued { .. }
            | Deleted { .. }
            | Returned { .. }
            | QueueFileUnreadable { .. }
            | DestinationDead { .. }
            | Draining { .. } => "qmgr",
        }
    }

    /// The queue ID the event is about, if it has one (its `queue_id`
    /// field; the JSON line has `queue_id: null` otherwise).
    pub fn queue_id(&self) -> Option<Qid> {
        use Event::*;
        match self {
            ShadowClaimed { queue_id, .. }
            | CopyMarked { queue_id, .. }
            | ShadowNotCopied { queue_id, .. }
            | Adopted { queue_id, .. }
            | ConnectFailed(super::ConnectFailed::Job { queue_id, .. })
            | Failover { queue_id, .. }
            | MilterDiscard { queue_id }
            | NoRecipientsLeft { queue_id }
            | Hold { queue_id, .. }
            | Redirect { queue_id, .. }
            | Bcc { queue_id, .. }
            | HeaderCheck { queue_id, .. }
            | LimitCrossed { queue_id, .. }
            | MilterFailed { queue_id, .. }
            | DkimNotSigned { queue_id, .. }
            | DkimLoop { queue_id, .. }
            | DkimSigned { queue_id, .. }
            | DkimFailed { queue_id, .. }
            | SenderAuth { queue_id, .. }
            | ArcSealed { queue_id, .. }
            | SrsForward { queue_id, .. }
            | SrsReverse { queue_id, .. }
            | SrsRefused { queue_id, .. }
            | Received { queue_id, .. }
            | Reject(
                super::Reject::Policy { queue_id, .. }
                | super::Reject::Restriction { queue_id, .. }
                | super::Reject::Queue { queue_id, .. }
                | super::Reject::Data { queue_id, .. },
            )
            | RetFullRefused { queue_id, .. }
            | AliasTooMany { queue_id, .. }
            | AliasDiscard { queue_id, .. }
            | DataRejected { queue_id, .. }
            | PolicyFailed { queue_id, .. }
            | PolicyUnsupported { queue_id, .. }
            | PolicyDiscard { queue_id, .. }
            | AccessAnswerBad { queue_id, .. }
            | PolicyWarn { queue_id, .. }
            | RestrictionWarn { queue_id, .. }
            | Notice { queue_id, .. }
            | NoticeRetry { queue_id, .. }
            | NoticeRefused { queue_id, .. }
            | NoticeSkipped { queue_id, .. }
            | Delivery { queue_id, .. }
            | Removed { queue_id, .. }
            | Held { queue_id }
            | Released { queue_id }
            | Requeued { queue_id }
            | Deleted { queue_id }
            | Returned { queue_id }
            | QueueFileUnreadable { queue_id, .. } => Some(*queue_id),
            _ => None,
        }
    }

    /// The event has a field named `text` of its own, which the JSON line
    /// keeps in place of the human line (as it always did).
    pub fn has_text_field(&self) -> bool {
        matches!(self, Event::PolicyWarn { .. })
    }
}
