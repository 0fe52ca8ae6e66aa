//! Per recipient of a message, whether a final outcome is recorded:
//! bits inline for up to 64 recipients (16 bytes, no allocation), boxed
//! beyond. Kept for every live message (the index, the queue's parked
//! messages), so a backlog of a million messages pays 16 bytes each
//! instead of a vector's 24 plus a 32-byte allocation.
//!
//! Invariant: `DoneSet::from(v).to_vec() == v`; setting an index out of
//! range changes nothing.

/// Per recipient, whether it is done: bits inline for up to 64 recipients
/// (16 bytes, no allocation), boxed beyond (a thin pointer, so the enum
/// stays 16 bytes).
#[derive(Debug, Clone)]
pub enum DoneSet {
    Bits {
        bits: u64,
        len: u8,
    },
    // Boxed on purpose: a thin pointer keeps every DoneSet at 16 bytes; the
    // extra allocation is paid only past 64 recipients.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<bool>>),
}

impl From<Vec<bool>> for DoneSet {
    fn from(v: Vec<bool>) -> DoneSet {
        if v.len() > 64 {
            return DoneSet::Many(Box::new(v));
        }
        let bits = v
            .iter()
            .enumerate()
            .fold(0u64, |b, (i, &d)| b | ((d as u64) << i));
        DoneSet::Bits {
            bits,
            len: v.len() as u8,
        }
    }
}

impl DoneSet {
    pub fn len(&self) -> usize {
        match self {
            DoneSet::Bits { len, .. } => *len as usize,
            DoneSet::Many(v) => v.len(),
        }
    }

    /// No recipients.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_vec(&self) -> Vec<bool> {
        match self {
            DoneSet::Bits { bits, len } => (0..*len).map(|i| bits & (1 << i) != 0).collect(),
            DoneSet::Many(v) => v.as_ref().clone(),
        }
    }
}

impl DoneSet {
    /// `n` recipients, none done.
    pub fn none(n: usize) -> DoneSet {
        DoneSet::from(vec![false; n])
    }

    pub fn get(&self, i: usize) -> bool {
        match self {
            DoneSet::Bits { bits, len } => i < *len as usize && bits & (1 << i) != 0,
            DoneSet::Many(v) => v.get(i).copied().unwrap_or(false),
        }
    }

    /// Marks recipient `i` done (nothing if out of range).
    pub fn set(&mut self, i: usize) {
        match self {
            DoneSet::Bits { bits, len } if i < *len as usize => *bits |= 1 << i,
            DoneSet::Bits { .. } => {}
            DoneSet::Many(v) => {
                if let Some(slot) = v.get_mut(i) {
                    *slot = true;
                }
            }
        }
    }

    /// Every recipient is done (true for none).
    pub fn all(&self) -> bool {
        (0..self.len()).all(|i| self.get(i))
    }

    /// Indices of the recipients whose flag is `want`.
    pub fn indices(&self, want: bool) -> Vec<u16> {
        (0..self.len())
            .filter(|&i| self.get(i) == want)
            .map(|i| i as u16)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_sets_round_trip_at_every_size() {
        for n in [0usize, 1, 2, 63, 64, 65, 300] {
            let v: Vec<bool> = (0..n).map(|i| i % 3 == 1).collect();
            let d = DoneSet::from(v.clone());
            assert_eq!((d.len(), d.to_vec()), (n, v.clone()), "{n} recipients");
            let want: Vec<u16> = (0..n).filter(|i| v[*i]).map(|i| i as u16).collect();
            assert_eq!(d.indices(true), want);
        }
        assert_eq!(std::mem::size_of::<DoneSet>(), 16);
    }

    #[test]
    fn set_marks_one_and_ignores_out_of_range() {
        for n in [3usize, 100] {
            let mut d = DoneSet::none(n);
            assert!(!d.all());
            d.set(n + 5);
            assert_eq!(d.indices(true), Vec::<u16>::new());
            for i in 0..n {
                d.set(i);
            }
            assert!(d.all() && d.get(n - 1) && !d.get(n));
        }
        assert!(DoneSet::none(0).all());
    }
}
