//! The pattern and cidr tables against the real Postfix: each table file
//! is written to a temp dir, each key is asked of `postmap -q KEY
//! regexp:|pcre:|cidr:FILE` (exit 0 and stdout: found; exit 1: not found)
//! and of Sluice's table, and the answers must be the same. postmap runs
//! with `-c` on a temp dir holding an empty main.cf, so it never reads
//! /etc/postfix. Needs `postfix` and `postfix-pcre` (scripts/test installs
//! them).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use sluice::tables::cidr::CidrTable;
use sluice::tables::pattern::{Flavour, MatchError, PatternTable, Problem, Warning};

/// postmap's answer for `key` in `map` (e.g. "regexp:/x"): Some(value) or
/// None.
fn postmap(conf: &Path, map: &str, key: &str) -> Option<String> {
    let out = Command::new("postmap")
        .arg("-c")
        .arg(conf)
        .arg("-q")
        .arg(key)
        .arg(map)
        .output()
        .expect("postmap runs (apt-get install postfix postfix-pcre)");
    match out.status.code() {
        Some(0) => {
            let mut v = String::from_utf8(out.stdout).expect("utf-8 answer");
            assert_eq!(
                v.pop(),
                Some('\n'),
                "postmap ends its answer with a newline"
            );
            Some(v)
        }
        Some(1) => None,
        other => panic!(
            "postmap -q {key:?} {map}: exit {other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// The line numbers postmap warns about when it opens `map` (each bad
/// line it skips or notes).
fn postmap_warned_lines(conf: &Path, map: &str) -> BTreeSet<usize> {
    let out = Command::new("postmap")
        .arg("-c")
        .arg(conf)
        .arg("-q")
        .arg("probe")
        .arg(map)
        .output()
        .expect("postmap runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A continuation with nothing to continue is named by its text, not
    // its number: found in the file.
    let file = std::fs::read_to_string(map.split_once(':').unwrap().1).unwrap();
    let orphan = |l: &str| {
        let quoted = l.split("must not start with whitespace: \"").nth(1)?;
        let text = quoted.strip_suffix('"')?;
        file.lines().position(|line| line == text).map(|i| i + 1)
    };
    stderr
        .lines()
        .filter_map(|l| {
            let numbered = l.split(", line ").nth(1).and_then(|r| r.split(':').next());
            numbered.and_then(|n| n.parse().ok()).or_else(|| orphan(l))
        })
        .collect()
}

fn our_lines(warnings: &[Warning]) -> BTreeSet<usize> {
    warnings.iter().map(|w| w.line).collect()
}

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.cf"), "").unwrap();
        Scratch { dir }
    }

    fn file(&self, name: &str, text: &str) -> std::path::PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// Keys every table is asked, besides its own.
fn hostile_keys() -> Vec<String> {
    vec![
        "x".repeat(10_240),
        "%s%n%d".into(),
        "\"quoted\" 'single'".into(),
        "line\nbreak".into(),
        "trailing\n".into(),
        "".into(),
        " ".into(),
    ]
}

const REGEXP: &str = r#"  /^orphan$/ x
# a comment
/^user@(example)\.com$/ found-$1
/^UPPER$/i case-sensitive
/^lower$/ insensitive
/^(a)(b)?(c)$/ [${1}|$2|$(3)] $$
/^multi$/ first
  second
	third
/^cc$/ one
# comment between
  two
/^x$/q bad flag
/(unclosed/ bad pattern
/^(z)$/ $2
/^(y)$/ $0
!/^(n)/ $1
/^w$/ x$1y
/no-close
if /^if-/
if !/-skip$/
/^if-(.*)$/ inside $1
endif
/^if-/ inside-skipped
endif junk
endif
if/^iff/ extra text
/./ iff
endif
/^dot.line$/ dot
/^dot.m$/m dotm
/^anchor$/m anchored-m
/^[[:digit:]]+$/ digits
/^a\.b$/ literal-dot
|^pipe/(x)$| pipe-delim $1
#^hash(x)$# hash-delim $1
/^slash\/(s)$/ slash $1
/^bre\(x\)\{2\}+$/x bre
/^br\]$/ bracket
/^[]x]y$/ bracket2
/^[a\]z$/ backslash-in-bracket
/^empty$/
/^ws$/   spaced   value
!!/^double-neg$/ double
if /^sp/
! /^spaced-neg$/ neg-space
endif
/^(t)(u)?(v)?$/ $1$2$3-$3
/^long(x*)$/ L$1
/^%s/ percent
/"quoted"/ quotes
/^line.break$/ dotnl
/^trailing$/ end-only
/^$/ empty-key
/^iv(a{2,3})$/ interval $1
/^iw(a{,2})b$/ interval-open $1
/^\<word\>$/ word-bounds
/^w\w+$/ word-class
/^[[:upper:]]+-up$/ upper-class
/^alt-(one|two|)$/ alt [$1]
/^neg[^a]m$/m neg-class-m
/^q(x?)+$/ nested-q $1
/^dup(x)(x)*$/ repeat-group [$2]
/^brace{$/ lone-brace
"#;

const REGEXP_KEYS: &[&str] = &[
    "orphan",
    "user@example.com",
    "USER@EXAMPLE.COM",
    "user@example.org",
    "UPPER",
    "upper",
    "LOWER",
    "ac",
    "abc",
    "aBc",
    "multi",
    "cc",
    "x",
    "z",
    "y",
    "n",
    "m",
    "w",
    "if-a",
    "if-a-skip",
    "IF-B",
    "iff",
    "iffy",
    "dot-line",
    "dot\nline",
    "dot\nm",
    "dotxm",
    "digits",
    "12345",
    "a.b",
    "axb",
    "pipe/x",
    "pipe/X",
    "hashx",
    "slash/s",
    "bre",
    "brexx",
    "brexxxx",
    "bre(x){2}",
    "br]",
    "]y",
    "xy",
    "ay",
    "\\z",
    "z]",
    "empty",
    "ws",
    "double-neg",
    "spaced-neg",
    "spaced-other",
    "other",
    "t",
    "tu",
    "tv",
    "tuv",
    "longxxxx",
    "trailing\n",
    "anchor",
    "pre\nanchor\npost",
    "é@example.com",
    "ivaa",
    "ivaaaa",
    "iwb",
    "iwaab",
    "word",
    "wx_1",
    "ABC-up",
    "abc-up",
    "alt-one",
    "alt-",
    "alt-three",
    "neg\nm",
    "negbm",
    "qxx",
    "q",
    "dupxxx",
    "dupx",
    "brace{",
];

#[test]
fn regexp_tables_answer_as_postmap_does() {
    let s = Scratch::new();
    let path = s.file("regexp", REGEXP);
    let (table, warnings) = PatternTable::load(&path, Flavour::Regexp).unwrap();
    assert!(warnings
        .iter()
        .any(|w| w.problem == Problem::UnknownFlag('q')));
    let map = format!("regexp:{}", path.display());
    assert_eq!(
        our_lines(&warnings),
        postmap_warned_lines(s.dir.path(), &map)
    );
    compare(
        s.dir.path(),
        &map,
        |k| table.lookup(k).unwrap(),
        REGEXP_KEYS,
    );
}

#[test]
fn regexp_differences_are_typed() {
    let s = Scratch::new();
    // glibc takes back-references in ERE; the regex crate has none, so
    // Sluice skips the rule with a typed warning where postmap matches.
    let path = s.file("backref", "/^(a)\\1$/ back\n");
    let (table, warnings) = PatternTable::load(&path, Flavour::Regexp).unwrap();
    assert!(matches!(
        warnings.as_slice(),
        [Warning {
            line: 1,
            problem: Problem::BadPattern(_),
            ..
        }]
    ));
    let map = format!("regexp:{}", path.display());
    assert_eq!(postmap(s.dir.path(), &map, "aa").as_deref(), Some("back"));
    assert_eq!(table.lookup("aa").unwrap(), None);
}

const PCRE: &str = r#"# pcre
/^x(?=y)/ look
/^(o)\1$/ back
/^a.b$/ dot-default
/^s.s$/s dot-off
/^M$/m multi
/^case$/ ci
/^CASE2$/i cs
/^k(a+)/U [$1]
/anch/A anchored
/ ^ e x t $ # comment /x extended
/^(w)(v)?$/ [$2]
/^(?<name>nm)$/ named $1
/^(?>at)om$/ atomic
/(?<!q)u$/ behind
if !/^skip/
/^in-(\d+)$/ in $1
endif
/^q/Z unknown-flag
/(a+)+$/ catastrophic-in-pcre
/^(e)$/E endonly $1
/^(xx)$/X extra $1
if /^neg/
!/@/ no-at
endif
"#;

const PCRE_KEYS: &[&str] = &[
    "xy",
    "xz",
    "oo",
    "op",
    "a\nb",
    "s\ns",
    "sxs",
    "pre\nM\npost",
    "M",
    "CASE",
    "case2",
    "CASE2",
    "kaaa",
    "anch",
    "xanch",
    "ext",
    "w",
    "wv",
    "nm",
    "atom",
    "qu",
    "neg-x",
    "neg@x",
    "au",
    "in-42",
    "skip-in-42",
    "utf-É",
    "a@b",
    "qx",
];

#[test]
fn pcre_tables_answer_as_postmap_does() {
    let s = Scratch::new();
    let path = s.file("pcre", PCRE);
    let (table, warnings) = PatternTable::load(&path, Flavour::Pcre).unwrap();
    assert!(warnings
        .iter()
        .any(|w| w.problem == Problem::UnknownFlag('Z')));
    let map = format!("pcre:{}", path.display());
    assert_eq!(
        our_lines(&warnings),
        postmap_warned_lines(s.dir.path(), &map)
    );
    compare(s.dir.path(), &map, |k| table.lookup(k).unwrap(), PCRE_KEYS);
}

#[test]
fn pcre_differences_are_typed() {
    let s = Scratch::new();
    // PCRE's `$` also matches before a final newline (unless `E`);
    // fancy-regex's `$` is always the end of the text.
    let path = s.file("dollar", "/^ab$/ dollar\n");
    let (table, _) = PatternTable::load(&path, Flavour::Pcre).unwrap();
    let map = format!("pcre:{}", path.display());
    assert_eq!(
        postmap(s.dir.path(), &map, "ab\n").as_deref(),
        Some("dollar")
    );
    assert_eq!(table.lookup("ab\n").unwrap(), None);
    // Case-insensitive matching folds non-ASCII letters in Sluice
    // (Unicode); postmap's PCRE does not.
    let path = s.file("utf", "/^utf-é$/ utf\n");
    let (table, _) = PatternTable::load(&path, Flavour::Pcre).unwrap();
    let map = format!("pcre:{}", path.display());
    assert_eq!(postmap(s.dir.path(), &map, "utf-É"), None);
    assert_eq!(table.lookup("utf-É").unwrap().as_deref(), Some("utf"));
    assert_eq!(postmap(s.dir.path(), &map, "utf-é").as_deref(), Some("utf"));
    // A catastrophic pattern: postmap warns "match limit exceeded" and
    // goes on to the next rule; Sluice answers a typed error (the table is
    // unavailable, "try again"), never a wrong "found" or "not found".
    let path = s.file("boom", "/^(a+)+\\1$/ cat\n/./ next\n");
    let (table, _) = PatternTable::load(&path, Flavour::Pcre).unwrap();
    let key = format!("{}b", "a".repeat(30));
    assert!(matches!(
        table.lookup(&key),
        Err(MatchError::BacktrackLimit { line: 1, .. })
    ));
}

const CIDR: &str = "# cidr
1.2.3.0/24 net
10.0.0.1/8 hostbits
[192.168.0.1] bracketed
[10.1.0.0]/16 bracketed-net
2001:db8::1 v6-host
2001:DB8::/32 v6
010.0.0.0/8 leading-zero
1.2.3.4/33 long-mask
1.2.3.4/x bad-mask
nonsense junk
::ffff:9.9.9.9 mapped
7.7.7.0/024 zero-mask
[2001:db8:77::]/48 bracketed-v6
8.8.4.4
3.3.3.3/32  spaced  result  
4.0.0.0/0x bad
if 5.0.0.0/8
if !5.5.0.0/16
5.0.0.0/8 five-not-five-five
endif
5.5.5.0/24 five-five-five
endif
172.16.0.0/12
  continued
if !10.0.0.0/8
::/0 six-in-if
endif
!192.168.0.0/16 not-private
! 192.168.6.6 spaced-neg
";

const CIDR_KEYS: &[&str] = &[
    "1.2.3.4",
    "1.2.4.1",
    "10.1.1.1",
    "10.2.1.1",
    "192.168.0.1",
    "[192.168.0.1]",
    "192.168.0.2",
    "2001:db8::1",
    "2001:0db8:0000:0000:0000:0000:0000:0001",
    "2001:DB8::2",
    "2001:db9::1",
    "010.1.2.3",
    "1.2.3.04",
    "::ffff:9.9.9.9",
    "9.9.9.9",
    "5.1.1.1",
    "5.5.1.1",
    "5.5.5.5",
    "172.16.0.1",
    "8.8.8.8",
    "fe80::1",
    "fe80::1%eth0",
    "example.com",
    "1.2.3",
    "1.2.3.4/24",
];

#[test]
fn cidr_tables_answer_as_postmap_does() {
    let s = Scratch::new();
    let path = s.file("cidr", CIDR);
    let (table, warnings) = CidrTable::load(&path).unwrap();
    assert!(warnings
        .iter()
        .any(|w| matches!(w.problem, Problem::HostBits(_))));
    let map = format!("cidr:{}", path.display());
    assert_eq!(
        our_lines(&warnings),
        postmap_warned_lines(s.dir.path(), &map)
    );
    compare(s.dir.path(), &map, |k| table.lookup(k), CIDR_KEYS);
}

/// Asks postmap and `ours` every key (and the hostile ones).
fn compare(conf: &Path, map: &str, ours: impl Fn(&str) -> Option<String>, keys: &[&str]) {
    let mut all: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    all.extend(hostile_keys());
    let mut diffs = Vec::new();
    let mut found = 0;
    for k in &all {
        let theirs = postmap(conf, map, k);
        let mine = ours(k);
        found += usize::from(theirs.is_some());
        if theirs != mine {
            diffs.push(format!("{k:?}: postmap {theirs:?}, sluice {mine:?}"));
        }
    }
    assert!(diffs.is_empty(), "{map}:\n{}", diffs.join("\n"));
    // Not a vacuous comparison: both answers occur.
    assert!(
        found > 5 && found + 5 < all.len(),
        "{map}: {found} of {} found",
        all.len()
    );
    // A NUL cannot pass through postmap's argv; it is simply matched.
    let _ = ours("nul\0key");
}
