//! Per-listener overrides, as master.cf's `-o name=value` on an smtpd
//! service: `[smtpd.listeners.overrides]` holds `[smtpd]` and `[tls]`
//! settings (any of them but the ones that shape the whole server) that
//! replace the main ones for sessions on that listener: its banner,
//! limits, milters, greet pause, DNSBLs, policy service, mynetworks,
//! certificate and key.
//!
//! The listener's configuration is the main one with the overrides laid
//! over it, read again as a whole: a bad value fails `check-config` with
//! the listener's address and the setting's name, as the main file's
//! would.
//!
//! Trust: the administrator's file. Invariant: a listener without
//! overrides uses the main configuration itself (no copy).

use super::listener::ListenerConfig;
use super::{Config, ConfigError};

/// `[smtpd]` settings a listener may not override: they shape the whole
/// server, not one service.
const SERVER_WIDE: &[&str] = &[
    "listen",
    "listeners",
    "max_sessions",
    "reuse_port",
    "balancer_drain_secs",
    "message_memory_budget_kib",
];

impl Config {
    /// The configuration sessions on `listener` see: None when it has no
    /// overrides (the main one applies).
    pub fn for_listener(&self, listener: &ListenerConfig) -> Result<Option<Config>, ConfigError> {
        if listener.overrides.is_empty() {
            return Ok(None);
        }
        let at = |why: String| {
            ConfigError::Invalid(format!(
                "smtpd.listeners: {} overrides: {why}",
                listener.listen
            ))
        };
        let mut whole = toml::Table::try_from(self).map_err(|e| at(e.to_string()))?;
        for (section, value) in &listener.overrides {
            let toml::Value::Table(settings) = value else {
                return Err(at(format!(
                    "{section}: want a table ([...overrides.{section}])"
                )));
            };
            match section.as_str() {
                "smtpd" | "tls" => {}
                other => {
                    return Err(at(format!(
                        "{other}: only [smtpd] and [tls] settings may be set per listener"
                    )))
                }
            }
            if let Some(key) = settings.keys().find(|k| SERVER_WIDE.contains(&k.as_str())) {
                return Err(at(format!(
                    "smtpd.{key} is server-wide (not a per-listener setting)"
                )));
            }
            let target = whole
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(Default::default()));
            let toml::Value::Table(target) = target else {
                return Err(at(format!("{section}: not a table")));
            };
            for (key, value) in settings {
                target.insert(key.clone(), value.clone());
            }
        }
        let config: Config = whole
            .try_into()
            .map_err(|e: toml::de::Error| at(e.message().into()))?;
        Ok(Some(config))
    }

    /// Checks every listener's overrides (`validate`).
    pub(super) fn validate_overrides(&self) -> Result<(), ConfigError> {
        for l in &self.smtpd.listeners {
            self.for_listener(l)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(overrides: &str) -> ListenerConfig {
        let text = format!("listen = \"127.0.0.1:2587\"\n[overrides]\n{overrides}");
        toml::from_str(&text).unwrap()
    }

    #[test]
    fn a_listener_sees_its_overrides_over_the_main_settings() {
        let mut main = Config::default();
        main.smtpd.message_size_limit = 1000;
        main.smtpd.greet_pause_ms = 7;
        let l = listener("smtpd.banner = \"submission here\"\nsmtpd.message_size_limit = 5000\n");
        let own = main.for_listener(&l).unwrap().unwrap();
        assert_eq!(own.smtpd.banner, "submission here");
        assert_eq!(own.smtpd.message_size_limit, 5000);
        // What it does not set stays the main one.
        assert_eq!(own.smtpd.greet_pause_ms, 7);
        assert_eq!(own.hostname, main.hostname);
        assert!(main.for_listener(&listener("")).unwrap().is_none());
    }

    #[test]
    fn bad_or_server_wide_overrides_are_refused_with_the_listener() {
        let main = Config::default();
        for (text, want) in [
            ("smtpd.max_sessions = 5\n", "server-wide"),
            ("smtpd.message_size_limit = \"big\"\n", "invalid type"),
            ("smtpd.no_such_setting = 1\n", "unknown field"),
            (
                "delivery.relayhost = \"smtp:[10.0.0.1]\"\n",
                "only [smtpd] and [tls]",
            ),
        ] {
            let err = main.for_listener(&listener(text)).unwrap_err().to_string();
            assert!(
                err.contains("127.0.0.1:2587") && err.contains(want),
                "{text}: {err}"
            );
        }
    }
}
