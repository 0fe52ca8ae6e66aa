//! The generator's side of the wire: its stream (TCP, TLS after
//! STARTTLS), STARTTLS itself, and a reader of SMTP replies with a
//! deadline. Trust: the server under test may answer anything; a reply
//! that does not parse or never comes is an error for that session.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use sluice::deliver::smtp::tls::any_certificate_connector;
use sluice::smtp::io::MaybeTls;

/// The generator's connection: TCP, TLS after STARTTLS.
pub(super) type Stream = MaybeTls<TcpStream, tokio_rustls::client::TlsStream<TcpStream>>;

/// STARTTLS, the handshake (any certificate), and EHLO again.
pub(super) async fn start_tls(
    stream: &mut Stream,
    rd: &mut Replies,
) -> std::io::Result<(u16, String)> {
    stream.write_all(b"STARTTLS\r\n").await?;
    expect(rd.read(stream).await?.0, 2)?;
    let connector = any_certificate_connector().map_err(std::io::Error::other)?;
    let name =
        rustls::pki_types::ServerName::try_from("sluice.bench").map_err(std::io::Error::other)?;
    let tls = connector.connect(name, stream.take_plain()?).await?;
    *stream = MaybeTls::Tls(Box::new(tls));
    stream.write_all(b"EHLO bench.sluice\r\n").await?;
    stream.flush().await?;
    let ehlo = rd.read(stream).await?;
    expect(ehlo.0, 2)?;
    Ok(ehlo)
}

pub(super) fn expect(code: u16, class: u16) -> std::io::Result<()> {
    if code / 100 == class {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("unexpected reply {code}")))
    }
}

/// How long a reply may take before the session counts as failed.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Buffered reader of SMTP replies.
#[derive(Default)]
pub(super) struct Replies {
    buf: Vec<u8>,
}

impl Replies {
    /// Reads one reply: its code and its full text.
    pub(super) async fn read(&mut self, stream: &mut Stream) -> std::io::Result<(u16, String)> {
        // What was written must be out before waiting for its reply (TLS
        // buffers records; plain TCP flushes at once).
        stream.flush().await?;
        let mut pos = 0;
        loop {
            while let Some(off) = memchr::memchr(b'\n', &self.buf[pos..]) {
                let line_end = pos + off + 1;
                let line = &self.buf[pos..line_end];
                if line.len() < 4 {
                    return Err(std::io::Error::other("short reply"));
                }
                if line[3] == b'-' {
                    pos = line_end;
                    continue;
                }
                let code = std::str::from_utf8(&line[..3])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| std::io::Error::other("bad reply code"))?;
                let text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                self.buf.drain(..line_end);
                return Ok((code, text));
            }
            self.buf.reserve(1024);
            // A connection the server never accepted (its accept queue
            // overflowed after the handshake) would wait forever.
            let read = tokio::time::timeout(REPLY_TIMEOUT, stream.read_buf(&mut self.buf));
            let n = read.await.map_err(|_| std::io::ErrorKind::TimedOut)??;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "closed",
                ));
            }
        }
    }
}
