//! What the administrator decided about messages (`queue/admin.rs` acts
//! on requests): the held ones, kept in `<data_dir>/hold.list` so a hold
//! survives a restart, and deletions or bounces of messages with
//! deliveries in flight, which take effect when their round ends.
//!
//! Invariants: the hold list on disk is replaced whole, and of two saves
//! racing on the blocking pool the older never replaces the newer
//! (`HoldFile`'s generations); a held message is neither in line for room
//! nor retried (the scheduler asks `is_held` before either).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::log::qid;

/// A durable write of the hold list, made here (what to write) and run
/// by the driver off its thread.
pub type HoldSave = Box<dyn FnOnce() -> std::io::Result<()> + Send>;

/// Deletion or bounce waiting for a round to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doom {
    Delete,
    Bounce,
}

/// The hold list's file name in `data_dir`.
const HOLD_LIST: &str = "hold.list";

#[derive(Default)]
pub struct AdminState {
    held: HashSet<u64>,
    doomed: HashMap<u64, Doom>,
    /// Where `held` is kept (none: nowhere, for tests of the scheduler).
    hold_file: Option<HoldFile>,
}

/// `<data_dir>/hold.list` and which of its versions reached the disk.
pub struct HoldFile {
    dir: PathBuf,
    /// Bumped by each save.
    generation: u64,
    /// The newest generation written: of two saves racing on the blocking
    /// pool, the older never replaces the newer.
    written: Arc<Mutex<u64>>,
}

impl HoldFile {
    /// A durable write of `held` as it is now, to run off the scheduler.
    fn save(&mut self, held: &HashSet<u64>) -> impl FnOnce() -> std::io::Result<()> + Send {
        self.generation += 1;
        let generation = self.generation;
        let (dir, written) = (self.dir.clone(), self.written.clone());
        let mut ids: Vec<u64> = held.iter().copied().collect();
        ids.sort_unstable();
        let text: String = ids.iter().map(|id| format!("{}\n", qid(*id))).collect();
        move || {
            let mut newest = written.lock().unwrap_or_else(PoisonError::into_inner);
            if *newest >= generation {
                return Ok(());
            }
            sluice_spool::replace_file(&dir, HOLD_LIST, text.as_bytes(), 0o600)?;
            *newest = generation;
            Ok(())
        }
    }
}

impl AdminState {
    pub fn is_held(&self, id: u64) -> bool {
        self.held.contains(&id)
    }

    /// Holds message `id`; false if it was held already.
    pub fn hold(&mut self, id: u64) -> bool {
        self.held.insert(id)
    }

    /// Releases message `id`; false if it was not held.
    pub fn release(&mut self, id: u64) -> bool {
        self.held.remove(&id)
    }

    /// Messages on hold.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// The messages on hold, in no order.
    pub fn held(&self) -> impl Iterator<Item = u64> + '_ {
        self.held.iter().copied()
    }

    /// Message `id` is to be deleted or bounced when its round ends;
    /// returns what was pending for it before.
    pub fn doom(&mut self, id: u64, doom: Doom) -> Option<Doom> {
        self.doomed.insert(id, doom)
    }

    pub fn is_doomed(&self, id: u64) -> bool {
        self.doomed.contains_key(&id)
    }

    /// What is pending for message `id` at the end of its round, taken.
    pub fn take_doom(&mut self, id: u64) -> Option<Doom> {
        self.doomed.remove(&id)
    }

    /// A durable write of the hold list as it is now, to run off the
    /// scheduler (none: the list is kept nowhere).
    pub fn save_holds(&mut self) -> Option<HoldSave> {
        let held = &self.held;
        let file = self.hold_file.as_mut()?;
        Some(Box::new(file.save(held)))
    }

    /// Loads held IDs from `<data_dir>/hold.list` (one hex ID a line).
    pub fn load(data_dir: &std::path::Path) -> AdminState {
        let held = std::fs::read_to_string(data_dir.join(HOLD_LIST))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| u64::from_str_radix(l.trim(), 16).ok())
            .collect();
        AdminState {
            held,
            doomed: HashMap::new(),
            hold_file: Some(HoldFile {
                dir: data_dir.to_path_buf(),
                generation: 0,
                written: Arc::new(Mutex::new(0)),
            }),
        }
    }
}
