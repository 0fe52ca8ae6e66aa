//! Resynchronising after damage: finding the next offset in a segment
//! where a whole record checks out, so that one bad record does not hide
//! the good ones after it.
//!
//! Trusts: nothing in the segment. Message bodies are chosen by SMTP
//! clients and may be full of bytes that look like record headers.
//!
//! Invariants:
//! - A record is accepted only if its checksum, keyed with the spool's
//!   salt, checks out; a client cannot compute that, so a record hidden in
//!   a body (the damaged record's own, say) is never accepted.
//! - A candidate that cannot be a record (unknown kind, a length past the
//!   end of the segment or shorter than its kind's smallest payload, an
//!   outcome whose length does not match its recipient count) is rejected
//!   before its checksum is computed.
//! - All resynchronisations in one segment checksum at most
//!   [`BUDGET_PER_BYTE`] times the segment's size in payload bytes. Past
//!   that the search gives up ([`Next::GaveUp`]) and the caller treats the
//!   rest of the segment as damaged: quarantined, never silently dropped.
//!   Without the bound, a segment of fake headers that each claim to run to
//!   its end costs time quadratic in its size.

use crate::record::{
    self, ATTEMPT_FIXED, HEADER_LEN, KIND_ATTEMPT, KIND_MARKS, KIND_MESSAGE, KIND_OUTCOME,
    MARKS_PAYLOAD, MAX_REASON,
};
use crate::salt::Salt;

/// Checksum work allowed per byte of segment, over all its resyncs.
pub(super) const BUDGET_PER_BYTE: u64 = 4;

/// The smallest payload of a message record: ID, arrival, flags, empty
/// sender, recipient count, body length.
const MIN_MESSAGE_PAYLOAD: usize = 8 + 8 + 4 + 2 + 4 + 8;
/// The payload of an outcome record with no recipients: ID and count.
const MIN_OUTCOME_PAYLOAD: usize = 8 + 4;

/// Where scanning resumes after damage.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// A whole valid record starts here.
    At(usize),
    /// No valid record follows: the damage runs to the end.
    None,
    /// The segment's checksum budget ran out first; whether a valid
    /// record follows is unknown.
    GaveUp,
}

/// The resynchronisation state of one segment.
pub(super) struct Resync<'a> {
    salt: &'a Salt,
    data: &'a [u8],
    /// Payload bytes that may still be checksummed.
    budget: u64,
}

impl<'a> Resync<'a> {
    pub fn new(salt: &'a Salt, data: &'a [u8]) -> Resync<'a> {
        Resync {
            salt,
            data,
            budget: BUDGET_PER_BYTE.saturating_mul(data.len() as u64),
        }
    }

    /// The first offset at or after `from` where a whole, valid record
    /// starts, within what is left of the budget.
    pub fn next(&mut self, from: usize) -> Next {
        let magic = record::MAGIC.to_le_bytes();
        let Some(last) = self.data.len().checked_sub(HEADER_LEN) else {
            return Next::None;
        };
        for at in from..=last {
            let candidate = &self.data[at..];
            if candidate[..4] != magic {
                continue;
            }
            let Some(len) = plausible_len(candidate) else {
                continue;
            };
            let Some(left) = self.budget.checked_sub(len as u64) else {
                return Next::GaveUp;
            };
            self.budget = left;
            #[cfg(test)]
            CHECKSUMMED.with(|c| c.set(c.get() + len as u64));
            if record::decode(self.salt, candidate).is_ok() {
                return Next::At(at);
            }
        }
        Next::None
    }
}

/// The payload length a header at the front of `candidate` claims, if a
/// record of that kind and length could start there and fit.
fn plausible_len(candidate: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(candidate.get(5..9)?.try_into().ok()?) as usize;
    let payload = candidate.get(HEADER_LEN..HEADER_LEN.checked_add(len)?)?;
    let fits = match candidate[4] {
        KIND_MESSAGE => len >= MIN_MESSAGE_PAYLOAD,
        KIND_OUTCOME if len >= MIN_OUTCOME_PAYLOAD => {
            let count = u32::from_le_bytes(payload[8..12].try_into().ok()?) as usize;
            count
                .checked_mul(2)
                .and_then(|n| n.checked_add(MIN_OUTCOME_PAYLOAD))
                == Some(len)
        }
        KIND_MARKS => len == MARKS_PAYLOAD,
        KIND_ATTEMPT if (ATTEMPT_FIXED..=ATTEMPT_FIXED + MAX_REASON).contains(&len) => {
            let reason = u16::from_le_bytes(payload[28..30].try_into().ok()?) as usize;
            ATTEMPT_FIXED + reason == len
        }
        _ => false,
    };
    fits.then_some(len)
}

#[cfg(test)]
thread_local! {
    /// Payload bytes resynchronisation checksummed on this thread (tests).
    pub(crate) static CHECKSUMMED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u8, len: u32) -> Vec<u8> {
        let mut h = record::MAGIC.to_le_bytes().to_vec();
        h.push(kind);
        h.extend_from_slice(&len.to_le_bytes());
        h.extend_from_slice(&[0; 4]);
        h
    }

    #[test]
    fn candidates_that_cannot_be_records_cost_no_checksum() {
        let mut data = Vec::new();
        data.extend(header(9, 40)); // unknown kind
        data.extend(header(KIND_MESSAGE, 10)); // shorter than any message
        data.extend(header(KIND_MESSAGE, 1 << 30)); // past the end
        let mut outcome = header(KIND_OUTCOME, 14); // 1 recipient needs 14…
        outcome.extend_from_slice(&[0; 8]);
        outcome.extend_from_slice(&5u32.to_le_bytes()); // …but it claims 5
        outcome.extend_from_slice(&[0; 2]);
        data.extend(outcome);
        data.resize(data.len() + 64, 0);
        CHECKSUMMED.with(|c| c.set(0));
        let salt = Salt::legacy();
        assert_eq!(Resync::new(&salt, &data).next(0), Next::None);
        assert_eq!(CHECKSUMMED.with(|c| c.get()), 0);
    }

    #[test]
    fn a_genuine_record_after_fake_headers_is_found_within_the_budget() {
        let salt = Salt::legacy();
        let mut data = header(KIND_OUTCOME, 12);
        data.extend_from_slice(&[0; 12]); // a fake outcome: bad checksum
        let at = data.len();
        record::encode_outcome(&salt, 7, &[0, 1], &mut data);
        assert_eq!(Resync::new(&salt, &data).next(1), Next::At(at));
    }
}
