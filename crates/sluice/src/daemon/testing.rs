//! Test support: the context SMTP sessions share, built as `serve` builds
//! it, for tests that run a [`Session`](crate::receive::smtp::Session) on
//! a stream of their own instead of connecting to a listener.
//!
//! [`SessionContext::for_tests`] opens the spool in the configuration's
//! `data_dir` (which the caller owns and removes) and builds the parts,
//! the intake and the session context with the daemon's own code
//! (`Server::open`); it starts no listener, scheduler, delivery agent,
//! admin socket or cluster. What the intake hands to the queue waits in
//! the [`TestQueue`] for the test to look at.
//!
//! Trust: the configuration is validated as `serve` validates it.
//! Invariant: nothing here is used by the daemon; it only calls what the
//! daemon calls, in the same order.

use std::sync::Arc;

use sluice_spool::Spool;
use tokio::sync::mpsc;

use super::build::{Parts, Purpose};
use super::StartError;
use crate::config::Config;
use crate::log::Logger;
use crate::queue::{Event, QueueHandle};
use crate::receive::smtp::SessionContext;

/// The queue's side of a test session: the events the intake sent, the
/// handle (for in-flow pacing) and the spool, stopped when dropped.
pub struct TestQueue {
    pub handle: QueueHandle,
    pub spool: Spool,
    events: mpsc::Receiver<Event>,
}

impl TestQueue {
    /// The events sent to the queue since the last call.
    pub fn events(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            out.push(event);
        }
        out
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        self.spool.shutdown();
    }
}

impl SessionContext {
    /// The session context `serve` would build from `config`, logging to
    /// `logger`, over a spool in `config.data_dir`; with no scheduler
    /// behind it (see the module head).
    #[doc(hidden)]
    pub async fn for_tests(
        config: Config,
        logger: Logger,
    ) -> Result<(Arc<SessionContext>, TestQueue), StartError> {
        config.validate()?;
        let config = Arc::new(config);
        let (spool, _recovered, _) = super::open_spool(&config, &logger).await?;
        let parts = Parts::build(config.clone(), &logger, None, Purpose::Serve)?;
        let (queue, events) = QueueHandle::channel();
        // As the scheduler does when it starts.
        let q = &config.queue;
        queue.flow().configure(q.in_flow_limit, q.in_flow_delay_ms);
        let intake = parts.intake(&spool, &logger, &queue);
        let ctx = Arc::new(parts.session_context(&intake, None));
        let queue = TestQueue {
            handle: queue,
            spool,
            events,
        };
        Ok((ctx, queue))
    }
}
