//! Shadow copies (issue 23, like Exchange's shadow redundancy): no
//! acknowledged message is lost when a node dies with its disk.
//!
//! Before a node (the *origin*) answers `250`, a copy of the message is
//! on the disk of one peer (the *holder*), written in parallel with the
//! origin's own spool (`client.rs`). As the origin records outcomes, they
//! follow to its peers, batched, and the holder drops what is done
//! (`holder.rs`). When the origin has had no heartbeat for
//! `shadow_claim_secs` beyond `node_dead_secs`, or comes back having lost
//! its spool (a new *incarnation*: a random number kept in the spool
//! directory), the holder claims the copies and delivers them
//! (`claim.rs`), handing each to the intake's door for them
//! (`Intake::adopt`). The intake reaches this module only through its
//! storage trait: the daemon gives it a [`Mirrored`] store. Duplicates arise for messages whose delivery was under
//! way, or whose outcome had not reached the holder, when the origin died;
//! and when an origin comes back with its spool after its copies were
//! claimed (down longer than `shadow_claim_secs`, or `shadow_away_secs`
//! after a clean stop). Copies are never expired by age.
//!
//! Trusts: peers at the addresses in `peers` whose certificates the
//! cluster's own CA signed (`tls.rs`: mutual TLS over every frame) and
//! that prove the shared secret, both ways (`wire.rs`); a node stores
//! copies only under the name its certificate gives it. Nothing else may
//! store, acknowledge or drop copies. Copies are synced as the main spool
//! is (`spool.unsafe_ack_before_fsync` applies to them too).
//! Invariants: the origin's `250` waits for both disks (or, with no peer
//! answering, for its own and a log line, unless `shadow_required`).

mod claim;
mod client;
mod holder;
mod mirrored;
pub mod pki;
mod tls;
mod wire;

use std::path::Path;

pub use claim::start as start_claims;
pub use client::{Shadow, ShadowError};
pub use holder::{Door, Holder};
pub use mirrored::Mirrored;
pub use tls::{node_name, LinkTls};

/// The frames an attacker on the link would write, well formed as the
/// protocol knows them: a STORE of a message from `sender` to `rcpt`
/// with `body`, an ACK of copy 1, and an OUTCOMES that says message 1 is
/// done. For the tests that show none of them is taken (`tls.rs`: they
/// are not TLS records of the link).
#[doc(hidden)]
pub fn forged_frames(sender: &str, rcpt: &str, body: &[u8]) -> Vec<u8> {
    let env = sluice_spool::Envelope {
        id: 0x1234567,
        sender: sender.to_string(),
        recipients: vec![rcpt.to_string()],
        ..Default::default()
    };
    let done = wire::Outcome {
        id: 1,
        recipients: vec![0],
        complete: true,
        marks: 0,
    };
    [
        wire::store(0xFFFF_FFFF_0000_0001, &env, body),
        wire::ack(1, true),
        wire::outcomes(&[done]),
    ]
    .concat()
}

/// `N` bytes from the system's random source (challenges, incarnations).
pub(super) fn random<const N: usize>() -> [u8; N] {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source");
    bytes
}

/// Locks a mutex, taking it over from a thread that panicked holding it.
pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// This spool's incarnation: made once, kept in `<spool>/incarnation`; a
/// spool that was lost and made anew has another.
pub fn incarnation(spool_dir: &Path) -> std::io::Result<u64> {
    const FILE: &str = "incarnation";
    if let Ok(text) = std::fs::read_to_string(spool_dir.join(FILE)) {
        if let Ok(n) = u64::from_str_radix(text.trim(), 16) {
            return Ok(n);
        }
    }
    let n = u64::from_be_bytes(random());
    std::fs::create_dir_all(spool_dir)?;
    sluice_spool::replace_file(spool_dir, FILE, format!("{n:016x}\n").as_bytes(), 0o600)?;
    Ok(n)
}
