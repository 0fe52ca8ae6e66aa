//! Cutting a byte stream into the pieces a reader would get, for the fuzz
//! targets that read streams (shared with the sluice crate's reply
//! target, which includes this file with `#[path]`).

use proptest::collection::vec;
use proptest::prelude::*;

/// Where to cut a stream: up to 8 points (taken modulo its length), or
/// everywhere (one byte at a time) when the list is empty.
pub fn cuts() -> impl Strategy<Value = Vec<usize>> {
    vec(any::<usize>(), 0..8)
}

/// Cuts `data` at `cuts`; an empty list means byte by byte.
pub fn split<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    if cuts.is_empty() {
        return data.chunks(1).collect();
    }
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for end in at.into_iter().chain(std::iter::once(data.len())) {
        pieces.push(&data[start..end]);
        start = end;
    }
    pieces
}
