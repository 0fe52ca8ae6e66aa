//! What the main loop answers to the admin socket's controls
//! (`admin/control.rs`): the server's status and the configuration it
//! loaded. Reload and stop are the main loop's own (`reload.rs`, and
//! leaving the loop). Trust: the answers go to root and the daemon's
//! group only; secrets in the configuration are hidden all the same.

use crate::admin::control::{ControlReceiver, RunningConfig, Status};
use crate::config::source::Source;

use super::Server;

impl Server {
    /// The admin socket's controls, for the main loop (once).
    pub fn take_control(&mut self) -> Option<ControlReceiver> {
        self.control.take()
    }

    /// `sluice status`.
    pub fn status(&self, source: &Source) -> Status {
        Status {
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_secs: self.started.elapsed().as_secs(),
            config: source.name(),
            overrides: source.overrides.len(),
            listeners: self.addrs.iter().map(ToString::to_string).collect(),
            metrics: self.metrics_addr.map(|a| a.to_string()),
        }
    }

    /// `sluice config --running`: the configuration in force.
    pub fn running_config(&self) -> RunningConfig {
        let config = &self.parts.config;
        let mut settings = match toml::Value::try_from(&**config) {
            Ok(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        };
        crate::config::show::hide_secrets(&mut settings);
        RunningConfig {
            settings: serde_json::to_value(&settings).unwrap_or_default(),
            listeners: self.addrs.iter().map(ToString::to_string).collect(),
            tables: config
                .tables
                .iter()
                .map(|(name, t)| (name.clone(), t.kind.clone()))
                .collect(),
        }
    }
}
