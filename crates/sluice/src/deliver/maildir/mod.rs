//! Local delivery into virtual mailboxes (Maildir).

mod agent;
pub mod commit;
pub mod dirs;
pub mod owner;
pub mod write;

pub use agent::MaildirAgent;
