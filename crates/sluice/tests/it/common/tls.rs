//! A TLS SMTP client for tests: STARTTLS or implicit TLS, trusting one
//! CA file (the server's self-signed certificate).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

pub fn connector(ca: &Path) -> TlsConnector {
    let roots = sluice::pki::roots(Some(ca)).unwrap();
    TlsConnector::from(Arc::new(sluice::pki::verifying_client(roots).unwrap()))
}

/// A line client over TLS.
pub struct TlsClient {
    pub stream: TlsStream<TcpStream>,
    buf: Vec<u8>,
}

impl TlsClient {
    pub async fn handshake(stream: TcpStream, ca: &Path, name: &str) -> TlsClient {
        let name = ServerName::try_from(name.to_string()).unwrap();
        let stream = connector(ca).connect(name, stream).await.unwrap();
        TlsClient {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    pub async fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// One whole reply; "" when the connection closed.
    pub async fn reply(&mut self) -> String {
        loop {
            if let Some(reply) = super::take_reply(&mut self.buf) {
                return reply;
            }
            let mut chunk = [0u8; 4096];
            let read = tokio::time::timeout(
                std::time::Duration::from_secs(20),
                self.stream.read(&mut chunk),
            )
            .await
            .expect("a reply within 20 s");
            match read {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&self.buf).into_owned(),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}
