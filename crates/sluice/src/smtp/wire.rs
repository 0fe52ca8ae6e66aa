//! The socket under an outbound session: TCP (SMTP, LMTP to a host, a
//! milter on `inet:`) or a Unix socket (LMTP to a local server such as
//! Dovecot, a milter on `unix:`). TLS, when used, runs over it
//! (`deliver/smtp/tls.rs`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::config::services::ServiceAddr;

/// The transport of one outbound session.
pub enum Wire {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Wire {
    /// Connects to a configured service (`inet:host:port`, `unix:/path`).
    pub async fn connect(service: &ServiceAddr) -> io::Result<Wire> {
        match service {
            ServiceAddr::Inet { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                let _ = s.set_nodelay(true);
                Ok(Wire::Tcp(s))
            }
            ServiceAddr::Unix(path) => UnixStream::connect(path).await.map(Wire::Unix),
        }
    }
}

impl AsyncRead for Wire {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Wire::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Wire::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_flush(cx),
            Wire::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Wire::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
