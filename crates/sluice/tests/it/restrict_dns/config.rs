//! How `restrict_dns` configures both servers alike: Postfix's main.cf
//! (one restriction class per keyword, then TAIL; the codes) and the
//! Sluice configuration that says the same, and each case's recipient.

use std::net::SocketAddr;

use sluice::receive::dnscheck::{DnsCheckCodes, TempfailAction};

use super::Case;

pub fn main_cf(codes: &DnsCheckCodes, classes: &[String]) -> Vec<(String, String)> {
    let action = |a: TempfailAction| match a {
        TempfailAction::Defer => "defer",
        TempfailAction::DeferIfPermit => "defer_if_permit",
    };
    let mut cf: Vec<(String, String)> = vec![
        ("mynetworks".into(), "127.0.0.0/8, 198.51.100.0/24".into()),
        ("relay_domains".into(), "dest.test".into()),
        (
            "smtpd_relay_restrictions".into(),
            "permit_mynetworks, reject".into(),
        ),
        (
            "smtpd_recipient_restrictions".into(),
            "check_recipient_access texthash:$config_directory/classes, permit".into(),
        ),
        (
            "smtpd_restriction_classes".into(),
            class_names(classes).join(", "),
        ),
        (
            "unknown_address_reject_code".into(),
            codes.unknown_address_reject_code.to_string(),
        ),
        (
            "unknown_client_reject_code".into(),
            codes.unknown_client_reject_code.to_string(),
        ),
        (
            "unknown_hostname_reject_code".into(),
            codes.unknown_hostname_reject_code.to_string(),
        ),
        (
            "maps_rbl_reject_code".into(),
            codes.maps_rbl_reject_code.to_string(),
        ),
        (
            "unknown_address_tempfail_action".into(),
            action(codes.unknown_address_tempfail_action).into(),
        ),
        (
            "unknown_helo_hostname_tempfail_action".into(),
            action(codes.unknown_helo_hostname_tempfail_action).into(),
        ),
    ];
    for (name, restriction) in class_names(classes).into_iter().zip(classes) {
        let list =
            format!("{restriction}, check_sender_access texthash:$config_directory/tail, permit");
        cf.push((name, list));
    }
    cf
}

pub fn class_names(classes: &[String]) -> Vec<String> {
    (0..classes.len()).map(|i| format!("k{i}")).collect()
}

/// Each case's recipient, and the `classes` table choosing its class.
pub fn recipients(cases: &[Case], classes: &[String]) -> (Vec<String>, String) {
    let mut table = String::new();
    let mut rcpts = Vec::new();
    for c in cases {
        let class = classes
            .iter()
            .position(|r| *r == c.check.restriction())
            .unwrap();
        let rcpt = match c.rcpt {
            Some(r) => r.to_string(),
            None => format!("k{class}@dest.test"),
        };
        let line = format!("{rcpt} k{class}\n");
        if !table.contains(&line) {
            table.push_str(&line);
        }
        rcpts.push(rcpt);
    }
    (rcpts, table)
}

/// Sluice configured as [`main_cf`] configures Postfix: the same
/// networks, relay domain, class per keyword, TAIL and codes.
pub fn sluice_config(
    dir: &std::path::Path,
    nameserver: SocketAddr,
    codes: &DnsCheckCodes,
    classes: &[String],
) -> sluice::config::Config {
    use sluice::config::restrictions::TempfailAction as Action;
    let mut cfg = crate::common::config(dir, None);
    cfg.smtpd.mynetworks = vec![
        crate::common::net("127.0.0.0/8"),
        crate::common::net("198.51.100.0/24"),
    ];
    cfg.smtpd.relay_domains = vec!["dest.test".parse().unwrap()];
    cfg.transport
        .insert("*".into(), sluice::config::hop::NextHop::Discard);
    cfg.dns.nameservers = vec![nameserver];
    let table = |name: &str| format!("texthash:{}", dir.join(name).display());
    let r = &mut cfg.restrictions;
    r.relay = "permit_mynetworks, reject".into();
    r.recipient = format!("check_recipient_access {}, permit", table("classes"));
    for (name, restriction) in class_names(classes).into_iter().zip(classes) {
        let list = format!(
            "{restriction}, check_sender_access {}, permit",
            table("tail")
        );
        r.classes.insert(name, list);
    }
    let action = |a: TempfailAction| match a {
        TempfailAction::Defer => Action::Defer,
        TempfailAction::DeferIfPermit => Action::DeferIfPermit,
    };
    r.unknown_address_reject_code = codes.unknown_address_reject_code;
    r.unknown_client_reject_code = codes.unknown_client_reject_code;
    r.unknown_hostname_reject_code = codes.unknown_hostname_reject_code;
    r.maps_rbl_reject_code = codes.maps_rbl_reject_code;
    r.unknown_address_tempfail_action = action(codes.unknown_address_tempfail_action);
    r.unknown_helo_hostname_tempfail_action = action(codes.unknown_helo_hostname_tempfail_action);
    cfg
}
