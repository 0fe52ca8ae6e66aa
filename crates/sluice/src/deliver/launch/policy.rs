//! Which accounts the launcher runs commands as: fixed when it starts,
//! from the configuration the daemon read as root before it faced the
//! network (the launcher's command line), and never widened by a
//! request. A compromised daemon can then run commands only as those
//! accounts, not as any account of the machine (`postgres`, `www-data`,
//! a gid such as `shadow`):
//! - each pipe transport's `user` with its `group` (or the user's own);
//! - with `[system]`: the accounts people log in with (uid at least
//!   `UID_MIN` of /etc/login.defs, 1000 by default), each with its own
//!   primary group only, for their `.forward` commands, and
//!   `default_privs` (nobody), for the aliases' commands.
//!
//! Trust: the command line is the daemon's while still root; the account
//! database (getpwuid) for a person's primary group.

use crate::config::transports::Service;
use crate::config::Config;

/// The accounts allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// uid:gid pairs allowed as they are.
    pub allow: Vec<(u32, u32)>,
    /// Any account from this uid up, with its own primary group.
    pub people_from: Option<u32>,
}

impl Policy {
    /// What `config` needs.
    pub fn for_config(config: &Config) -> Policy {
        let mut allow: Vec<(u32, u32)> = config
            .transports
            .values()
            .filter(|t| t.service == Service::Pipe)
            .filter_map(|t| {
                let user = t.user.as_ref()?;
                Some((user.uid, t.group.as_ref().map_or(user.gid, |g| g.gid)))
            })
            .collect();
        let mut people_from = None;
        if config.system.enabled() {
            people_from = Some(uid_min());
            let privs = crate::routing::system::passwd::account(&config.system.default_privs);
            if let Ok(Some(a)) = privs {
                allow.push((a.uid, a.gid));
            }
        }
        allow.sort_unstable();
        allow.dedup();
        Policy { allow, people_from }
    }

    /// The launcher's command line for it.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for (u, g) in &self.allow {
            args.push("--allow".into());
            args.push(format!("{u}:{g}"));
        }
        if let Some(from) = self.people_from {
            args.push("--people-from".into());
            args.push(from.to_string());
        }
        args
    }

    /// Reads [`Policy::to_args`]'s words.
    pub fn from_args(mut args: impl Iterator<Item = String>) -> Result<Policy, String> {
        let mut p = Policy::default();
        while let Some(a) = args.next() {
            let v = args.next().ok_or(format!("{a} wants a value"))?;
            let bad = || format!("{a} {v:?}");
            match a.as_str() {
                "--allow" => {
                    let (u, g) = v.split_once(':').ok_or_else(bad)?;
                    p.allow
                        .push((u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?));
                }
                "--people-from" => p.people_from = Some(v.parse().map_err(|_| bad())?),
                _ => return Err(format!("unknown option {a}")),
            }
        }
        Ok(p)
    }

    /// Whether `uid:gid` may be had (`primary`: the uid's own group).
    pub fn permits(&self, uid: u32, gid: u32, primary: Option<u32>) -> Result<(), String> {
        if self.allow.contains(&(uid, gid)) {
            return Ok(());
        }
        match self.people_from {
            Some(from) if uid >= from && primary == Some(gid) => Ok(()),
            _ => Err(format!(
                "uid {uid} gid {gid} is not an account the configuration runs commands as"
            )),
        }
    }
}

/// `UID_MIN` of /etc/login.defs (1000 when unset or unreadable).
fn uid_min() -> u32 {
    let text = std::fs::read_to_string("/etc/login.defs").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("UID_MIN"))
        .filter_map(|v| v.trim().parse().ok())
        .next_back()
        .unwrap_or(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_accounts_and_people_with_their_own_group() {
        let p = Policy {
            allow: vec![(65534, 65534), (2000, 3000)],
            people_from: Some(1000),
        };
        assert_eq!(Policy::from_args(p.to_args().into_iter()), Ok(p.clone()));
        assert!(p.permits(65534, 65534, Some(65534)).is_ok());
        assert!(p.permits(2000, 3000, Some(2000)).is_ok());
        assert!(p.permits(1500, 1500, Some(1500)).is_ok());
        // A person with another group (shadow's 42), a system account.
        assert!(p.permits(1500, 42, Some(1500)).is_err());
        assert!(p.permits(65534, 42, Some(65534)).is_err());
        assert!(p.permits(110, 110, Some(110)).is_err());
        let none = Policy::default();
        assert!(none.permits(1500, 1500, Some(1500)).is_err());
        assert!(Policy::from_args(["--allow".to_string(), "x".into()].into_iter()).is_err());
        assert!(Policy::from_args(["--run-as-root".to_string(), "1".into()].into_iter()).is_err());
    }
}
