//! Limits on the public submission socket (`public/submit.sock`), which
//! every local account may open: how many requests one uid may have open
//! at once, how many all of them may, and how long a request may take to
//! arrive. Postfix's postdrop has the same exposure and bounds it by the
//! file system; here a request lives in the daemon's memory until it is
//! whole, so these bound that memory: at most [`PER_UID`] ×
//! (the request limit) for one account, [`ALL`] × it for everyone.
//!
//! Trust: the uid is the kernel's (SO_PEERCRED), never the client's word.
//! Invariant: a slot is held by a guard and given back when it drops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Requests one uid may have open at once.
pub const PER_UID: usize = 4;
/// Requests all local users may have open at once.
pub const ALL: usize = 32;
/// Seconds a request may take to arrive whole.
pub const READ_SECS: u64 = 30;

pub fn read_deadline() -> Duration {
    Duration::from_secs(READ_SECS)
}

/// Open requests per uid (`None`: no peer credentials).
#[derive(Clone, Default)]
pub struct Gate {
    open: Arc<Mutex<HashMap<Option<u32>, usize>>>,
}

/// Why a request was turned away.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Busy {
    #[error("this account has {PER_UID} submissions in progress already; try again")]
    Account,
    #[error("{ALL} local submissions are in progress; try again")]
    Everyone,
}

/// A slot on the door, given back when dropped.
pub struct Slot {
    gate: Gate,
    uid: Option<u32>,
}

impl Gate {
    /// A slot for `uid`, or why not.
    pub fn enter(&self, uid: Option<u32>) -> Result<Slot, Busy> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.values().sum::<usize>() >= ALL {
            return Err(Busy::Everyone);
        }
        let mine = open.entry(uid).or_insert(0);
        if *mine >= PER_UID {
            return Err(Busy::Account);
        }
        *mine += 1;
        Ok(Slot {
            gate: self.clone(),
            uid,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_account_cannot_take_every_slot_and_slots_come_back() {
        let gate = Gate::default();
        let mine: Vec<Slot> = (0..PER_UID)
            .map(|_| gate.enter(Some(1000)).unwrap())
            .collect();
        assert_eq!(gate.enter(Some(1000)).err(), Some(Busy::Account));
        let other = gate.enter(Some(1001)).unwrap();
        drop(mine);
        assert!(gate.enter(Some(1000)).is_ok());
        drop(other);
        let many: Vec<Slot> = (0..ALL as u32)
            .map(|uid| gate.enter(Some(uid)).unwrap())
            .collect();
        assert_eq!(gate.enter(Some(9999)).err(), Some(Busy::Everyone));
        drop(many);
        assert!(gate.open.lock().unwrap().is_empty());
    }
}
