//! MX rollup's memory (`queue/rollup.rs` does the lookups): which group
//! each domain was found to belong to, and when, and the resolver the
//! lookups use.
//!
//! Invariant: at most `rollup::MAX_ALIASES` mappings are kept (the
//! scheduler empties the map when it is full).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;

use crate::routing::dns::Dns;

/// A domain's group, as of `at` (`None`: on its own).
pub struct Alias {
    pub group: Option<Arc<str>>,
    pub at: Instant,
}

/// Whether a domain's MX RRset is DNSSEC-secure (DANE applies to it);
/// an error counts as secure (the domain is then kept on its own).
pub type SecureMx = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

#[derive(Default)]
pub struct Rollup {
    pub dns: Option<Arc<Dns>>,
    /// Set when DANE is on.
    pub secure_mx: Option<SecureMx>,
    pub aliases: HashMap<Arc<str>, Alias>,
}
