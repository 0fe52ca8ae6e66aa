//! A real Postfix with DNS, for the differential tests of the checks that
//! look clients up ([`Postfix::start_with_dns`]): the instance's resolver
//! is a test's name server (an [`super::nsd::Nsd`] on port 53 of an
//! address of its own, [`super::nsd::Nsd::start_in`]), and the instance
//! may run in a test's network namespace ([`Netns`]: clients at addresses
//! outside 127.0.0.0/8, whose names the test's DNS gives).
//!
//! Postfix asks libc's resolver, which reads `/etc/resolv.conf`,
//! `/etc/hosts` and `/etc/nsswitch.conf`; so `postfix start` runs in a
//! mount namespace of its own (`unshare --mount`), where the instance's
//! own three files (in `DIR/etc`) are bind-mounted over those:
//! `nameserver` the test's server with one attempt of one second (a
//! failing name costs a second, not a minute), no hosts, no mDNS. The
//! master and every daemon it starts stay in that namespace; the
//! machine's files are untouched. Reverse lookups of clients are on
//! (`smtpd_peername_lookup = yes`), and `smtp_dns_support_level =
//! enabled` (the transports still discard: nothing leaves).

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use super::netns::Netns;
use super::postfix::{write_settled, Postfix};

impl Postfix {
    /// As [`Postfix::start_with`], with DNS: its resolver asks only
    /// `nameserver` (port 53), and it looks up its clients' names (see the
    /// module's head comment); run inside `netns` if given. `main_cf_extra` still
    /// has the last word.
    pub fn start_with_dns(
        files: &[(&str, &str)],
        main_cf_extra: &[(&str, &str)],
        master_extra: &str,
        nameserver: IpAddr,
        netns: Option<&Netns>,
    ) -> Postfix {
        let mut extra = vec![
            ("smtpd_peername_lookup", "yes"),
            ("smtp_dns_support_level", "enabled"),
            ("smtp_host_lookup", "dns"),
        ];
        extra.extend_from_slice(main_cf_extra);
        Postfix::start_resolving(files, &extra, master_extra, Some((nameserver, netns)))
    }
}

/// The instance's resolv.conf, hosts and nsswitch.conf (see the head
/// comment), in `DIR/etc`.
pub(super) fn resolver_files(dir: &Path, nameserver: IpAddr) {
    let etc = dir.join("etc");
    std::fs::create_dir(&etc).unwrap();
    let resolv = format!("nameserver {nameserver}\noptions timeout:1 attempts:1\n");
    write_settled(&etc.join("resolv.conf"), &resolv);
    write_settled(&etc.join("hosts"), "");
    write_settled(&etc.join("nsswitch.conf"), "hosts: files dns\n");
}

/// `postfix -c DIR start` in a mount namespace of its own, over which the
/// instance's resolver files are bind-mounted (see the head comment), in
/// the network namespace `netns` if given.
pub(super) fn start_in_namespace(dir: &Path, netns: Option<&Netns>) -> (bool, String) {
    let d = dir.display();
    let script = format!(
        "set -e; for f in resolv.conf hosts nsswitch.conf; do \
         mount --bind {d}/etc/$f /etc/$f; done; exec postfix -c {d} start"
    );
    let mut unshare = match netns {
        Some(ns) => ns.command("unshare"),
        None => Command::new("unshare"),
    };
    let out = unshare
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
