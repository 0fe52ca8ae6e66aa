//! Per-client limits, like Postfix's anvil: concurrent sessions, connection
//! rate, message rate and recipient rate per client address, and failed
//! AUTH attempts.
//!
//! Rates are counted in fixed one-minute windows per address (as anvil
//! does with `anvil_rate_time_unit = 60s`). Clients in `mynetworks` are
//! exempt (Postfix: `smtpd_client_event_limit_exceptions = $mynetworks`).
//!
//! Trust: the address is the TCP peer, or the one a trusted load balancer
//! sent in a PROXY header. Invariants: memory is bounded — at most
//! [`MAX_TRACKED`] addresses are tracked; entries with no session and an
//! expired window are pruned; when the table is full of live entries a new
//! address is let through untracked rather than refused (a flood of
//! distinct addresses is the global `max_sessions` limit's job).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::SmtpdConfig;

/// The rate window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at most.
pub const MAX_TRACKED: usize = 100_000;

/// The limits (0 = no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub sessions: u32,
    pub connections_per_minute: u32,
    pub messages_per_minute: u32,
    pub recipients_per_minute: u32,
    pub auth_failures_per_minute: u32,
}

impl Limits {
    pub fn from_config(c: &SmtpdConfig) -> Limits {
        Limits {
            sessions: c.client_connection_limit,
            connections_per_minute: c.client_connection_rate_limit,
            messages_per_minute: c.client_message_rate_limit,
            recipients_per_minute: c.client_recipient_rate_limit,
            auth_failures_per_minute: c.client_auth_failure_limit,
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
    }
}

struct Table {
    clients: HashMap<IpAddr, Client>,
    last_prune: Instant,
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
        if let Some((anvil, ip)) = self.anvil.take() {
            let mut t = anvil.table.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = t.clients.get_mut(&ip) {
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

    /// Runs `f` on the client's entry (None when the table is full).
    fn with<R>(&self, ip: IpAddr, f: impl FnOnce(&mut Client, Instant) -> R) -> Option<R> {
        let now = Instant::now();
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if t.clients.len() >= MAX_TRACKED || now.duration_since(t.last_prune) >= WINDOW {
            t.clients.retain(|_, c| !c.idle(now));
            t.last_prune = now;
        }
        if t.clients.len() >= MAX_TRACKED && !t.clients.contains_key(&ip) {
            return None;
        }
        let c = t.clients.entry(ip).or_default();
        c.roll(now);
        Some(f(c, now))
    }

    /// A new session from `ip`: a slot, or why it is refused.
    pub fn connect(self: &Arc<Self>, ip: IpAddr) -> Result<SessionSlot, Refusal> {
        let limits = self.limits();
        let verdict = self.with(ip, |c, _| {
            c.connections += 1;
            if limits.connections_per_minute > 0 && c.connections > limits.connections_per_minute {
                return Err(Refusal::ConnectionRate);
            }
            if limits.sessions > 0 && c.sessions >= limits.sessions {
                return Err(Refusal::TooManySessions);
            }
            c.sessions += 1;
            Ok(())
        });
        match verdict {
            Some(Ok(())) => Ok(SessionSlot {
                anvil: Some((self.clone(), ip)),
            }),
            Some(Err(r)) => Err(r),
            None => Ok(SessionSlot { anvil: None }),
        }
    }

    /// Counts one event against `limit`; false when over it.
    fn count(&self, ip: IpAddr, limit: u32, field: fn(&mut Client) -> &mut u32) -> bool {
        if limit == 0 {
            return true;
        }
        self.with(ip, |c, _| {
            let n = field(c);
            *n += 1;
            *n <= limit
        })
        .unwrap_or(true)
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

    /// A failed AUTH from `ip`; false when over the limit.
    pub fn auth_failure(&self, ip: IpAddr) -> bool {
        self.count(ip, self.limits().auth_failures_per_minute, |c| {
            &mut c.auth_failures
        })
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
}
