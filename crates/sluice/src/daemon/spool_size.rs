//! How large the spool's segments and free-space reserve are, fitted to
//! the file system the spool is on, and whether that file system has room
//! for them.
//!
//! The fixed defaults (64 MiB segments, a 128 MiB reserve) answered `452`
//! to every message, from the first, on a 40 MB file system, with no word
//! why (security review, found by hand). Unset, a segment is 64 MiB or a
//! sixteenth of the file system if that is less (at least 1 MiB), and the
//! reserve two segments, at least 4 MiB or an eighth of the file system
//! if that is less. Set values are used as given. `serve` and
//! `check-config` say so when the free space is below the reserve plus a
//! segment: new mail would be refused.
//!
//! Trust: the figures come from the kernel (`statvfs`).

use std::path::Path;

use sluice_spool::FsSpace;

use crate::config::SpoolSettings;

const MIB: u64 = 1 << 20;

/// Segment size and reserve, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolSize {
    pub segment_bytes: u64,
    pub reserve_bytes: u64,
}

/// The sizes for `settings` on a file system of `fs`.
pub fn fit(settings: &SpoolSettings, fs: FsSpace) -> SpoolSize {
    let segment_bytes = match settings.segment_mib {
        Some(mib) => mib.max(1) * MIB,
        None => (64 * MIB).min(fs.total / 16 / MIB * MIB).max(MIB),
    };
    let reserve_bytes = match settings.reserve_mib {
        Some(mib) => mib * MIB,
        None => (segment_bytes * 2).max((4 * MIB).min(fs.total / 8)),
    };
    SpoolSize {
        segment_bytes,
        reserve_bytes,
    }
}

/// Size and free space of the file system `dir` is (or will be) on: its
/// nearest existing ancestor's.
pub fn space_for(dir: &Path) -> std::io::Result<FsSpace> {
    let mut at = dir;
    loop {
        match sluice_spool::filesystem_space(at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match at.parent() {
                Some(parent) => at = parent,
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// A warning when `fs` has less free space than `size` needs to take mail.
pub fn shortage(dir: &Path, size: SpoolSize, fs: FsSpace) -> Option<String> {
    let needs = size.reserve_bytes + size.segment_bytes;
    (fs.free < needs).then(|| {
        format!(
            "warning: spool {}: {} MiB free, but the spool keeps {} MiB free for delivery records and writes segments of {} MiB: new mail gets 452 4.3.1 until {} MiB are free (free space, or lower spool.reserve_mib / spool.segment_mib)",
            dir.display(),
            fs.free / MIB,
            size.reserve_bytes / MIB,
            size.segment_bytes / MIB,
            needs.div_ceil(MIB)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(total_mib: u64, free_mib: u64) -> FsSpace {
        FsSpace {
            total: total_mib * MIB,
            free: free_mib * MIB,
        }
    }

    #[test]
    fn defaults_fit_the_file_system() {
        let unset = SpoolSettings::default();
        let big = fit(&unset, fs(100_000, 50_000));
        assert_eq!(big.segment_bytes, 64 * MIB);
        assert_eq!(big.reserve_bytes, 128 * MIB);
        // A 40 MB file system: 2 MiB segments, a 4 MiB reserve, and room.
        let small = fit(&unset, fs(40, 39));
        assert_eq!(small.segment_bytes, 2 * MIB);
        assert_eq!(small.reserve_bytes, 4 * MIB);
        assert_eq!(shortage(Path::new("s"), small, fs(40, 39)), None);
        // Tiny: a segment of 1 MiB, the reserve an eighth.
        let tiny = fit(&unset, fs(8, 8));
        assert_eq!(tiny.segment_bytes, MIB);
        assert_eq!(tiny.reserve_bytes, 2 * MIB);
    }

    #[test]
    fn set_values_are_kept_and_a_shortage_is_told() {
        let set = SpoolSettings {
            segment_mib: Some(64),
            reserve_mib: Some(128),
            ..SpoolSettings::default()
        };
        let size = fit(&set, fs(40, 39));
        assert_eq!(size.segment_bytes, 64 * MIB);
        assert_eq!(size.reserve_bytes, 128 * MIB);
        let warning = shortage(Path::new("/var/spool/sluice"), size, fs(40, 39)).unwrap();
        assert!(warning.contains("39 MiB free"), "{warning}");
        assert!(
            warning.contains("452 4.3.1 until 192 MiB are free"),
            "{warning}"
        );
    }
}
