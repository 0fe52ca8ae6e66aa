//! MX rollup's memory (`queue/rollup.rs` decides, the driver looks up):
//! which group each domain was found to belong to, and when.
//!
//! Invariant: at most `rollup::MAX_ALIASES` mappings are kept (the
//! scheduler empties the map when it is full).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// A domain's group, as of `at` (`None`: on its own).
pub struct Alias {
    pub group: Option<Arc<str>>,
    pub at: Instant,
}

#[derive(Default)]
pub struct Rollup {
    /// The driver can look up mail hosts (it has a resolver).
    pub resolves: bool,
    pub aliases: HashMap<Arc<str>, Alias>,
}
