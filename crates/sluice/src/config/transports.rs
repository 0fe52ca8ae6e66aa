//! `[transports.NAME]`: named delivery services, as master.cf entries
//! that run Postfix's `smtp` with `-o` overrides (`out2 unix - - n - -
//! smtp -o smtp_bind_address=192.0.2.2 -o smtp_helo_name=out2.example`).
//! A next hop names one as `NAME:[host]:port`, `NAME:host` or `NAME:`
//! (the next hop routing would choose), in `[transport]`, `relayhost`,
//! the transport tables and the sender-dependent maps.
//!
//! Also the egress settings both `[delivery]` (every SMTP connection) and
//! a transport (its own connections) carry: Postfix's
//! `smtp_bind_address`, `smtp_bind_address6`, `smtp_helo_name`, and a
//! weighted pool of sources (`egress_pool`, KumoMTA's egress pools: each
//! new connection takes the next source in a weighted round robin).
//!
//! Values only: parsed and checked here; `deliver/smtp/egress.rs` uses
//! them. Trust: the administrator's file.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use super::pipe::{PipeFlags, PipeGroup, PipeSettings, PipeUser};
use super::pipe_argv::PipeArg;

/// Which delivery agent a named transport runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// Postfix's smtp(8).
    #[default]
    Smtp,
    /// Postfix's pipe(8): a command run per message (`config/pipe.rs`).
    Pipe,
}

/// One `[transports.NAME]` section.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportConfig {
    pub service: Service,
    /// Postfix's smtp_bind_address: the IPv4 source address of this
    /// transport's connections (default: `[delivery]`'s).
    pub smtp_bind_address: Option<Ipv4Addr>,
    /// Postfix's smtp_bind_address6, for IPv6 next hops.
    pub smtp_bind_address6: Option<Ipv6Addr>,
    /// Postfix's smtp_helo_name (default: `[delivery]`'s, else `hostname`).
    pub smtp_helo_name: Option<String>,
    /// A weighted pool of sources; replaces the three settings above.
    pub egress_pool: Vec<EgressSource>,
    /// Postfix's smtp_tls_cert_file and smtp_tls_key_file for this
    /// transport's connections (default: `[delivery]`'s).
    pub smtp_tls_cert_file: Option<std::path::PathBuf>,
    pub smtp_tls_key_file: Option<std::path::PathBuf>,
    /// pipe(8)'s `argv=`: the program (an absolute path) and its
    /// arguments, with its macros; run without a shell.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<PipeArg>,
    /// pipe(8)'s `user=`: the account the command runs as (never root).
    pub user: Option<PipeUser>,
    /// pipe(8)'s `user=name:group`: its group instead of the account's.
    pub group: Option<PipeGroup>,
    /// pipe(8)'s `flags=` (`DRO`, …).
    pub flags: PipeFlags,
    /// pipe(8)'s `size=`: larger messages bounce (5.2.3); 0: no limit.
    pub size_limit: u64,
    /// Postfix's NAME_time_limit (command_time_limit, 1000 s).
    #[serde(skip_serializing_if = "super::pipe::is_default_time_limit")]
    pub time_limit_secs: u64,
    /// Postfix's NAME_destination_recipient_limit: recipients per
    /// command (default 50; 1 with flags D or O).
    pub max_recipients: Option<usize>,
    /// pipe(8)'s `null_sender=`: `${sender}` of a bounce (MAILER-DAEMON).
    pub null_sender: Option<String>,
}

impl Default for TransportConfig {
    fn default() -> TransportConfig {
        TransportConfig {
            service: Service::Smtp,
            smtp_bind_address: None,
            smtp_bind_address6: None,
            smtp_helo_name: None,
            egress_pool: Vec::new(),
            smtp_tls_cert_file: None,
            smtp_tls_key_file: None,
            argv: Vec::new(),
            user: None,
            group: None,
            flags: PipeFlags::default(),
            size_limit: 0,
            time_limit_secs: super::pipe::DEFAULT_TIME_LIMIT_SECS,
            max_recipients: None,
            null_sender: None,
        }
    }
}

/// One source of an egress pool.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSource {
    /// Its name in the log (default: its address).
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub bind_address: Option<Ipv4Addr>,
    #[serde(default)]
    pub bind_address6: Option<Ipv6Addr>,
    #[serde(default)]
    pub helo_name: Option<String>,
    /// Its share of new connections (default 1).
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

/// The egress settings of one scope (`[delivery]` or a transport).
#[derive(Debug, Clone, Copy)]
pub struct EgressSettings<'a> {
    pub bind4: Option<Ipv4Addr>,
    pub bind6: Option<Ipv6Addr>,
    pub helo: Option<&'a str>,
    pub pool: &'a [EgressSource],
}

impl TransportConfig {
    /// Its pipe settings (meaningful with `service = "pipe"`).
    pub fn pipe(&self) -> PipeSettings<'_> {
        PipeSettings {
            argv: &self.argv,
            user: self.user.as_ref(),
            max_recipients: self.max_recipients,
            flags: self.flags,
            time_limit_secs: self.time_limit_secs,
        }
    }

    /// Checks that the section holds only its service's settings.
    fn validate(&self, scope: &str) -> Result<(), String> {
        let pipe_set = !self.argv.is_empty()
            || self.user.is_some()
            || self.group.is_some()
            || self.flags != PipeFlags::default()
            || self.size_limit != 0
            || self.max_recipients.is_some()
            || self.null_sender.is_some()
            || self.time_limit_secs != super::pipe::DEFAULT_TIME_LIMIT_SECS;
        let egress = self.egress();
        let smtp_set = egress.bind4.is_some()
            || egress.bind6.is_some()
            || egress.helo.is_some()
            || !egress.pool.is_empty()
            || self.smtp_tls_cert_file.is_some()
            || self.smtp_tls_key_file.is_some();
        match self.service {
            Service::Smtp if pipe_set => Err(format!(
                "{scope}: argv, user, group, flags, size_limit, time_limit_secs, \
                 max_recipients and null_sender are for service = \"pipe\""
            )),
            Service::Smtp => egress.validate(scope),
            Service::Pipe if smtp_set => Err(format!(
                "{scope}: a pipe has no SMTP source address, HELO name or client certificate"
            )),
            Service::Pipe => self.pipe().validate(scope),
        }
    }

    pub fn egress(&self) -> EgressSettings<'_> {
        EgressSettings {
            bind4: self.smtp_bind_address,
            bind6: self.smtp_bind_address6,
            helo: self.smtp_helo_name.as_deref(),
            pool: &self.egress_pool,
        }
    }
}

impl EgressSettings<'_> {
    /// Checks the names and weights; `scope` names the section.
    pub fn validate(&self, scope: &str) -> Result<(), String> {
        let helos = self
            .helo
            .into_iter()
            .chain(self.pool.iter().filter_map(|s| s.helo_name.as_deref()));
        for helo in helos {
            if !is_helo_name(helo) {
                return Err(format!(
                    "{scope}: HELO name {helo:?} is not a host name or an address literal"
                ));
            }
        }
        if !self.pool.is_empty()
            && (self.bind4.is_some() || self.bind6.is_some() || self.helo.is_some())
        {
            return Err(format!(
                "{scope}: egress_pool with smtp_bind_address, smtp_bind_address6 or \
                 smtp_helo_name (a pool's sources carry their own)"
            ));
        }
        if self.pool.iter().any(|s| s.weight == 0 || s.weight > 1000) {
            return Err(format!("{scope}: an egress_pool weight must be 1 to 1000"));
        }
        Ok(())
    }
}

/// A name a HELO may carry: a host name (letters, digits, `-`, dots) or
/// an address literal; never anything that would break the command line.
fn is_helo_name(name: &str) -> bool {
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        let inner = inner.strip_prefix("IPv6:").unwrap_or(inner);
        return inner.parse::<std::net::IpAddr>().is_ok();
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// Checks every section and that each transport a next hop names is
/// defined; `used` lists (setting, transport name) pairs.
pub fn validate<'a>(
    transports: &BTreeMap<String, TransportConfig>,
    used: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<(), String> {
    for (name, t) in transports {
        if !super::hop::is_transport_name(name) {
            return Err(format!(
                "transports.{name}: want a lower-case name of letters, digits, - and _ \
                 other than smtp, lmtp, discard, maildir, local"
            ));
        }
        t.validate(&format!("transports.{name}"))?;
    }
    for (setting, name) in used {
        if !transports.contains_key(name) {
            return Err(format!(
                "{setting}: transport {name:?} is not defined (add a [transports.{name}] section)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helo_names_and_pools_are_checked() {
        for ok in ["mx2.example", "a", "[192.0.2.1]", "[IPv6:2001:db8::1]"] {
            assert!(is_helo_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a\r\nRSET", "a..b", "[x]", "-\u{e9}"] {
            assert!(!is_helo_name(bad), "{bad}");
        }
        let t = TransportConfig {
            smtp_helo_name: Some("x".into()),
            egress_pool: vec![EgressSource {
                name: None,
                bind_address: None,
                bind_address6: None,
                helo_name: None,
                weight: 1,
            }],
            ..Default::default()
        };
        assert!(t.egress().validate("t").is_err());
        let mut map = BTreeMap::new();
        map.insert("out2".to_string(), TransportConfig::default());
        assert!(validate(&map, [("transport", "out2")].into_iter()).is_ok());
        let err = validate(&map, [("transport", "out3")].into_iter()).unwrap_err();
        assert!(err.contains("\"out3\" is not defined"), "{err}");
    }
}
