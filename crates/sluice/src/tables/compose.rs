//! Tables made of tables: Postfix's `unionmap` and `pipemap`.
//!
//! - union: every member is asked, in order; the answers of those that
//!   found the key are joined with commas (Postfix's string), their lists
//!   concatenated; not found when none found it. A member that fails
//!   fails the lookup: a partial answer could be wrong.
//! - pipe: the first member is asked the key, each next one the previous
//!   answer's string; not found as soon as one finds nothing.
//!
//! Invariant: members form no loop (`build.rs` refuses one), so the
//! recursion here ends.

use std::sync::Arc;

use super::answer::Answer;
use super::{LookupError, Table, Values};

pub(super) async fn union(
    members: &[Arc<Table>],
    key: &str,
) -> Result<Option<Values>, LookupError> {
    let mut found: Vec<Values> = Vec::new();
    for member in members {
        if let Some(v) = Box::pin(member.lookup(key)).await? {
            found.push(v);
        }
    }
    Ok(match found.len() {
        0 => None,
        1 => found.pop(),
        _ => {
            let raw: Vec<&str> = found.iter().map(|v| v.raw()).collect();
            let mut answer = Answer::values(found.iter().flat_map(|v| v.iter().cloned()).collect());
            answer.set_raw(raw.join(","));
            Some(Arc::new(answer))
        }
    })
}

pub(super) async fn pipe(members: &[Arc<Table>], key: &str) -> Result<Option<Values>, LookupError> {
    let mut current: Option<Values> = None;
    for member in members {
        let key = current.as_ref().map_or(key, |v| v.raw());
        match Box::pin(member.lookup(key)).await? {
            Some(v) => current = Some(v),
            None => return Ok(None),
        }
    }
    Ok(current)
}
