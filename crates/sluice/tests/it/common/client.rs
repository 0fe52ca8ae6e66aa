//! A raw SMTP client for the tests: sends exact bytes, reads whole
//! replies (multi-line ones joined), over TCP or an in-memory stream; and
//! the message and reply texts the tests share.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A raw SMTP client that sends exact bytes and reads whole replies: over
/// TCP to a listener, or over an in-memory stream to a session of this
/// process ([`scripted::ScriptedSession`]).
pub struct Client<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> (Client, String) {
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut c = Client {
            stream,
            buf: Vec::new(),
        };
        let greeting = c.reply().await;
        (c, greeting)
    }

    /// Connects from a given loopback address (e.g. 127.0.0.9).
    pub async fn connect_from(local: &str, addr: SocketAddr) -> (Client, String) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{local}:0").parse().unwrap()).unwrap();
        let stream = socket.connect(addr).await.unwrap();
        let mut c = Client {
            stream,
            buf: Vec::new(),
        };
        let greeting = c.reply().await;
        (c, greeting)
    }

    /// Connects and says EHLO.
    pub async fn ready(addr: SocketAddr) -> Client {
        let (mut c, greeting) = Client::connect(addr).await;
        assert!(greeting.starts_with("220 "), "{greeting}");
        let ehlo = c.cmd("EHLO client.test").await;
        assert!(ehlo.starts_with("250"), "{ehlo}");
        c
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// A client on `stream` (nothing read yet).
    pub fn on(stream: S) -> Client<S> {
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Sends `line` + CRLF and returns the reply.
    pub async fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// Reads one reply (all its lines); "" when the connection closed.
    pub async fn reply(&mut self) -> String {
        let deadline = Duration::from_secs(20);
        loop {
            if let Some(reply) = take_reply(&mut self.buf) {
                return reply;
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&self.buf).into_owned(),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => panic!(
                    "no reply within {deadline:?}; have {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        }
    }

    /// Every reply until the server closes the connection.
    pub async fn replies_until_closed(&mut self) -> String {
        let mut all = String::new();
        loop {
            let r = self.reply().await;
            if r.is_empty() {
                return all;
            }
            all.push_str(&r);
        }
    }

    /// MAIL, RCPT and DATA for one recipient, each checked; ready for the body.
    pub async fn begin_data(&mut self, from: &str, to: &str) {
        let r = self.cmd(&format!("MAIL FROM:<{from}>")).await;
        assert!(r.starts_with("250"), "MAIL: {r}");
        let r = self.cmd(&format!("RCPT TO:<{to}>")).await;
        assert!(r.starts_with("250"), "RCPT: {r}");
        let r = self.cmd("DATA").await;
        assert!(r.starts_with("354"), "DATA: {r}");
    }

    /// Sends one whole message; returns the final reply.
    pub async fn message(&mut self, from: &str, to: &[&str], body: &str) -> String {
        let r = self.cmd(&format!("MAIL FROM:<{from}>")).await;
        assert!(r.starts_with("250"), "MAIL: {r}");
        for rcpt in to {
            let r = self.cmd(&format!("RCPT TO:<{rcpt}>")).await;
            assert!(r.starts_with("250"), "RCPT {rcpt}: {r}");
        }
        let r = self.cmd("DATA").await;
        assert!(r.starts_with("354"), "DATA: {r}");
        self.send(body.as_bytes()).await;
        self.send(b".\r\n").await;
        self.reply().await
    }
}

/// Takes one complete reply (all its lines) off the front of `buf`.
pub fn take_reply(buf: &mut Vec<u8>) -> Option<String> {
    let mut start = 0;
    while let Some(off) = buf[start..].iter().position(|&b| b == b'\n') {
        let end = start + off + 1;
        if buf.get(start + 3) != Some(&b'-') {
            let text = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end);
            return Some(text);
        }
        start = end;
    }
    None
}

pub fn body(subject: &str) -> String {
    format!("From: <a@sender.test>\r\nTo: <b@dest.test>\r\nSubject: {subject}\r\nMessage-ID: <{subject}@sender.test>\r\n\r\nHello.\r\n")
}

/// The queue ID at the end of a `250 2.0.0 Ok: queued as <ID>` reply.
pub fn qid_of(reply: &str) -> String {
    reply.trim().rsplit(' ').next().unwrap().to_string()
}
