//! An SMTP session of this process on an in-memory stream: the real
//! [`Session`] on a task, its context built as the daemon builds it
//! ([`SessionContext::for_tests`]), a [`Client`] on the other end. For
//! the checks of a conversation's replies that need no delivery: no
//! listener, scheduler or delivery agent is started, so a test costs a
//! spool opened and a task, not a whole server.
//!
//! The peer address is the test's choice: 127.0.0.1, as a socket test's
//! client (in `mynetworks` for [`config`](super::config), outside them
//! for [`untrusted_config`](super::untrusted_config)), or any other.
//!
//! Trust: none needed; a session that stops answering fails the test
//! after [`Client::reply`]'s deadline.

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sluice::config::Config;
use sluice::daemon::testing::TestQueue;
use sluice::log::Logger;
use sluice::receive::smtp::{Session, SessionContext};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::task::JoinHandle;

use super::{live, Client};

/// The address a socket test's client has.
pub const LOOPBACK: &str = "127.0.0.1:40000";

/// A client talking to a [`Session`] over an in-memory stream. Derefs to
/// the [`Client`] (`cmd`, `send`, `reply`, `message` …).
pub struct ScriptedSession {
    client: Client<Wire>,
    /// What the intake handed to the queue, and the spool.
    pub queue: TestQueue,
    logger: Logger,
    task: JoinHandle<()>,
}

impl ScriptedSession {
    /// A session from 127.0.0.1 on `config`'s first listener; returns it
    /// and the greeting. `config.data_dir` holds the spool and the log
    /// (the caller's test directory).
    pub async fn connect(config: Config) -> (ScriptedSession, String) {
        ScriptedSession::connect_from(config, LOOPBACK).await
    }

    /// As [`ScriptedSession::connect`], from `peer` ("192.0.2.9:25000").
    pub async fn connect_from(config: Config, peer: &str) -> (ScriptedSession, String) {
        let peer: SocketAddr = peer.parse().unwrap();
        let logger = live::logger(&config);
        let (ctx, queue) = SessionContext::for_tests(config, logger.clone())
            .await
            .unwrap();
        let listener = Arc::new(ctx.config.all_listeners().remove(0));
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(Session::new(theirs, peer, ctx.clone(), listener).run());
        let mut session = ScriptedSession {
            client: Client::on(Wire(ours)),
            queue,
            logger,
            task,
        };
        let greeting = session.reply().await;
        (session, greeting)
    }

    /// Connects from 127.0.0.1 and says EHLO, as [`Client::ready`].
    pub async fn ready(config: Config) -> ScriptedSession {
        let (mut s, greeting) = ScriptedSession::connect(config).await;
        assert!(greeting.starts_with("220 "), "{greeting}");
        let ehlo = s.cmd("EHLO client.test").await;
        assert!(ehlo.starts_with("250"), "{ehlo}");
        s
    }

    /// Sends `line` and checks that the reply starts with `want`.
    pub async fn expect(&mut self, line: &str, want: &str) -> String {
        let r = self.cmd(line).await;
        assert!(r.starts_with(want), "{line}: want {want}, got {r}");
        r
    }

    /// Closes the client's end, waits for the session to end and flushes
    /// the log (its events are then in `maillog`); returns the queue.
    pub async fn finish(self) -> TestQueue {
        let ScriptedSession {
            client,
            queue,
            logger,
            task,
            ..
        } = self;
        drop(client);
        task.await.unwrap();
        tokio::task::spawn_blocking(move || logger.flush())
            .await
            .unwrap();
        queue
    }
}

impl Deref for ScriptedSession {
    type Target = Client<Wire>;
    fn deref(&self) -> &Self::Target {
        &self.client
    }
}

impl DerefMut for ScriptedSession {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.client
    }
}

/// The client's end of the in-memory stream. As on TCP, what is written
/// after the session closed is lost, not an error: the test reads the
/// session's last replies, then the end.
pub struct Wire(DuplexStream);

impl AsyncRead for Wire {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.0).poll_write(cx, data) {
            Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Poll::Ready(Ok(data.len()))
            }
            other => other,
        }
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
