//! Each event's human line (`Display`: byte for byte the Postfix-like
//! wording admins grep for).
//!
//! Trusts the event's fields; the writer keeps a line end in them from
//! starting a line of its own.

use std::fmt::{self, Display, Formatter};

use super::Event;

/// `, orig_to=<…>` after `to=<…>`, or nothing.
struct OrigTo<'a>(Option<&'a str>);

impl Display for OrigTo<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(given) => write!(f, ", orig_to=<{given}>"),
            None => Ok(()),
        }
    }
}

/// `s` joined by `sep`, without making a string of it.
struct Joined<'a, T>(&'a [T], &'static str);

impl<T: AsRef<str>> Display for Joined<'_, T> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(self.1)?;
            }
            f.write_str(s.as_ref())?;
        }
        Ok(())
    }
}

impl Display for Event<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            LogDropped { lines } => write!(f, "{lines} lines dropped (log writer behind)"),
            LogReopened => f.write_str("log file reopened"),
            LogReopenFailed { error } => write!(f, "cannot reopen the log: {error}"),
            CrateLog { level, message, .. } => write!(f, "{level}: {message}"),
            AcceptRecovered { what, failures, .. } => {
                write!(f, "{what}: accepting again after {failures} failed accepts")
            }
            AcceptFailed { what, error, .. } => write!(
                f,
                "warning: {what}: accept failed: {error}; backing off until it works again"
            ),
            AdminRequest { line } => write!(f, "request: {line}"),
            Warning { line, .. }
            | HttpRefused { line, .. }
            | LookupStats { line }
            | DaneUnusable { line } => {
                f.write_str(line)
            }
            NodeNameWait { node, wait_ms } => write!(
                f,
                "node name {node} is held in Redis by another process: waiting up to {wait_ms} ms for it to lapse"
            ),
            NodeNameUnchecked { node, error } if error == "no answer in 2 s" => write!(
                f,
                "Redis did not answer in 2 s: node name {node} not checked"
            ),
            NodeNameUnchecked { node, error } => write!(
                f,
                "cannot register node name {node} in Redis ({error}): starting without the check"
            ),
            NodeNameTaken { node } => write!(
                f,
                "error: another live process uses node name {node} (two incarnations alternate: copies and caps are confused): give each node its own `node`"
            ),
            NodeNameBack { node } => write!(f, "node name {node} is this process's again"),
            RedisUnusable { error } => write!(
                f,
                "redis_url cannot be used: {error}; each node keeps its share of every cap"
            ),
            RedisBack { node, live_nodes } => write!(
                f,
                "redis reachable again: node {node} back on shared limits ({live_nodes} nodes alive)"
            ),
            RedisLost { node, error } => write!(
                f,
                "redis unavailable: {error}; node {node} keeps its share of every cap"
            ),
            LeasesNotReturned { error, lapse_secs } => write!(
                f,
                "leases not given back at stop: {error}; they lapse in {lapse_secs} s"
            ),
            DeadMarkShared { addr, secs } => {
                write!(f, "{addr}: marked dead by a node of the cluster, for {secs} s")
            }
            _ => self.fmt_shadow(f),
        }
    }
}

impl Event<'_> {
    fn fmt_shadow(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            ShadowWaiting { origin } => write!(
                f,
                "node {origin} stopped cleanly: its copies wait for it (shadow_away_secs)"
            ),
            ShadowClaimCutShort { origin, error } => write!(
                f,
                "claim of node {origin}'s copies cut short: {error}; resumed at the next heartbeat"
            ),
            ShadowClaiming { origin, incarnation, copies } => write!(
                f,
                "node {origin} (incarnation {incarnation}) is gone: claiming its {copies} copies"
            ),
            ShadowClaimed { origin, queue_id, new_id } => {
                write!(f, "{queue_id}: claimed from node {origin}, queued as {new_id}")
            }
            ShadowClaimDone { origin, queued, elsewhere } => write!(
                f,
                "node {origin}: {queued} copies queued here, {elsewhere} claimed by another peer"
            ),
            ShadowPeerBack { peer } => write!(f, "peer {peer} takes copies again"),
            ShadowPeerAway { error, .. } => write!(f, "peer set aside: {error}"),
            ShadowPeerUnproven { peer } => write!(
                f,
                "peer {peer} could not prove the shadow_secret: not a peer"
            ),
            ShadowRefusedByPeer { peer, reason } => {
                write!(f, "peer {peer} refused this node: {reason}")
            }
            ShadowPeerLinked { peer, node } => {
                write!(f, "peer {peer} is node {node}: copies go there")
            }
            ShadowOutcomesDropped { peer, .. } => write!(
                f,
                "peer {peer} away: its oldest outcomes dropped (its copies of those messages stay until this node dies and they are claimed: duplicates)"
            ),
            ShadowCopiesUnreadable { area, error } => {
                write!(f, "copies of {area} cannot be opened: {error}")
            }
            ShadowHolding { origin, incarnation, copies } => write!(
                f,
                "holding {copies} copies for node {origin} (incarnation {incarnation})"
            ),
            ShadowLinkEnded { peer, error } => write!(f, "link from {peer} ended: {error}"),
            ShadowStrangersRefused { links, last } => write!(
                f,
                "refused {links} link(s) from addresses not in peers (the last from {last})"
            ),
            ShadowLinkRefused { peer, reason } => {
                write!(f, "refused a link from {peer}: {reason}")
            }
            CopyMarked { origin, queue_id, held, .. } => {
                let state = if *held { "held" } else { "released" };
                write!(f, "copy {queue_id} of node {origin}: {state} on its origin")
            }
            ShadowNewIncarnation { origin, incarnation } => write!(
                f,
                "node {origin} is back as a new incarnation {incarnation}: its earlier copies are claimed"
            ),
            ShadowNotCopied { queue_id, error } => {
                write!(f, "{queue_id}: accepted without a shadow copy: {error}")
            }
            ShadowPeerUnresolved { peer, error } => write!(
                f,
                "peer {peer}: cannot resolve it ({error}); no links are taken from it"
            ),
            Adopted { queue_id, origin, origin_queue_id, from, size, nrcpt } => write!(
                f,
                "{queue_id}: adopted from node {origin} (its {origin_queue_id}), from=<{from}>, size={size}, nrcpt={nrcpt} (queue active)"
            ),
            _ => self.fmt_daemon(f),
        }
    }

    fn fmt_daemon(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            AcmeFailed { error, retry_secs } => write!(
                f,
                "acme: renewal failed: {error}; the current certificate stays; next try in {retry_secs}s"
            ),
            AcmeOrdering { domains, reason } => {
                write!(f, "acme: ordering a certificate for {domains} ({reason})")
            }
            AcmeIssued { domains, serial, not_after } => write!(
                f,
                "acme: certificate for {domains} installed (serial {serial}, valid until {not_after})"
            ),
            MaildirNoCommitThread { error } => {
                write!(f, "maildir: no commit thread ({error}); syncing each")
            }
            StoppedListening { addr } => write!(f, "stopped listening on {addr}"),
            ListenFailed { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            Listening { addr, kind } => match &**kind {
                "metrics" => write!(f, "metrics and dashboard on http://{addr}/"),
                "acme" => write!(f, "ACME http-01 challenges on http://{addr}/"),
                _ => write!(f, "listening on {addr} ({kind})"),
            },
            BalancerDrain { secs } => write!(
                f,
                "stopping: failing the balancer's health checks for {secs} s before closing the listeners"
            ),
            Drained { finished, abandoned } => write!(
                f,
                "drained: {finished} deliveries finished, {abandoned} abandoned at the deadline (delivered again after restart)"
            ),
            Stopped { messages, syncs } => write!(
                f,
                "daemon stopped: spool stored {messages} messages with {syncs} disk syncs ({:.1} messages per sync)",
                *messages as f64 / (*syncs).max(1) as f64
            ),
            MaildirStats { files, syncs } => write!(
                f,
                "maildir: delivered {files} files with {syncs} disk syncs ({:.1} files per sync)",
                *files as f64 / (*syncs).max(1) as f64
            ),
            Started { segments, to_deliver, segment_mib, reserve_mib, unsafe_ack } => write!(
                f,
                "daemon started: spool {segments} segments, {to_deliver} messages to deliver, segments of {segment_mib} MiB, {reserve_mib} MiB kept free{}",
                if *unsafe_ack {
                    " (WARNING: unsafe_ack_before_fsync is on; acknowledged mail can be lost on power failure)"
                } else {
                    ""
                }
            ),
            SpoolDamage { damage } => write!(f, "spool recovery: {damage}"),
            SpoolQuarantined { ranges } => write!(
                f,
                "spool recovery: {ranges} damaged ranges already quarantined in spool/corrupt/"
            ),
            SpoolPinned { segments } => write!(
                f,
                "spool recovery: WARNING: segments {segments:?} hold damaged bytes that could not be quarantined; they are kept (no space is reclaimed behind them) until a start-up can copy them to spool/corrupt/"
            ),
            Reload(r) => r.fmt(f),
            ReloadTables => f.write_str("reload: lookup tables"),
            AdminSocketFailed { dir, error } => {
                write!(f, "fatal: admin socket in {dir}: {error}")
            }
            RunningAs { user, uid } => write!(f, "running as {user} (uid {uid})"),
            LauncherStarted { pid } => write!(
                f,
                "launcher started (pid {pid}): commands run as other accounts through it"
            ),
            LookupFailed { table, key, error } => {
                write!(f, "table {table}: lookup of {key} failed: {error}")
            }
            TableReloaded { table, path, keys } => {
                write!(f, "table {table}: reloaded {path} ({keys} keys)")
            }
            TableReloadRefused { table, error } => {
                write!(f, "table {table}: reload refused, old contents kept: {error}")
            }
            TableWarning {
                table,
                path,
                line,
                problem,
            } => write!(f, "warning: table {table}: {path}, line {line}: {problem}"),
            _ => self.fmt_outbound(f),
        }
    }

    fn fmt_outbound(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            DaneUnvalidated { domain } => write!(
                f,
                "DANE: MX RRset of {domain} is not DNSSEC-validated: opportunistic TLS"
            ),
            DaneExcluded { domain, hosts } => write!(
                f,
                "DANE: {} not in its DNSSEC-validated MX RRset of {domain}: not used",
                Joined(hosts, ", ")
            ),
            ConnectFailed(c) => c.fmt(f),
            TlsFallback { error, .. } => write!(f, "{error}; trying again without TLS"),
            TlsOut { relay, verified, detail } => {
                let trust = if *verified { "Verified" } else { "Untrusted" };
                write!(f, "{trust} TLS connection established to {relay}: {detail}")
            }
            Egress { relay, source, address, helo, bind_error } => {
                let from = address.map_or("the system's address".to_string(), |a| a.to_string());
                write!(f, "connected to {relay} from {from} (source {source}), helo={helo}")?;
                match bind_error {
                    Some(e) => write!(f, "; warning: cannot bind the source address: {e}"),
                    None => Ok(()),
                }
            }
            SaslOut { relay, sasl_username, sasl_method } => write!(
                f,
                "SASL authentication to {relay}: sasl_method={sasl_method}, sasl_username={sasl_username}"
            ),
            Failover { queue_id, peer, sessions, next: false } => write!(
                f,
                "{queue_id}: every recipient deferred by {peer}; no more hosts tried after {sessions} sessions (delivery.mx_session_limit)"
            ),
            Failover { queue_id, peer, .. } => write!(
                f,
                "{queue_id}: every recipient deferred by {peer}; trying the next host"
            ),
            MxTruncated { domain, hosts, limit } => write!(
                f,
                "{domain}: {hosts} MX hosts, using the first {limit} addresses (delivery.mx_address_limit)"
            ),
            MxRefused { domain, host, ip, port, error } => write!(
                f,
                "warning: mail for {domain}: not connecting to MX host {host}[{ip}]:{port}: {error}"
            ),
            MtaStsTesting { domain, hosts } => write!(
                f,
                "MTA-STS testing policy of {domain}: {} would be refused",
                Joined(hosts, ", ")
            ),
            MtaStsMemoryOnly { error } => {
                write!(f, "warning: MTA-STS policies kept in memory only: {error}")
            }
            MtaStsNotSaved { domain, error } => {
                write!(f, "warning: MTA-STS policy of {domain} not saved: {error}")
            }
            MtaSts { domain, error, policy_in_force, .. } => {
                let left = match policy_in_force {
                    true => "the cached policy stays in force",
                    false => "no policy in force",
                };
                write!(
                    f,
                    "MTA-STS policy of {domain}: fetch failed: mta-sts.{domain}: {error}; {left}"
                )
            }
            AddressProbed { address, result, reason } => {
                write!(f, "probe <{address}>: {result}: {reason}")
            }
            VerifyCacheMemoryOnly { error } => write!(
                f,
                "warning: address verification cache kept in memory only: {error}"
            ),
            VerifyBusy { address, pending } => write!(
                f,
                "warning: <{address}> not probed: {pending} probes pending (verify.pending_request_limit)"
            ),
            _ => self.fmt_intake(f),
        }
    }

    pub(super) fn fmt_smtpd(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            Connect { client_ip, client_port } => {
                write!(f, "connect from [{client_ip}]:{client_port}")
            }
            LostConnection { client_ip, error, .. } => {
                write!(f, "lost connection from [{client_ip}]: {error}")
            }
            SessionEnd { client_ip, client_port, messages, errors, .. } => write!(
                f,
                "disconnect from [{client_ip}]:{client_port} messages={messages} errors={errors}"
            ),
            SessionsFull { client_ip } => write!(
                f,
                "NOQUEUE: reject: connect from [{client_ip}]: 421 4.3.2 too many sessions"
            ),
            Pregreet { client_ip, client_port } => write!(
                f,
                "PREGREET from [{client_ip}]:{client_port}: client talked before the greeting; disconnecting"
            ),
            Dnsbl { client_ip, score, listed_by, unanswered } => {
                write!(
                    f,
                    "DNSBL rank {score} for [{client_ip}] (listed by: {}",
                    Joined(listed_by, " ")
                )?;
                if !unanswered.is_empty() {
                    write!(f, "; no answer from {}", Joined(unanswered, " "))?;
                }
                f.write_str(")")
            }
            Reject(r) => r.fmt(f),
            TlsIn { client_ip, detail, .. } => {
                write!(f, "TLS connection established from [{client_ip}]: {detail}")
            }
            TlsInFailed { client_ip, error } => {
                write!(f, "TLS handshake failed from [{client_ip}]: {error}")
            }
            TlsInTimeout { client_ip } => write!(f, "TLS handshake timed out from [{client_ip}]"),
            Timeout { client_ip, cause, .. } => {
                let what = match &**cause {
                    "session_limit" => "session time limit exceeded",
                    _ => "timeout exceeded",
                };
                write!(f, "{what} from [{client_ip}] (421 4.4.2)")
            }
            StarttlsInjection { client_ip, octets } => write!(
                f,
                "discarded {octets} octets pipelined after STARTTLS from [{client_ip}]"
            ),
            Auth { client_ip, method, username, result, error } => {
                let user = username.as_deref().unwrap_or_default();
                match &**result {
                    "penalised" => write!(
                        f,
                        "NOQUEUE: reject: [{client_ip}]: AUTH {method} for {user:?} refused: too many failed authentications"
                    ),
                    "ok" => write!(
                        f,
                        "client=[{client_ip}], sasl_method={method}, sasl_username={user}"
                    ),
                    "failed" => write!(
                        f,
                        "warning: [{client_ip}]: SASL {method} authentication failed for {user:?}"
                    ),
                    _ => write!(
                        f,
                        "warning: [{client_ip}]: SASL {method}: cannot check now: {}",
                        error.as_deref().unwrap_or_default()
                    ),
                }
            }
            AuthPenaltyClose { client_ip } => write!(
                f,
                "NOQUEUE: reject: [{client_ip}]: 421 4.7.0 too many failed authentications"
            ),
            RetFullRefused { queue_id, client_ip } => write!(
                f,
                "{queue_id}: RET=FULL from a client that may not relay, [{client_ip}]: notices will return headers only"
            ),
            PipeliningViolation { client_ip, after } => write!(
                f,
                "improper command pipelining after {after} from [{client_ip}]; disconnecting"
            ),
            AliasTooMany { queue_id, client_ip, to, max } => write!(
                f,
                "{queue_id}: reject: RCPT from [{client_ip}]: 452 4.5.3 <{to}>: alias expansion over {max} recipients"
            ),
            AliasDiscard { queue_id, to } => write!(f, "{queue_id}: to=<{to}>: discarded by alias"),
            DataRejected { queue_id, client_ip, reply, from } => write!(
                f,
                "{queue_id}: reject: end of data from [{client_ip}]: {reply}; from=<{from}>"
            ),
            PolicyFailed { queue_id, server, error, .. } => write!(
                f,
                "warning: {queue_id}: policy service {server}: {error}; default action applies"
            ),
            PolicyUnsupported { queue_id, server, action, .. } => write!(
                f,
                "warning: {queue_id}: policy service {server}: unsupported action {action:?}; default action applies"
            ),
            PolicyDiscard { queue_id, why, .. } => {
                write!(f, "{queue_id}: discard: policy service: {why}")
            }
            AccessAnswerBad { queue_id, client_ip, error } => write!(
                f,
                "warning: {queue_id}: from [{client_ip}]: {error}; the restriction answers 451 4.3.5"
            ),
            PolicyWarn { queue_id, text, .. } => {
                write!(f, "{queue_id}: warn: policy service: {text}")
            }
            RestrictionWarn { queue_id, client_ip, by, reply } => write!(
                f,
                "{queue_id}: reject_warning: from [{client_ip}]: {reply} ({by})"
            ),
            Proxied { client_ip, client_port, lb_ip, lb_port } => write!(
                f,
                "proxied connection from [{client_ip}]:{client_port} via [{lb_ip}]:{lb_port}"
            ),
            HealthCheckFailed { lb_ip, lb_port } => write!(
                f,
                "health check from [{lb_ip}]:{lb_port} answered 421: stopping"
            ),
            ProxyRefused { lb_ip, lb_port, error, .. } => {
                write!(f, "warning: [{lb_ip}]:{lb_port}: {error}; disconnecting")
            }
            _ => self.fmt_queue(f),
        }
    }

    fn fmt_queue(&self, f: &mut Formatter<'_>) -> fmt::Result {
        use Event::*;
        match self {
            Notice { queue_id, kind, notice_id } => {
                let what = match &**kind {
                    "failure" => "non-delivery",
                    "delay" => "delay",
                    _ => "delivery status",
                };
                write!(f, "{queue_id}: sender {what} notification: {notice_id}")
            }
            NoticeRetry { queue_id, error, retry_secs } => write!(
                f,
                "{queue_id}: cannot store bounce: {error}; retrying in {retry_secs}s"
            ),
            NoticeRefused { queue_id, error } => {
                write!(f, "{queue_id}: error: notice refused: {error}; none sent")
            }
            NoticeSkipped { line, .. } => f.write_str(line),
            Delivery { queue_id, to, orig_to, relay, delay, dsn, status, reason, .. } => write!(
                f,
                "{queue_id}: to=<{to}>{}, relay={relay}, delay={delay:.2}, dsn={dsn}, status={status} ({reason})",
                OrigTo(orig_to.as_deref())
            ),
            HoldListUnsaved { error } => write!(f, "warning: cannot save the hold list: {error}"),
            Flush { messages } => write!(f, "flush: {messages} messages to be retried now"),
            Removed { queue_id, by } if by == "administrator" => {
                write!(f, "{queue_id}: removed (deleted by the administrator)")
            }
            Removed { queue_id, .. } => write!(f, "{queue_id}: removed"),
            Held { queue_id } => write!(f, "{queue_id}: placed on hold"),
            Released { queue_id } => write!(f, "{queue_id}: released from hold"),
            Requeued { queue_id } => write!(f, "{queue_id}: requeued"),
            Deleted { queue_id } => write!(f, "{queue_id}: deleted by the administrator"),
            Returned { queue_id } => write!(
                f,
                "{queue_id}: returned to the sender by the administrator"
            ),
            QueueFileUnreadable { queue_id, error } => write!(
                f,
                "{queue_id}: cannot read queue file: {error}; left in the spool, retried later"
            ),
            DestinationDead { destination, deferred } => write!(
                f,
                "{destination}: destination marked dead (connect failed); {deferred} queued jobs deferred"
            ),
            Draining { in_flight, bounces } => write!(
                f,
                "draining: {in_flight} deliveries in flight, {bounces} bounces being stored"
            ),
            // Every other variant is matched by the functions before.
            _ => Ok(()),
        }
    }
}
