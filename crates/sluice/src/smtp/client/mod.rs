//! The SMTP client: the delivery agent that relays mail to next hops.

mod agent;
mod conn;
mod transaction;

pub use agent::SmtpAgent;
