//! Free space on the spool's file system, and the writer's view of the
//! disk, which tests replace to simulate a full disk.
//!
//! Trusts: the kernel's `statvfs` figures (blocks available to unprivileged
//! users, so the root-only reserve of ext4 does not count as free).
//!
//! Invariants: the only `unsafe` in the crate is the `statvfs` call below,
//! which std does not wrap.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::io;
use std::path::Path;
use std::sync::Arc;

/// How the writer learns how many bytes are free under a directory.
pub(crate) type FreeBytes = Arc<dyn Fn(&Path) -> io::Result<u64> + Send + Sync>;

/// The writer's view of the disk.
#[derive(Clone)]
pub(crate) struct Disk {
    pub free_bytes: FreeBytes,
    /// Test hook: this many coming writes write half their bytes and then
    /// fail with "no space left on device".
    #[cfg(test)]
    pub fail_writes: Arc<std::sync::atomic::AtomicU32>,
}

impl Disk {
    pub fn real() -> Disk {
        Disk {
            free_bytes: Arc::new(free_bytes),
            #[cfg(test)]
            fail_writes: Arc::default(),
        }
    }

    /// Whether the next write must fail (tests only).
    #[cfg(test)]
    pub fn take_failure(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.fail_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Size and free space of a file system, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    /// Its whole size.
    pub total: u64,
    /// Bytes available to unprivileged writers.
    pub free: u64,
}

/// Bytes available to unprivileged writers on the file system holding `dir`.
pub(crate) fn free_bytes(dir: &Path) -> io::Result<u64> {
    filesystem_space(dir).map(|s| s.free)
}

/// Size and free space of the file system holding `dir`.
pub fn filesystem_space(dir: &Path) -> io::Result<FsSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in spool path"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated C string that outlives the call and
    // `stat` is writable memory of the type statvfs fills; it is read only
    // after statvfs reported success, which means it was initialised.
    let stat = unsafe {
        if libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        stat.assume_init()
    };
    let unit = stat.f_frsize as u64;
    Ok(FsSpace {
        total: (stat.f_blocks as u64).saturating_mul(unit),
        free: (stat.f_bavail as u64).saturating_mul(unit),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_bytes_of_the_temp_dir_is_plausible() {
        let free = super::free_bytes(&std::env::temp_dir()).unwrap();
        assert!(free > 0);
        assert!(super::free_bytes(std::path::Path::new("/no/such/dir")).is_err());
    }
}
