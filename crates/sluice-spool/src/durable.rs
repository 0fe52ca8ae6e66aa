//! Small files replaced durably, for state kept beside the segment log
//! (the spool's salt, the queue's hold list): write `<name>.tmp`, sync it,
//! rename it over `<name>`, sync the directory. A crash at any point
//! leaves the old contents or the new ones, whole: never an empty, torn
//! or missing file (the rename is atomic, and durable once the directory
//! is synced).
//!
//! Trust: the directory is the caller's own. A temporary file left by a
//! crash is removed and the new one created with `create_new` and its
//! final mode, so nothing is written through a file or link found there,
//! and the contents are never readable under a wider mode.
//!
//! Invariant: `Ok` only after both syncs succeeded.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces `dir/name` with `bytes` (file mode `mode`) as described above.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    match std::fs::remove_file(&tmp) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir)
}

/// Makes a directory's entries (files created, renamed or removed) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_replaced_file_has_the_new_contents_its_mode_and_no_leftovers() {
        let dir = std::env::temp_dir().join(format!("sluice-durable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        // A temporary file left by a crash mid-write is not in the way.
        std::fs::write(dir.join("list.tmp"), b"torn").unwrap();
        replace_file(&dir, "list", b"one\n", 0o600).unwrap();
        replace_file(&dir, "list", b"two\n", 0o600).unwrap();
        let path = dir.join("list");
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["list"]);
    }
}
