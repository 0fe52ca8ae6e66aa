//! The seam for `|command` targets (Postfix's local(8) command delivery,
//! pipe(8)'s runner): not here yet. A command target that
//! `allow_mail_to_commands` allows is deferred, `4.3.0 command delivery
//! not enabled`, so mail waits in the queue until the runner exists (and
//! `[system] command_delivery` turns it on) instead of bouncing.

use super::expand::Status;
use crate::config::system::SystemConfig;

/// Delivers the message to `command` (not yet: see the head).
pub fn deliver(cfg: &SystemConfig, command: &str) -> Status {
    let _ = command;
    let text = match cfg.command_delivery {
        false => "command delivery not enabled",
        true => "command delivery not available in this build",
    };
    Status::Deferred("4.3.0", text.into())
}
