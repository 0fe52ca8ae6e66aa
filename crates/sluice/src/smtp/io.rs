//! A stream that is plain until STARTTLS and TLS after it, for both the
//! server and the client side.
//!
//! Invariant: `Gone` exists only while a handshake holds the plain stream;
//! any I/O on it is an error, never a silent success.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Plain `P`, or TLS `T` over it.
pub enum MaybeTls<P, T> {
    Plain(P),
    Tls(Box<T>),
    Gone,
}

impl<P, T> MaybeTls<P, T> {
    /// Takes the plain stream out for a handshake.
    pub fn take_plain(&mut self) -> io::Result<P> {
        match std::mem::replace(self, MaybeTls::Gone) {
            MaybeTls::Plain(p) => Ok(p),
            other => {
                *self = other;
                Err(io::Error::other("TLS already active"))
            }
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, MaybeTls::Tls(_))
    }
}

/// "TLSv1.3 with cipher TLS13_AES_256_GCM_SHA384".
pub fn summary(conn: &rustls::CommonState) -> Option<String> {
    let version = conn
        .protocol_version()?
        .as_str()?
        .replace("TLSv1_", "TLSv1.");
    let cipher = conn.negotiated_cipher_suite()?.suite();
    Some(format!(
        "{version} with cipher {}",
        cipher.as_str().unwrap_or("unknown")
    ))
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "stream lost in a failed handshake",
    )
}

impl<P, T> AsyncRead for MaybeTls<P, T>
where
    P: AsyncRead + Unpin,
    T: AsyncRead + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl<P, T> AsyncWrite for MaybeTls<P, T>
where
    P: AsyncWrite + Unpin,
    T: AsyncWrite + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, data),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            MaybeTls::Gone => Poll::Ready(Err(gone())),
        }
    }
}
