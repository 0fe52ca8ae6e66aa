//! Binding the admin and submission sockets so that neither is ever
//! reachable under a wider mode than its own.
//!
//! `bind(2)` creates the socket's file with mode 0777 less the umask, and
//! its mode cannot be set before it has a name (`fchmod` on the socket's
//! descriptor does not reach the file). Bound at its path and chmodded
//! after, it would be open for a moment to every local user who can reach
//! `data_dir`. So it is bound in a fresh directory of mode 0700 beside it
//! (`admin.sock.d`, which only the daemon's user and root can enter: no
//! one else can connect there), given mode 0600 there, then renamed over
//! `admin.sock`. The name appears with its final mode, atomically, and
//! replaces a socket left by a daemon that died (that daemon's spool lock
//! is ours now, so it was not alive).
//!
//! Not the umask: it is process-wide, and other threads create files while
//! the socket is bound (the log writer, the spool's writer; in the tests,
//! other daemons delivering into Maildirs), which a narrowed umask would
//! reach too.
//!
//! Trust: `data_dir` is the daemon's own. A directory left at
//! `admin.sock.d` by a crash is removed (not followed, if a link), and the
//! new one is made with `mkdir`, which fails rather than reuse anything
//! found there. The socket's path inside it is 4 bytes longer than the
//! final one (`admin.sock.d/s`), against the 107-byte limit of a path.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Why the admin socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot make the private directory {path}: {err}")]
    Private { path: PathBuf, err: io::Error },
    #[error("cannot bind {path}: {err}")]
    Bind { path: PathBuf, err: io::Error },
    #[error("cannot move the socket to {path}: {err}")]
    Place { path: PathBuf, err: io::Error },
}

/// Listens at `path`, which appears with `mode` (see above): 0660 for
/// the admin socket (the daemon's account and group), 0666 for the
/// submission socket (every local user).
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, BindError> {
    let mut private = path.as_os_str().to_owned();
    private.push(".d");
    let private = PathBuf::from(private);
    let err_private = |err| BindError::Private {
        path: private.clone(),
        err,
    };
    match std::fs::remove_dir_all(&private) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err_private(err)),
        _ => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(err_private)?;
    // (The umask may have taken bits from the owner; the others have none.)
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))
        .map_err(err_private)?;
    let inner = private.join("s");
    let bound = UnixListener::bind(&inner).map_err(|err| BindError::Bind {
        path: inner.clone(),
        err,
    });
    let placed = bound.and_then(|listener| {
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(mode))
            .and_then(|()| std::fs::rename(&inner, path))
            .map(|()| listener)
            .map_err(|err| BindError::Place {
                path: path.to_path_buf(),
                err,
            })
    });
    // Empty once the socket has moved; anything left goes with it.
    let _ = std::fs::remove_dir_all(&private);
    placed
}
