//! Bounces being stored: a message whose failed recipients' bounce is on
//! its way into the spool stays active, and its round does not end,
//! until the bounce is safe (`failures.rs`).
//!
//! Invariants: at most one bounce per message is out; a message with a
//! bounce out is active (never parked, never in the retry queue) and has
//! no job in flight; the count of bounces out is the number of such
//! messages (a drain waits for them).

use std::collections::HashSet;

#[derive(Default)]
pub struct Notices {
    bouncing: HashSet<u64>,
}

impl Notices {
    /// Message `id`'s bounce goes to be stored.
    pub fn bounce_out(&mut self, id: u64) {
        let fresh = self.bouncing.insert(id);
        debug_assert!(fresh, "{id:x}: a second bounce out");
    }

    /// Message `id`'s bounce is stored (or it had none out).
    pub fn bounce_back(&mut self, id: u64) {
        self.bouncing.remove(&id);
    }

    /// A bounce of message `id` is being stored.
    pub fn pending(&self, id: u64) -> bool {
        self.bouncing.contains(&id)
    }

    /// Bounces being stored.
    pub fn out(&self) -> usize {
        self.bouncing.len()
    }

    #[cfg(test)]
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.bouncing.iter().copied()
    }
}
