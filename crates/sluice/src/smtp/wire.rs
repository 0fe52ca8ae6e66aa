//! The socket under an outbound session: TCP (SMTP, LMTP to a host, a
//! milter on `inet:`) or a Unix socket (LMTP to a local server such as
//! Dovecot, a milter on `unix:`). TLS, when used, runs over it
//! (`deliver/smtp/tls.rs`). tokio-util's `Either` does the reading and
//! writing for both.

use std::io;

use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

use crate::config::services::ServiceAddr;

/// The transport of one outbound session: TCP (left) or Unix (right).
pub type Wire = Either<TcpStream, UnixStream>;

/// Connects to a configured service (`inet:host:port`, `unix:/path`).
pub async fn connect(service: &ServiceAddr) -> io::Result<Wire> {
    match service {
        ServiceAddr::Inet { host, port } => {
            let s = TcpStream::connect((host.as_str(), *port)).await?;
            let _ = s.set_nodelay(true);
            Ok(Either::Left(s))
        }
        ServiceAddr::Unix(path) => UnixStream::connect(path).await.map(Either::Right),
    }
}
