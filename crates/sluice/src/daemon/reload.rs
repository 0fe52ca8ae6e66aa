//! Reload (SIGHUP), as `postfix reload`: the whole configuration file is
//! read and checked, everything it describes is built, and only then is
//! it swapped in. A file that fails anywhere (syntax, a table, a
//! certificate, a socket that cannot be bound) changes nothing, and the
//! log says why.
//!
//! Applied at once: listeners (added, retired, re-set; see
//! `listeners.rs`), session limits and relay policy, TLS, AUTH, DKIM and
//! sender checks, routes, delivery limits, timeouts and TLS policy, queue
//! settings, DNS, tables (rebuilt when their definitions change,
//! otherwise re-read). In flight nothing changes: a session keeps the
//! settings it started with, a delivery the agent that took it.
//!
//! Kept until a restart (and named in the log): `data_dir`, `[spool]`,
//! the log file and its format, `[metrics]` and `smtpd.reuse_port`: they
//! are the process's own files and sockets.
//!
//! A listener is known by its address text: moving a port between a
//! wildcard and a specific address (`0.0.0.0:25` and `127.0.0.1:25`) in
//! one reload cannot bind while the old socket listens, so it is refused
//! whole; do it in two reloads through another port, or restart.

use std::sync::Arc;
use std::time::Duration;

use super::build::{Parts, Purpose};
use super::Server;
use crate::admin::control::ReloadOutcome;
use crate::config::source::Source;
use crate::config::Config;
use crate::log::{Event, Reload};
use crate::queue::Reconfig;

impl Server {
    /// Reloads the configuration from its source (a file and `-o`
    /// overrides); the embedded default without overrides only re-reads
    /// tables and the certificate.
    pub async fn reload(&mut self, source: &Source) -> ReloadOutcome {
        if source.path.is_none() && source.overrides.is_empty() {
            self.refresh(None);
            return ReloadOutcome {
                result: "tables".into(),
                text: "lookup tables and the certificate read again".into(),
                ..ReloadOutcome::default()
            };
        }
        match source.load() {
            Ok(new) => self.apply(new).await,
            Err(e) => self.refuse("config", e.line(), None, &e.one_line()),
        }
    }

    /// Logs a refused reload: what failed (`config`, `build`, `listen`),
    /// the file's line or the address at fault when known.
    fn refuse(
        &self,
        cause: &str,
        line: Option<usize>,
        addr: Option<&str>,
        why: &str,
    ) -> ReloadOutcome {
        self.logger.emit(&Event::Reload(Reload::Refused {
            result: "refused".into(),
            cause: cause.into(),
            line: line.map(|l| l as u64),
            addr: addr.map(Into::into),
            error: why.into(),
        }));
        ReloadOutcome {
            result: "refused".into(),
            error: Some(why.to_string()),
            text: format!("{why}; keeping the running configuration"),
            ..ReloadOutcome::default()
        }
    }

    async fn apply(&mut self, mut new: Config) -> ReloadOutcome {
        // A Maildir owner whose group the running daemon does not have
        // would make every delivery defer (permission denied).
        if let Err(why) = super::privilege::maildir_group(&new, None) {
            return self.refuse("config", None, None, &why.to_string());
        }
        let old = self.parts.config.clone();
        let later = keep_restart_settings(&old, &mut new);
        let new = Arc::new(new);
        let built = Parts::build(new.clone(), &self.logger, Some(&self.parts), Purpose::Serve);
        let mut parts = match built {
            Ok(parts) => parts,
            Err(why) => return self.refuse("build", None, None, &why.to_string()),
        };
        let bound = match self.listeners.bind_new(&new) {
            Ok(bound) => bound,
            Err((listen, e)) => {
                let why = format!("cannot listen on {listen}: {e}");
                return self.refuse("listen", None, Some(&listen.to_string()), &why);
            }
        };
        parts.cluster = self.parts.cluster.clone();
        parts.shadow = self.parts.shadow.clone();
        parts.limits = self.parts.limits.clone();
        parts.agents(&self.spool, &self.logger, Some(&self.parts));
        self.refresh(Some(&parts));
        let intake = parts.intake(&self.spool, &self.logger, &self.queue);
        let ctx = parts.session_context(&intake, Some(&self.ctx));
        self.ctx = Arc::new(ctx);
        let submitter = parts.submitter(&intake);
        self.submitter.store(Arc::new(submitter));
        self.intake.store(intake.clone());
        self.mailboxes.store(parts.mailboxes.clone());
        let reconfig = Reconfig {
            config: new.clone(),
            router: parts.router.clone(),
            agent: parts.agents.clone().expect("agents just built"),
            resolver: parts.dns.clone(),
            secure_mx: super::build::secure_mx(parts.dane.as_ref()),
            intake,
        };
        self.queue.reconfigure(reconfig).await;
        let contexts = parts.contexts(self.ctx.clone());
        self.listeners
            .apply(&new, bound, &contexts, &self.logger)
            .await;
        self.addrs = self.listeners.addrs();
        parts.own_addrs.set(self.addrs.clone());
        self.drain_deadline = Duration::from_secs(new.queue.shutdown_drain_secs);
        let sections = sections_changed(&old, &new);
        self.parts = parts;
        let changed = outcome_text(&sections, &later);
        self.logger.emit(&Event::Reload(Reload::Applied {
            result: "applied".into(),
            sections: sections.iter().map(|&s| s.into()).collect(),
            later: later.iter().map(|&s| s.into()).collect(),
            line: format!("reload: {changed}").into(),
        }));
        ReloadOutcome {
            result: "applied".into(),
            sections: sections.iter().map(|s| s.to_string()).collect(),
            later: later.iter().map(|s| s.to_string()).collect(),
            error: None,
            text: changed,
        }
    }

    /// Re-reads the files of tables and the certificate that a reload
    /// keeps (`parts` being what it built; all of them without).
    fn refresh(&self, parts: Option<&Parts>) {
        if parts.is_none_or(|p| Arc::ptr_eq(&self.parts.mailboxes, &p.mailboxes)) {
            self.logger.emit(&Event::ReloadTables);
            self.parts.mailboxes.reload();
        }
        let same_tls = match (parts, &self.parts.tls) {
            (None, Some(tls)) => Some(tls),
            (Some(p), Some(tls)) => p.tls.as_ref().filter(|t| Arc::ptr_eq(t, tls)),
            _ => None,
        };
        if let Some(tls) = same_tls {
            match tls.reload() {
                Ok(()) => self.logger.emit(&Event::Reload(Reload::Certificate {
                    result: "certificate".into(),
                    file: tls.cert_path().display().to_string().into(),
                })),
                Err(err) => self.logger.emit(&Event::Reload(Reload::CertificateKept {
                    result: "certificate_kept".into(),
                    error: err.to_string().into(),
                })),
            }
        }
    }
}

/// What a reload did, in one line (its last): the sections applied now,
/// and those that wait for a restart; never "nothing changed" when
/// something does, later.
fn outcome_text(applied: &[&str], later: &[&str]) -> String {
    let later = match later {
        [] => None,
        [one] => Some(format!("{one} takes effect at the next restart")),
        many => Some(format!(
            "{} take effect at the next restart",
            many.join(", ")
        )),
    };
    match (applied.is_empty(), later) {
        (true, None) => "nothing changed".into(),
        (true, Some(later)) => format!("nothing applied now; {later}"),
        (false, None) => format!("applied changes to {}", applied.join(", ")),
        (false, Some(later)) => format!("applied changes to {}; {later}", applied.join(", ")),
    }
}

/// Puts the running values of the settings a reload cannot change into
/// `new`, and names those that differed.
fn keep_restart_settings(old: &Config, new: &mut Config) -> Vec<&'static str> {
    let mut later = Vec::new();
    if old.data_dir != new.data_dir {
        later.push("data_dir");
        new.data_dir = old.data_dir.clone();
    }
    if format!("{:?}", old.spool) != format!("{:?}", new.spool) {
        later.push("spool");
        new.spool = old.spool.clone();
    }
    if (&old.log_file, &old.log_format) != (&new.log_file, &new.log_format) {
        later.push("log_file");
        new.log_file = old.log_file.clone();
        new.log_format = old.log_format;
    }
    if old.smtpd.reuse_port != new.smtpd.reuse_port {
        later.push("smtpd.reuse_port");
        new.smtpd.reuse_port = old.smtpd.reuse_port;
    }
    if format!("{:?}", old.metrics) != format!("{:?}", new.metrics) {
        later.push("metrics");
        new.metrics = old.metrics.clone();
    }
    if format!("{:?}", old.cluster) != format!("{:?}", new.cluster) {
        later.push("cluster");
        new.cluster = old.cluster.clone();
    }
    later
}

/// The top-level settings that differ between two configurations.
fn sections_changed(old: &Config, new: &Config) -> Vec<&'static str> {
    sections(old)
        .into_iter()
        .zip(sections(new))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((name, _), _)| name)
        .collect()
}

/// Each top-level setting a reload applies, named, in a comparable form
/// (those kept until a restart are `keep_restart_settings`'s).
fn sections(c: &Config) -> [(&'static str, String); 13] {
    [
        ("hostname", format!("{:?}", c.hostname)),
        ("postmaster", format!("{:?}", c.postmaster)),
        ("smtpd", format!("{:?}", c.smtpd)),
        ("tls", format!("{:?}", c.tls)),
        ("auth", format!("{:?}", c.auth)),
        ("queue", format!("{:?}", c.queue)),
        ("delivery", format!("{:?}", c.delivery)),
        ("transport", format!("{:?}", c.transport)),
        ("local and tables", format!("{:?}{:?}", c.local, c.tables)),
        ("dns", format!("{:?}", c.dns)),
        ("dkim", format!("{:?}", c.dkim)),
        ("srs", format!("{:?}", c.srs)),
        ("arc", format!("{:?}", c.arc)),
    ]
}

#[cfg(test)]
mod tests {
    use super::outcome_text;

    #[test]
    fn the_last_line_says_what_waits_for_a_restart() {
        assert_eq!(outcome_text(&[], &[]), "nothing changed");
        assert_eq!(
            outcome_text(&[], &["data_dir", "log_file"]),
            "nothing applied now; data_dir, log_file take effect at the next restart"
        );
        assert_eq!(
            outcome_text(&["queue"], &["spool"]),
            "applied changes to queue; spool takes effect at the next restart"
        );
    }
}
