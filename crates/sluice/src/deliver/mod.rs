//! The step after the queue: delivery agents. [`smtp`] relays to next
//! hops (MX or configured; TLS, DANE, MTA-STS, connection reuse, the
//! dead-host cache); [`maildir`] delivers to virtual mailboxes. The queue
//! hands them jobs and takes their outcomes; they never write the queue.
//! [`pipe`] runs commands (Postfix's pipe(8)), as other accounts through
//! [`launch`] (a root launcher) when the daemon gave root up.
//! [`verify`] probes next hops for addresses (Postfix's verify(8)), the
//! way [`smtp`] would deliver to them, without delivering.

pub mod launch;
pub mod local;
pub mod maildir;
pub mod pipe;
pub mod smtp;
pub mod verify;
