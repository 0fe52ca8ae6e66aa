//! The parameters of the DSN extension (RFC 3461): `RET` and `ENVID` on
//! MAIL, `NOTIFY` and `ORCPT` on RCPT. Values are checked here and kept
//! as the client wrote them (xtext), so they can be passed on to a next
//! hop unchanged and quoted in a notification.
//!
//! Trust: the values come from a hostile client; only printable ASCII is
//! allowed in xtext, `+` only as `+XX` with upper-case hex digits, and
//! lengths are bounded (ENVID 100, ORCPT 500 octets; RFC 3461 §4.2, §4.4).

/// `RET=` (RFC 3461 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    Full,
    Hdrs,
}

/// `NOTIFY=` bits; 0 means the parameter was not given (notify on
/// failure, and on delay at the MTA's discretion).
pub const NOTIFY_NEVER: u8 = 1;
pub const NOTIFY_SUCCESS: u8 = 2;
pub const NOTIFY_FAILURE: u8 = 4;
pub const NOTIFY_DELAY: u8 = 8;

/// Longest ENVID and ORCPT values accepted.
pub const MAX_ENVID: usize = 100;
pub const MAX_ORCPT: usize = 500;

/// True for RFC 3461 §4 xtext: printable ASCII but `+` and `=`, with
/// `+XX` (upper-case hex) standing for any octet.
pub fn is_xtext(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                let hex = |c: u8| c.is_ascii_digit() || (b'A'..=b'F').contains(&c);
                if i + 2 >= b.len() || !hex(b[i + 1]) || !hex(b[i + 2]) {
                    return false;
                }
                i += 3;
            }
            b'=' => return false,
            33..=126 => i += 1,
            _ => return false,
        }
    }
    true
}

/// `RET` value.
pub fn parse_ret(v: &str) -> Option<Ret> {
    if v.eq_ignore_ascii_case("FULL") {
        Some(Ret::Full)
    } else if v.eq_ignore_ascii_case("HDRS") {
        Some(Ret::Hdrs)
    } else {
        None
    }
}

/// `NOTIFY` value: `NEVER` alone, or a list of SUCCESS, FAILURE, DELAY
/// without repeats.
pub fn parse_notify(v: &str) -> Option<u8> {
    if v.eq_ignore_ascii_case("NEVER") {
        return Some(NOTIFY_NEVER);
    }
    let mut bits = 0;
    for word in v.split(',') {
        let bit = if word.eq_ignore_ascii_case("SUCCESS") {
            NOTIFY_SUCCESS
        } else if word.eq_ignore_ascii_case("FAILURE") {
            NOTIFY_FAILURE
        } else if word.eq_ignore_ascii_case("DELAY") {
            NOTIFY_DELAY
        } else {
            return None;
        };
        if bits & bit != 0 {
            return None;
        }
        bits |= bit;
    }
    Some(bits)
}

/// `ORCPT` value: `addr-type;xtext` (e.g. `rfc822;user@example.com`).
pub fn valid_orcpt(v: &str) -> bool {
    let Some((kind, addr)) = v.split_once(';') else {
        return false;
    };
    v.len() <= MAX_ORCPT
        && !kind.is_empty()
        && kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !addr.is_empty()
        && is_xtext(addr)
}

/// `ENVID` value.
pub fn valid_envid(v: &str) -> bool {
    !v.is_empty() && v.len() <= MAX_ENVID && is_xtext(v)
}

/// The NOTIFY bits as the parameter value (`SUCCESS,FAILURE`), or `None`
/// for 0 (not given).
pub fn notify_value(bits: u8) -> Option<String> {
    if bits == 0 {
        return None;
    }
    if bits & NOTIFY_NEVER != 0 {
        return Some("NEVER".into());
    }
    let names = [
        (NOTIFY_SUCCESS, "SUCCESS"),
        (NOTIFY_FAILURE, "FAILURE"),
        (NOTIFY_DELAY, "DELAY"),
    ];
    let words: Vec<&str> = names
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect();
    Some(words.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xtext() {
        assert!(is_xtext("abc+2Bdef"));
        assert!(is_xtext("rfc822-x.y@z"));
        for bad in ["a=b", "a b", "a+2", "a+2b", "a+G0", "é", "a\tb"] {
            assert!(!is_xtext(bad), "{bad:?}");
        }
    }

    #[test]
    fn notify_and_orcpt() {
        assert_eq!(parse_notify("never"), Some(NOTIFY_NEVER));
        assert_eq!(
            parse_notify("SUCCESS,delay"),
            Some(NOTIFY_SUCCESS | NOTIFY_DELAY)
        );
        for bad in [
            "NEVER,SUCCESS",
            "SUCCESS,SUCCESS",
            "",
            "SOMETIMES",
            "SUCCESS,",
        ] {
            assert_eq!(parse_notify(bad), None, "{bad:?}");
        }
        assert_eq!(
            notify_value(NOTIFY_SUCCESS | NOTIFY_FAILURE).as_deref(),
            Some("SUCCESS,FAILURE")
        );
        assert_eq!(notify_value(NOTIFY_NEVER).as_deref(), Some("NEVER"));
        assert!(valid_orcpt("rfc822;user@example.com"));
        assert!(valid_orcpt("utf-8;us+2Ber@example.com"));
        for bad in ["user@example.com", ";x", "rfc822;", "rfc822;a b", "r f;x"] {
            assert!(!valid_orcpt(bad), "{bad:?}");
        }
        assert!(valid_envid("QQ314159"));
        assert!(!valid_envid(&"x".repeat(101)));
    }
}
