//! Per-client limits, like Postfix's anvil: concurrent sessions, connection
//! rate, message rate and recipient rate per client address, and failed
//! AUTH attempts.
//!
//! Rates are counted in fixed one-minute windows per client (as anvil
//! does with `anvil_rate_time_unit = 60s`). Clients in `mynetworks` are
//! exempt (Postfix: `smtpd_client_event_limit_exceptions = $mynetworks`).
//! An IPv6 client is counted by its network (`client_ipv6_prefix`, /64 by
//! default: one site's addresses are one client, else a /64 would give an
//! attacker unlimited sessions). At the AUTH failure limit (N failures in
//! a window) a client is penalised for a whole window: every AUTH is
//! refused before any password is checked, the right one included.
//!
//! Trust: the address is the TCP peer, or the one a trusted load balancer
//! sent in a PROXY header. Invariants: memory is bounded — at most
//! [`MAX_TRACKED`] clients are tracked; entries with no session and an
//! expired window are pruned; when the table is still full the least
//! recently seen entries (idle ones first) are evicted, so limits always
//! apply.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::SmtpdConfig;

/// The rate window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Clients tracked at most.
pub const MAX_TRACKED: usize = 100_000;
/// Entries evicted at once from a full table (amortises the scan).
const EVICT_BATCH: usize = MAX_TRACKED / 10;

/// The limits (0 = no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub sessions: u32,
    pub connections_per_minute: u32,
    pub messages_per_minute: u32,
    pub recipients_per_minute: u32,
    pub auth_failures_per_minute: u32,
    /// IPv6 clients are counted per network of this prefix length.
    pub ipv6_prefix: u8,
}

impl Limits {
    pub fn from_config(c: &SmtpdConfig) -> Limits {
        Limits {
            sessions: c.client_connection_limit,
            connections_per_minute: c.client_connection_rate_limit,
            messages_per_minute: c.client_message_rate_limit,
            recipients_per_minute: c.client_recipient_rate_limit,
            auth_failures_per_minute: c.client_auth_failure_limit,
            ipv6_prefix: c.client_ipv6_prefix,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    TooManySessions,
    ConnectionRate,
}

#[derive(Default)]
struct Client {
    sessions: u32,
    window_start: Option<Instant>,
    connections: u32,
    messages: u32,
    recipients: u32,
    auth_failures: u32,
    /// Over the AUTH failure limit: no AUTH until then.
    auth_penalty_until: Option<Instant>,
    last_seen: Option<Instant>,
}

impl Client {
    /// Starts a new window if the current one is over.
    fn roll(&mut self, now: Instant) {
        if self
            .window_start
            .is_none_or(|s| now.duration_since(s) >= WINDOW)
        {
            self.window_start = Some(now);
            self.connections = 0;
            self.messages = 0;
            self.recipients = 0;
            self.auth_failures = 0;
        }
    }

    fn idle(&self, now: Instant) -> bool {
        self.sessions == 0
            && self
                .window_start
                .is_none_or(|s| now.duration_since(s) >= WINDOW)
            && self.auth_penalty_until.is_none_or(|t| now >= t)
    }
}

/// The key a client is counted under: its address, or its IPv6 network.
fn client_key(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => ip,
        IpAddr::V6(v6) => {
            let bits = u32::from(ipv6_prefix.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
        v4 => v4,
    }
}

struct Table {
    clients: HashMap<IpAddr, Client>,
    last_prune: Instant,
}

impl Table {
    /// Makes room for one more entry: prunes idle entries, then evicts
    /// the least recently seen (those without a session first).
    fn make_room(&mut self, now: Instant) {
        if self.clients.len() < MAX_TRACKED && now.duration_since(self.last_prune) < WINDOW {
            return;
        }
        self.clients.retain(|_, c| !c.idle(now));
        self.last_prune = now;
        if self.clients.len() < MAX_TRACKED {
            return;
        }
        let mut ages: Vec<(bool, Option<Instant>, IpAddr)> = self
            .clients
            .iter()
            .map(|(ip, c)| (c.sessions > 0, c.last_seen, *ip))
            .collect();
        let n = EVICT_BATCH.min(ages.len() - 1);
        ages.select_nth_unstable(n);
        for (_, _, ip) in &ages[..n] {
            self.clients.remove(ip);
        }
    }
}

/// The shared per-client counters.
pub struct Anvil {
    /// Replaced by a reload; the counters stay.
    limits: Mutex<Limits>,
    table: Mutex<Table>,
}

/// Held by a session; gives its slot back when dropped.
pub struct SessionSlot {
    anvil: Option<(Arc<Anvil>, IpAddr)>,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if let Some((anvil, key)) = self.anvil.take() {
            let mut t = anvil.table.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = t.clients.get_mut(&key) {
                c.sessions = c.sessions.saturating_sub(1);
            }
        }
    }
}

impl Anvil {
    pub fn new(limits: Limits) -> Arc<Anvil> {
        Arc::new(Anvil {
            limits: Mutex::new(limits),
            table: Mutex::new(Table {
                clients: HashMap::new(),
                last_prune: Instant::now(),
            }),
        })
    }

    /// New limits (a reload); the clients' counts are kept.
    pub fn set_limits(&self, limits: Limits) {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = limits;
    }

    fn limits(&self) -> Limits {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the client's entry (made if new; room is made).
    fn with<R>(&self, key: IpAddr, f: impl FnOnce(&mut Client, Instant) -> R) -> R {
        let now = Instant::now();
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if !t.clients.contains_key(&key) {
            t.make_room(now);
        }
        let c = t.clients.entry(key).or_default();
        c.last_seen = Some(now);
        c.roll(now);
        f(c, now)
    }

    /// The key `ip` is counted under.
    fn key(&self, ip: IpAddr) -> IpAddr {
        client_key(ip, self.limits().ipv6_prefix)
    }

    /// A new session from `ip`: a slot, or why it is refused.
    pub fn connect(self: &Arc<Self>, ip: IpAddr) -> Result<SessionSlot, Refusal> {
        let limits = self.limits();
        let key = self.key(ip);
        self.with(key, |c, _| {
            c.connections += 1;
            if limits.connections_per_minute > 0 && c.connections > limits.connections_per_minute {
                return Err(Refusal::ConnectionRate);
            }
            if limits.sessions > 0 && c.sessions >= limits.sessions {
                return Err(Refusal::TooManySessions);
            }
            c.sessions += 1;
            Ok(())
        })?;
        Ok(SessionSlot {
            anvil: Some((self.clone(), key)),
        })
    }

    /// Counts one event against `limit`; false when over it.
    fn count(&self, ip: IpAddr, limit: u32, field: fn(&mut Client) -> &mut u32) -> bool {
        if limit == 0 {
            return true;
        }
        self.with(self.key(ip), |c, _| {
            let n = field(c);
            *n += 1;
            *n <= limit
        })
    }

    /// A new message (MAIL) from `ip`; false when over the rate.
    pub fn message(&self, ip: IpAddr) -> bool {
        self.count(ip, self.limits().messages_per_minute, |c| &mut c.messages)
    }

    /// A new recipient (RCPT) from `ip`; false when over the rate.
    pub fn recipient(&self, ip: IpAddr) -> bool {
        self.count(ip, self.limits().recipients_per_minute, |c| {
            &mut c.recipients
        })
    }

    /// A failed AUTH from `ip`; false when it reaches the limit, which
    /// starts a penalty of one window: a limit of N is N passwords
    /// checked a minute, and the attempt after the Nth failure is refused
    /// unchecked (as Postfix refuses the AUTH past
    /// `smtpd_client_auth_rate_limit`).
    pub fn auth_failure(&self, ip: IpAddr) -> bool {
        let limit = self.limits().auth_failures_per_minute;
        if limit == 0 {
            return true;
        }
        self.with(self.key(ip), |c, now| {
            c.auth_failures += 1;
            if c.auth_failures < limit {
                return true;
            }
            c.auth_penalty_until = Some(now + WINDOW);
            false
        })
    }

    /// Whether `ip` may try AUTH now (not under a penalty). Asked before
    /// any password is checked.
    pub fn auth_allowed(&self, ip: IpAddr) -> bool {
        let key = self.key(ip);
        let now = Instant::now();
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.clients
            .get(&key)
            .and_then(|c| c.auth_penalty_until)
            .is_none_or(|until| now >= until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, n])
    }

    #[test]
    fn sessions_are_counted_per_address_and_given_back() {
        let anvil = Anvil::new(Limits {
            sessions: 2,
            ..Limits::default()
        });
        let a = anvil.connect(ip(1)).unwrap();
        let _b = anvil.connect(ip(1)).unwrap();
        assert_eq!(anvil.connect(ip(1)).err(), Some(Refusal::TooManySessions));
        assert!(
            anvil.connect(ip(2)).is_ok(),
            "another address is not held up"
        );
        drop(a);
        assert!(anvil.connect(ip(1)).is_ok());
    }

    #[test]
    fn rates_are_per_window() {
        let anvil = Anvil::new(Limits {
            connections_per_minute: 2,
            messages_per_minute: 1,
            recipients_per_minute: 3,
            ..Limits::default()
        });
        let _s = (anvil.connect(ip(1)), anvil.connect(ip(1)));
        assert_eq!(anvil.connect(ip(1)).err(), Some(Refusal::ConnectionRate));
        assert!(anvil.message(ip(1)) && !anvil.message(ip(1)));
        assert!((0..3).all(|_| anvil.recipient(ip(1))));
        assert!(!anvil.recipient(ip(1)));
        assert!(anvil.message(ip(3)), "rates are per address");
    }

    #[test]
    fn ipv6_clients_are_counted_per_network() {
        let anvil = Anvil::new(Limits {
            sessions: 1,
            ipv6_prefix: 64,
            ..Limits::default()
        });
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let _s = anvil.connect(a).unwrap();
        assert_eq!(
            anvil.connect(same_64).err(),
            Some(Refusal::TooManySessions),
            "another address of the same /64 is the same client"
        );
        assert!(anvil.connect(other_64).is_ok());
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_seen_and_keeps_limiting() {
        let anvil = Anvil::new(Limits {
            sessions: 1,
            ..Limits::default()
        });
        // The table is full of clients that each hold a session.
        let mut held = Vec::new();
        for n in 0..MAX_TRACKED as u32 {
            held.push(anvil.connect(IpAddr::from(n.to_be_bytes())).unwrap());
        }
        let fresh = IpAddr::from([203, 0, 113, 1]);
        let _s = anvil.connect(fresh).unwrap();
        assert_eq!(
            anvil.connect(fresh).err(),
            Some(Refusal::TooManySessions),
            "limits still apply with the table full"
        );
        let last = IpAddr::from((MAX_TRACKED as u32 - 1).to_be_bytes());
        assert_eq!(
            anvil.connect(last).err(),
            Some(Refusal::TooManySessions),
            "the most recently seen client is kept"
        );
        assert!(anvil.table.lock().unwrap().clients.len() <= MAX_TRACKED);
    }

    #[test]
    fn past_the_auth_failure_limit_every_attempt_waits_for_the_penalty() {
        let anvil = Anvil::new(Limits {
            auth_failures_per_minute: 2,
            ..Limits::default()
        });
        assert!(anvil.auth_allowed(ip(1)));
        assert!(anvil.auth_failure(ip(1)), "one failure of two");
        assert!(anvil.auth_allowed(ip(1)), "under the limit");
        assert!(!anvil.auth_failure(ip(1)), "the second reaches the limit");
        assert!(!anvil.auth_allowed(ip(1)), "penalised: no third check");
        assert!(anvil.auth_allowed(ip(2)), "per client");
    }
}
