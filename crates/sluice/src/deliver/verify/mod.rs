//! Address verification, as Postfix's verify(8): is an address
//! deliverable? Asked by `reject_unverified_recipient` and
//! `reject_unverified_sender` ([`answer`] turns the status into their
//! reply).
//!
//! An address in a local domain is answered from the local tables (the
//! mailbox and alias tables), with no probe. Any other address is routed
//! exactly as a delivery would be ([`Router`]: transport table, relayhost,
//! MX) and probed there (`deliver/smtp`'s [`Prober`]: `MAIL FROM`,
//! `RCPT TO`, `QUIT`, never `DATA`). As in Postfix, the first ask starts a
//! probe and waits at most `poll_count × poll_delay` for it; a probe not
//! done by then answers "unknown" (smtpd's 450 "address verification in
//! progress") and goes on in the background, so a later ask finds its
//! answer in the cache. Definite answers are cached (positive 31 days,
//! negative 3 days, on disk: `store.rs`) and refreshed in the background
//! when older than their refresh time (7 days, 3 hours), meanwhile still
//! given, with at most one refresh probe per 1000 s (as Postfix).
//!
//! Trust: the address is the SMTP client's, an attacker's; the next hop's
//! replies a remote server's. Invariants:
//! - one probe at a time per address (single flight): asks while it runs
//!   wait for the same probe;
//! - at most `max_concurrent_probes` probes connected at once and at most
//!   `pending_request_limit` pending: beyond, an address not known yet is
//!   "unknown" without a probe (no flood of the next hops, whatever the
//!   clients ask); each probe is one connection with two commands (no
//!   amplification) and ends within `probe_timeout`;
//! - a temporary failure (no connection, a 4XX, a timeout) is never
//!   cached and never replaces a cached answer;
//! - a next hop's words reach a reply or the log only cleaned
//!   (`status.rs`: no control character).

pub mod status;
mod store;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

pub use crate::config::verify::{SettingsError, TempfailAction, VerifySettings};
pub use status::{HopReply, Kind, Unknown, VerifyStatus};

use crate::deliver::smtp::{wire_safe, ProbeOutcome, Prober};
use crate::log::{Event, Logger};
use crate::message::address::domain_of;
use crate::message::reply::{Enhanced, Reply};
use crate::routing::mailboxes::{Resolution, VirtualMailboxes};
use crate::routing::Router;
use store::{age, Age, Entry, Store};

/// Seconds between two refresh probes of a stale entry (Postfix's
/// verify(8): 1000).
const PROBE_TTL: u64 = 1000;

/// Verifies addresses; cheap to clone (one shared state).
#[derive(Clone)]
pub struct Verifier {
    inner: Arc<Inner>,
}

struct Inner {
    settings: VerifySettings,
    /// The probe's `MAIL FROM` (empty: the null sender).
    sender: String,
    router: Router,
    mailboxes: Arc<VirtualMailboxes>,
    prober: Prober,
    logger: Logger,
    /// The cache; SQLite, used on blocking threads only.
    store: Arc<Mutex<Store>>,
    /// Probes pending, by cache key: their answer once known.
    flights: Mutex<HashMap<String, watch::Receiver<Option<VerifyStatus>>>>,
    /// Probes connected at once.
    slots: Arc<Semaphore>,
    /// Probes started since this verifier was made.
    started: AtomicU64,
    /// When expired entries were last removed (Unix seconds).
    cleaned: AtomicU64,
}

/// The cache key of an address: the local part as given, the domain in
/// lower case.
fn key_of(address: &str) -> String {
    match address.rsplit_once('@') {
        Some((local, domain)) => format!("{local}@{}", domain.to_ascii_lowercase()),
        None => address.to_string(),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Our own reply, as a verification's ground.
fn own(code: u16, status: Option<Enhanced>, text: &str) -> HopReply {
    HopReply::new(&Reply::own(code, status, text), None, None)
}

impl Verifier {
    /// A verifier routing with `router`, answering local domains from
    /// `mailboxes`, probing with `prober`, its cache in `data_dir`.
    /// `settings` must have passed [`VerifySettings::validate`].
    pub fn new(
        settings: VerifySettings,
        router: Router,
        mailboxes: Arc<VirtualMailboxes>,
        prober: Prober,
        data_dir: &Path,
    ) -> Verifier {
        let logger = prober.logger.clone();
        let store = Store::open(data_dir, settings.cache_max_entries).unwrap_or_else(|e| {
            logger.emit(&Event::VerifyCacheMemoryOnly {
                error: e.to_string().into(),
            });
            Store::memory(settings.cache_max_entries)
        });
        let sender = settings.probe_sender(&prober.config.hostname.to_string());
        Verifier {
            inner: Arc::new(Inner {
                slots: Arc::new(Semaphore::new(settings.max_concurrent_probes.max(1))),
                sender,
                settings,
                router,
                mailboxes,
                prober,
                logger,
                store: Arc::new(Mutex::new(store)),
                flights: Mutex::new(HashMap::new()),
                started: AtomicU64::new(0),
                cleaned: AtomicU64::new(0),
            }),
        }
    }

    pub fn settings(&self) -> &VerifySettings {
        &self.inner.settings
    }

    /// Probes started since this verifier was made.
    pub fn probes_started(&self) -> u64 {
        self.inner.started.load(Ordering::Relaxed)
    }

    /// Probes holding a connection slot now.
    pub fn probes_connected(&self) -> usize {
        let max = self.inner.settings.max_concurrent_probes.max(1);
        max.saturating_sub(self.inner.slots.available_permits())
    }

    /// Probes pending now.
    pub fn probes_pending(&self) -> usize {
        self.inner.flights.lock().map_or(0, |f| f.len())
    }

    /// What is known of `address` (see the module head). The null sender
    /// (empty) is deliverable: there is nothing to probe.
    pub async fn status(&self, address: &str, kind: Kind) -> VerifyStatus {
        let _ = kind; // Both kinds probe alike; only the reply differs.
        if address.is_empty() {
            return VerifyStatus::Deliverable;
        }
        if !wire_safe(address) {
            let why = own(553, Enhanced::new(5, 1, 3), "bad address syntax");
            return VerifyStatus::Undeliverable(why);
        }
        if self.inner.mailboxes.is_local_domain(domain_of(address)) {
            return self.local(address).await;
        }
        let key = key_of(address);
        let cached = self.lookup(&key).await;
        let s = &self.inner.settings;
        match cached.as_ref().map(|e| (age(e, now(), s), e)) {
            Some((Age::Fresh, e)) => return status_of(e),
            Some((Age::Stale, e)) => {
                // Answer from the cache; refresh in the background, at
                // most once per PROBE_TTL.
                if self.refresh_due(&key).await {
                    let _ = self.start(&key, address);
                }
                return status_of(e);
            }
            _ => {}
        }
        let Some(mut answer) = self.start(&key, address) else {
            return VerifyStatus::Unknown(Unknown::Pending);
        };
        let wait = async {
            let done = answer.wait_for(Option::is_some).await;
            done.ok().and_then(|d| d.clone())
        };
        match tokio::time::timeout(s.poll_window(), wait).await {
            Ok(Some(done)) => done,
            _ => VerifyStatus::Unknown(Unknown::Pending),
        }
    }

    /// An address in a local domain, from the tables.
    async fn local(&self, address: &str) -> VerifyStatus {
        match self.inner.mailboxes.resolve(address).await {
            Ok(Resolution::Accept(_) | Resolution::Discard | Resolution::NotLocal) => {
                VerifyStatus::Deliverable
            }
            Ok(Resolution::Unknown) => VerifyStatus::Undeliverable(own(
                550,
                Enhanced::new(5, 1, 1),
                "User unknown in virtual mailbox table",
            )),
            Err(e) => VerifyStatus::Unknown(Unknown::Failed(own(
                451,
                Enhanced::new(4, 3, 0),
                &format!("address lookup failed: {e}"),
            ))),
        }
    }

    /// The cached entry of `key`.
    async fn lookup(&self, key: &str) -> Option<Entry> {
        let store = self.inner.store.clone();
        let key = key.to_string();
        let got = tokio::task::spawn_blocking(move || store.lock().ok()?.get(&key)).await;
        got.ok().flatten()
    }

    /// Whether the stale entry of `key` is due a refresh probe (noting it).
    async fn refresh_due(&self, key: &str) -> bool {
        let store = self.inner.store.clone();
        let key = key.to_string();
        let due = tokio::task::spawn_blocking(move || {
            let store = store.lock().ok()?;
            Some(store.refresh_due(&key, now(), PROBE_TTL))
        });
        due.await.ok().flatten().unwrap_or(false)
    }

    /// The pending probe of `key`, started if there is none; `None` when
    /// `pending_request_limit` probes are pending.
    fn start(&self, key: &str, address: &str) -> Option<watch::Receiver<Option<VerifyStatus>>> {
        let mut flights = self.inner.flights.lock().ok()?;
        if let Some(answer) = flights.get(key) {
            return Some(answer.clone());
        }
        if flights.len() >= self.inner.settings.pending_request_limit {
            self.inner.logger.emit(&Event::VerifyBusy {
                address: address.into(),
                pending: flights.len() as u64,
            });
            return None;
        }
        let (tx, rx) = watch::channel(None);
        flights.insert(key.to_string(), rx.clone());
        drop(flights);
        self.inner.started.fetch_add(1, Ordering::Relaxed);
        let flight = Flight {
            inner: self.inner.clone(),
            key: key.to_string(),
        };
        let address = address.to_string();
        tokio::spawn(async move {
            let status = flight.inner.probe(&address).await;
            flight.inner.remember(&flight.key, &status).await;
            flight.inner.logger.emit(&Event::AddressProbed {
                address: address.as_str().into(),
                result: match &status {
                    VerifyStatus::Deliverable => "deliverable",
                    VerifyStatus::Undeliverable(_) => "undeliverable",
                    VerifyStatus::Unknown(_) => "unknown",
                }
                .into(),
                reason: status.reason().into(),
            });
            let _ = tx.send(Some(status));
            drop(flight);
        });
        Some(rx)
    }
}

/// A pending probe's place in `flights`, given up when the probe's task
/// ends, however it ends.
struct Flight {
    inner: Arc<Inner>,
    key: String,
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Ok(mut flights) = self.inner.flights.lock() {
            flights.remove(&self.key);
        }
    }
}

/// The status a cached entry gives.
fn status_of(entry: &Entry) -> VerifyStatus {
    match &entry.reply {
        None => VerifyStatus::Deliverable,
        Some(reply) => VerifyStatus::Undeliverable(reply.clone()),
    }
}

impl Inner {
    /// One probe, within a connection slot and `probe_timeout`.
    async fn probe(&self, address: &str) -> VerifyStatus {
        let Ok(_slot) = self.slots.clone().acquire_owned().await else {
            return VerifyStatus::Unknown(Unknown::Pending);
        };
        let Some(hop) = self.router.route(&self.sender, address) else {
            let why = own(
                550,
                Enhanced::new(5, 1, 2),
                "no route to the address's domain",
            );
            return VerifyStatus::Undeliverable(why);
        };
        let limit = Duration::from_secs(self.settings.probe_timeout_secs);
        let probe = self.prober.probe(hop, &self.sender, address);
        match tokio::time::timeout(limit, probe).await {
            Ok(ProbeOutcome::Accepted { .. }) => VerifyStatus::Deliverable,
            Ok(ProbeOutcome::Refused {
                relay,
                command,
                reply,
            }) => VerifyStatus::Undeliverable(HopReply::new(&reply, relay.as_deref(), command)),
            Ok(ProbeOutcome::Failed {
                relay,
                command,
                reply,
            }) => VerifyStatus::Unknown(Unknown::Failed(HopReply::new(
                &reply,
                relay.as_deref(),
                command,
            ))),
            Err(_) => {
                let text = format!("probe timed out after {} s", limit.as_secs());
                let why = own(451, Enhanced::new(4, 4, 2), &text);
                VerifyStatus::Unknown(Unknown::Failed(why))
            }
        }
    }

    /// Caches a definite answer (an undeliverable one only with
    /// `negative_cache`); removes expired entries when it is time.
    async fn remember(&self, key: &str, status: &VerifyStatus) {
        let reply = match status {
            VerifyStatus::Deliverable => None,
            VerifyStatus::Undeliverable(r) if self.settings.negative_cache => Some(r.clone()),
            _ => return,
        };
        let at = now();
        let interval = self.settings.cache_cleanup_interval_secs;
        let last = self.cleaned.load(Ordering::Relaxed);
        let clean = interval > 0 && at.saturating_sub(last) >= interval;
        if clean {
            self.cleaned.store(at, Ordering::Relaxed);
        }
        let (store, key, settings) = (self.store.clone(), key.to_string(), self.settings.clone());
        let entry = Entry { reply, updated: at };
        let _ = tokio::task::spawn_blocking(move || {
            let Ok(store) = store.lock() else { return };
            let _ = store.put(&key, &entry);
            if clean {
                let _ = store.clean(at, &settings);
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::key_of;

    #[test]
    fn keys_fold_the_domain_only() {
        assert_eq!(key_of("User@Example.COM"), "User@example.com");
        assert_eq!(key_of("postmaster"), "postmaster");
    }
}
