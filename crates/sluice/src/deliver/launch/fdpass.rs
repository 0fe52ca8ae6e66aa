//! SOCK_SEQPACKET Unix sockets and descriptors passed over them
//! (SCM_RIGHTS): the launcher's only channel. The standard library has
//! neither (its ancillary-data API is unstable), so these wrap libc.
//!
//! Invariant: every descriptor made or received here is close-on-exec
//! (SOCK_CLOEXEC, MSG_CMSG_CLOEXEC) and owned (`OwnedFd`), so none leaks
//! into a command or stays open by mistake; received descriptors beyond
//! [`MAX_FDS`] or cut by the kernel are closed.
// libc calls the standard library does not wrap; each block says why
// it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// A connected pair of SOCK_SEQPACKET sockets, both close-on-exec.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    let kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    if unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for the control data of up to 12 descriptors, aligned.
#[repr(C)]
union Control {
    buf: [u8; 64],
    _align: libc::cmsghdr,
}

/// Sends `data` as one message with `fds` attached (MSG_DONTWAIT,
/// MSG_NOSIGNAL: WouldBlock when the peer's queue is full, EPIPE when it
/// is gone).
pub fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    // The control buffer holds 8 (the receiver takes at most MAX_FDS).
    if fds.len() > 8 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = Control { buf: [0; 64] };
    // SAFETY: msghdr is plain data; all-zero is "no name, no control".
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        let bytes = std::mem::size_of_val(raw.as_slice()) as u32;
        // SAFETY: CMSG_SPACE of at most 8 ints (48) fits the 64-byte buffer;
        // the header and the ints are written inside it, as CMSG_FIRSTHDR
        // and CMSG_DATA say, before sendmsg reads them.
        unsafe {
            msg.msg_control = control.buf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = libc::CMSG_SPACE(bytes) as usize;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                bytes as usize,
            );
        }
    }
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: `msg` points to live buffers of the stated lengths.
    let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, flags) };
    match sent {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize != data.len() => Err(io::Error::other("message cut")),
        _ => Ok(()),
    }
}

/// One received message.
#[derive(Debug)]
pub struct Received {
    /// Its length (0 with no descriptors: the peer is gone, or sent
    /// nothing).
    pub len: usize,
    pub fds: Vec<OwnedFd>,
    /// The message, or its descriptors, did not fit (what came is kept
    /// in `len` and `fds`, the rest lost).
    pub truncated: bool,
}

/// Receives one message into `buf` (MSG_DONTWAIT: WouldBlock when none
/// is waiting).
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = Control { buf: [0; 64] };
    // SAFETY: msghdr is plain data; all-zero is "no name, no control".
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: the union's buffer is 64 live bytes.
    msg.msg_control = unsafe { control.buf.as_mut_ptr() } as *mut libc::c_void;
    msg.msg_controllen = 64;
    let flags = libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
    // SAFETY: `msg` points to live buffers of the stated lengths.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let fds = take_fds(&msg);
    let cut = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok(Received {
        len: n as usize,
        truncated: cut || fds.len() > MAX_FDS,
        fds,
    })
}

/// The descriptors of every SCM_RIGHTS header of `msg`, owned.
fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: the control headers are walked with the CMSG macros inside
    // the buffer recvmsg filled (msg_controllen says how much); each
    // descriptor the kernel installed is taken once, so owned once.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let bytes = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let at = data.add(i * std::mem::size_of::<RawFd>()) as *const RawFd;
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(at)));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn messages_keep_their_bounds_and_descriptors() {
        let (a, b) = seqpacket_pair().unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let w = OwnedFd::from(w);
        send(a.as_fd(), b"one", &[w.as_fd()]).unwrap();
        send(a.as_fd(), b"two", &[]).unwrap();
        drop(w);
        let mut buf = [0u8; 16];
        let got = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!(
            (&buf[..got.len], got.fds.len(), got.truncated),
            (&b"one"[..], 1, false)
        );
        let mut writer = std::fs::File::from(got.fds.into_iter().next().unwrap());
        std::io::Write::write_all(&mut writer, b"through").unwrap();
        drop(writer);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { r }, &mut text).unwrap();
        assert_eq!(text, "through");
        let got = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..got.len], got.fds.len()), (&b"two"[..], 0));
        send(a.as_fd(), &[7u8; 32], &[]).unwrap();
        assert!(recv(b.as_fd(), &mut buf).unwrap().truncated);
        assert_eq!(
            recv(b.as_fd(), &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(a);
        assert_eq!(recv(b.as_fd(), &mut buf).unwrap().len, 0);
    }
}
