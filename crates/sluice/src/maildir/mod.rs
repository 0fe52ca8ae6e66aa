//! Local delivery into virtual mailboxes (Maildir).

mod agent;
pub mod dirs;
pub mod write;

pub use agent::MaildirAgent;
