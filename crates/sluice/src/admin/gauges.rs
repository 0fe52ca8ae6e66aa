//! The gauges of `/metrics`, written at each scrape from their sources of
//! truth: the queue's counts and busiest destinations (with the mail each
//! deferred), the spool's counters (typed `counter`), the sessions open
//! now.
//!
//! They are not kept in the `metrics` recorder: a gauge set there stays
//! at its last value until set again, so a destination that went idle (it
//! leaves the queue's list) kept reporting its last in-flight count for
//! ever, and every destination ever listed stayed a series (architecture
//! review item 8). Written fresh, a series is there exactly while its
//! source says so, and there are never more than the queue lists (20
//! destinations).
//!
//! Trust: destination names come from recipient domains and MX hosts
//! (anyone's); label values are escaped as the text format requires, so
//! a name cannot add a series or a line.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_spool::SpoolStats;

use crate::queue::admin::{DestinationStats, QueueStats};

/// The gauges, in the Prometheus text format (0.0.4).
pub fn render(queue: &QueueStats, spool: &SpoolStats, sessions_open: u64) -> String {
    let mut out = String::with_capacity(2048);
    family(
        &mut out,
        "sluice_queue_messages",
        "Messages in the queue, by state.",
    );
    for (state, n) in [
        ("active", queue.active),
        ("deferred", queue.deferred),
        ("hold", queue.hold),
    ] {
        sample(
            &mut out,
            "sluice_queue_messages",
            Some(("state", state)),
            n as u64,
        );
    }
    type Field = fn(&DestinationStats) -> usize;
    let per_destination: [(&str, &str, Field); 4] = [
        ("sluice_destination_in_flight", "Deliveries running.", |d| {
            d.in_flight
        }),
        ("sluice_destination_window", "Concurrency window.", |d| {
            d.window
        }),
        ("sluice_destination_queued", "Deliveries waiting.", |d| {
            d.queued
        }),
        (
            "sluice_destination_deferred",
            "Messages waiting for a retry, last deferred by it.",
            |d| d.deferred,
        ),
    ];
    for (name, help, field) in per_destination {
        family(&mut out, name, help);
        for d in &queue.destinations {
            sample(
                &mut out,
                name,
                Some(("destination", &d.name)),
                field(d) as u64,
            );
        }
    }
    // Counts since start: counters (`rate()` applies), under their
    // established names (without `_total`, which only OpenMetrics needs).
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    for (name, kind, help, value) in [
        (
            "sluice_spool_messages_stored",
            "counter",
            "Messages stored since start.",
            load(&spool.messages),
        ),
        (
            "sluice_spool_syncs",
            "counter",
            "Spool disk syncs since start.",
            load(&spool.syncs),
        ),
        (
            "sluice_spool_bytes_written",
            "counter",
            "Spool bytes written since start.",
            load(&spool.bytes),
        ),
        (
            "sluice_sessions_open",
            "gauge",
            "SMTP sessions open.",
            sessions_open,
        ),
    ] {
        family_of(&mut out, name, kind, help);
        sample(&mut out, name, None, value);
    }
    out
}

fn family(out: &mut String, name: &str, help: &str) {
    family_of(out, name, "gauge", help);
}

fn family_of(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, label: Option<(&str, &str)>, value: u64) {
    match label {
        Some((key, v)) => {
            let _ = writeln!(out, "{name}{{{key}=\"{}\"}} {value}", escape(v));
        }
        None => {
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

/// A label value as the text format wants it: `\`, `"` and line feeds
/// escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_is_a_series_only_while_the_queue_lists_it() {
        let spool = SpoolStats::default();
        let busy = DestinationStats {
            name: "smtp:[mx.evil\"} 1\nsluice_x{a=\"b]".into(),
            queued: 3,
            in_flight: 2,
            window: 10,
            deferred: 0,
        };
        let mut queue = QueueStats {
            destinations: vec![busy],
            ..Default::default()
        };
        let text = render(&queue, &spool, 7);
        assert!(text.contains(
            "sluice_destination_in_flight{destination=\"smtp:[mx.evil\\\"} 1\\nsluice_x{a=\\\"b]\"} 2\n"
        ), "{text}");
        assert!(text.contains("sluice_sessions_open 7\n"), "{text}");
        assert!(
            !text.lines().any(|l| l.starts_with("sluice_x")),
            "no forged series: {text}"
        );
        queue.destinations.clear();
        let idle = render(&queue, &spool, 0);
        assert!(!idle.contains("destination="), "gone once idle: {idle}");
    }
}
