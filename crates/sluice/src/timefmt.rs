//! Date formatting without a date crate: RFC 5322 dates for headers and
//! ISO 8601 timestamps for the log. UTC only.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// (year, month 1-12, day 1-31) of days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    weekday: usize,
    hour: u64,
    minute: u64,
    second: u64,
    millis: u64,
}

fn parts(millis: u64) -> Parts {
    let secs = millis / 1000;
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let rem = secs % 86_400;
    Parts {
        year,
        month,
        day,
        weekday: ((days + 4) % 7) as usize, // 1970-01-01 was a Thursday
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
        millis: millis % 1000,
    }
}

/// `Sun, 22 Nov 2026 05:30:00 +0000`
pub fn rfc5322(millis: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let p = parts(millis);
    format!(
        "{}, {} {} {} {:02}:{:02}:{:02} +0000",
        DAYS[p.weekday],
        p.day,
        MONTHS[p.month as usize - 1],
        p.year,
        p.hour,
        p.minute,
        p.second
    )
}

/// asctime(3)'s `Sun Nov 22 05:30:00 2026` (the mbox `From ` line), UTC.
pub fn asctime(millis: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let p = parts(millis);
    format!(
        "{} {} {:2} {:02}:{:02}:{:02} {}",
        DAYS[p.weekday],
        MONTHS[p.month as usize - 1],
        p.day,
        p.hour,
        p.minute,
        p.second,
        p.year
    )
}

/// `2026-11-22T05:30:00.123Z`
pub fn iso8601(millis: u64) -> String {
    let p = parts(millis);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        p.year, p.month, p.day, p.hour, p.minute, p.second, p.millis
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(rfc5322(0), "Thu, 1 Jan 1970 00:00:00 +0000");
        // 2026-11-22T05:30:00.123Z
        assert_eq!(iso8601(1_795_325_400_123), "2026-11-22T05:30:00.123Z");
        assert_eq!(
            rfc5322(1_795_325_400_123),
            "Sun, 22 Nov 2026 05:30:00 +0000"
        );
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
