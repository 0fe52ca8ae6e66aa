//! Postfix's `cidr:` tables (cidr_table(5)): an ordered list of
//! `network/prefix result` rules (or a plain address), `!` to negate,
//! `if network/prefix` … `endif` blocks that nest; the first match wins.
//! IPv4 and IPv6 are compared in binary (IPv6 spelling does not matter);
//! a rule's address may be written in `[ ]`. A rule or `if` on the other
//! address family never applies, negated or not.
//!
//! Like postmap, a bad line is skipped with a [`Warning`]: an address
//! postmap's parser rejects (an IPv4 octet with a leading zero, `010.0.0.0`,
//! is a "bad network value"), a prefix too long, or host bits set beyond
//! the prefix. A lookup key must be a bare address (postmap finds nothing
//! for `[1.2.3.4]` or a name); anything else finds nothing. No I/O in
//! lookups.

use std::net::IpAddr;
use std::path::Path;

use super::pattern::lines::{logical_lines, statement, Statement};
pub use super::pattern::{LoadError, Problem, Warning};

#[derive(Debug, Clone, Copy)]
struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// Whether a rule on this network applies to `key`: as postmap, a key
    /// of the other family never does, negated or not (an `if` on the
    /// other family skips its block).
    fn applies(&self, key: IpAddr, matches: bool) -> bool {
        self.addr.is_ipv4() == key.is_ipv4() && self.contains(key) == matches
    }

    fn contains(&self, key: IpAddr) -> bool {
        match (self.addr, key) {
            (IpAddr::V4(n), IpAddr::V4(k)) => {
                masked(u32::from(k).into(), 32, self.prefix)
                    == masked(u32::from(n).into(), 32, self.prefix)
            }
            (IpAddr::V6(n), IpAddr::V6(k)) => {
                masked(u128::from(k), 128, self.prefix) == masked(u128::from(n), 128, self.prefix)
            }
            _ => false,
        }
    }
}

/// `v` (of `bits` bits) with the bits past `prefix` cleared.
fn masked(v: u128, bits: u8, prefix: u8) -> u128 {
    let host = u32::from(bits.saturating_sub(prefix));
    if host >= 128 {
        0
    } else {
        v >> host << host
    }
}

enum Step {
    If {
        net: Net,
        matches: bool,
        skip_to: usize,
    },
    Rule {
        net: Net,
        matches: bool,
        result: String,
    },
}

/// A loaded `cidr:` table.
pub struct CidrTable {
    steps: Vec<Step>,
}

impl CidrTable {
    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<(CidrTable, Vec<Warning>), LoadError> {
        let text = std::fs::read(path).map_err(|err| LoadError::Read {
            path: path.to_path_buf(),
            err,
        })?;
        let text = String::from_utf8_lossy(&text);
        Ok(Self::parse(&text, &path.display().to_string()))
    }

    /// Parses table text; `origin` names it in warnings.
    pub fn parse(text: &str, origin: &str) -> (CidrTable, Vec<Warning>) {
        let mut warnings = Vec::new();
        let mut steps = Vec::new();
        let mut open: Vec<(usize, usize)> = Vec::new();
        let (lines, orphans) = logical_lines(text);
        warnings.extend(Warning::orphans(origin, orphans));
        for l in lines {
            let mut warn = |problem| {
                warnings.push(Warning {
                    origin: origin.to_string(),
                    line: l.line,
                    problem,
                })
            };
            match statement(&l.text) {
                Statement::If(rest) => match pattern(rest) {
                    Ok((net, matches, extra)) => {
                        if !extra.is_empty() {
                            warn(Problem::ExtraAfterIf(extra.to_string()));
                        }
                        open.push((steps.len(), l.line));
                        steps.push(Step::If {
                            net,
                            matches,
                            skip_to: usize::MAX,
                        });
                    }
                    Err(p) => warn(p),
                },
                Statement::Endif(extra) => {
                    if !extra.is_empty() {
                        warn(Problem::ExtraAfterEndif(extra.to_string()));
                    }
                    match open.pop() {
                        Some((at, _)) => close(&mut steps, at),
                        None => warn(Problem::EndifWithoutIf),
                    }
                }
                Statement::Other => match pattern(&l.text) {
                    Ok((net, matches, result)) => {
                        if result.is_empty() {
                            warn(Problem::NoReplacement);
                        }
                        steps.push(Step::Rule {
                            net,
                            matches,
                            result: result.to_string(),
                        });
                    }
                    Err(p) => warn(p),
                },
            }
        }
        while let Some((at, line)) = open.pop() {
            warnings.push(Warning {
                origin: origin.to_string(),
                line,
                problem: Problem::IfWithoutEndif,
            });
            close(&mut steps, at);
        }
        (CidrTable { steps }, warnings)
    }

    /// How many rules and statements the table holds.
    pub fn rules(&self) -> usize {
        self.steps.len()
    }

    /// The first matching rule's result, if any; a key that is not a bare
    /// address finds nothing.
    pub fn lookup(&self, key: &str) -> Option<String> {
        let key: IpAddr = key.parse().ok()?;
        let mut i = 0;
        while let Some(step) = self.steps.get(i) {
            match step {
                Step::If {
                    net,
                    matches,
                    skip_to,
                } => {
                    i = if net.applies(key, *matches) {
                        i + 1
                    } else {
                        *skip_to
                    }
                }
                Step::Rule {
                    net,
                    matches,
                    result,
                } => {
                    if net.applies(key, *matches) {
                        return Some(result.clone());
                    }
                    i += 1;
                }
            }
        }
        None
    }
}

fn close(steps: &mut [Step], at: usize) {
    let end = steps.len();
    if let Some(Step::If { skip_to, .. }) = steps.get_mut(at) {
        *skip_to = end;
    }
}

/// Parses `[!…]address[/prefix]` at the start of `text`: the network,
/// whether a match is wanted, and the text after it.
fn pattern(text: &str) -> Result<(Net, bool, &str), Problem> {
    let mut matches = true;
    let mut p = text.trim_start();
    while let Some(r) = p.strip_prefix('!') {
        matches = !matches;
        p = r.trim_start();
    }
    let end = p.find(char::is_whitespace).unwrap_or(p.len());
    let (token, rest) = p.split_at(end);
    if token.is_empty() {
        return Err(Problem::BadNetwork(String::new()));
    }
    let (addr, prefix) = match token.split_once('/') {
        Some((a, m)) => (a, Some(m)),
        None => (token, None),
    };
    let addr = addr
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr);
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| Problem::BadNetwork(token.to_string()))?;
    let bits = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => bits,
        Some(m) => match m.parse::<u8>() {
            Ok(n) if n <= bits && m.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(Problem::BadMask(token.to_string())),
        },
    };
    let net = Net { addr: ip, prefix };
    let v = match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    };
    if masked(v, bits, prefix) != v {
        return Err(Problem::HostBits(token.to_string()));
    }
    Ok((net, matches, rest.trim_start()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_negation_ifs_and_bad_lines() {
        let text = "1.2.3.0/24 net\n10.0.0.1/8 hostbits\n[192.168.0.1] br\n\
                    2001:db8::/32 v6\nif 5.0.0.0/8\n!5.5.0.0/16 notfive\nendif\n\
                    010.0.0.0/8 lz\n1.2.3.4/33 big\n::/0 any6\n";
        let (t, w) = CidrTable::parse(text, "t");
        let probs: Vec<&Problem> = w.iter().map(|w| &w.problem).collect();
        assert!(matches!(
            probs[..],
            [
                Problem::HostBits(_),
                Problem::BadNetwork(_),
                Problem::BadMask(_)
            ]
        ));
        assert_eq!(t.lookup("1.2.3.9").as_deref(), Some("net"));
        assert_eq!(t.lookup("10.1.1.1"), None);
        assert_eq!(t.lookup("192.168.0.1").as_deref(), Some("br"));
        assert_eq!(t.lookup("[192.168.0.1]"), None);
        assert_eq!(t.lookup("2001:0db8:0000::1").as_deref(), Some("v6"));
        assert_eq!(t.lookup("5.6.0.1").as_deref(), Some("notfive"));
        assert_eq!(t.lookup("5.5.0.1"), None);
        assert_eq!(t.lookup("fe80::1").as_deref(), Some("any6"));
        let (t, _) = CidrTable::parse("if !10.0.0.0/8\n::/0 in\nendif\n!1.0.0.0/8 not1\n", "t");
        assert_eq!(t.lookup("::1"), None);
        assert_eq!(t.lookup("2.0.0.1").as_deref(), Some("not1"));
        assert_eq!(t.lookup("a\0b"), None);
        assert_eq!(t.lookup(&"1".repeat(10_240)), None);
    }
}
