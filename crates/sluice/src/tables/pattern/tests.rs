use super::*;

fn table(text: &str, f: Flavour) -> (PatternTable, Vec<Warning>) {
    PatternTable::parse(text, "t", f)
}

#[test]
fn rules_flags_negation_and_ifs() {
    let text = "/^(a)(b)?c$/ x$1${2}y\n!/z/ notz\n";
    let (t, w) = table(text, Flavour::Regexp);
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(t.lookup("AC").unwrap(), Some("xAy".into()));
    assert_eq!(t.lookup("q").unwrap(), Some("notz".into()));
    assert_eq!(t.lookup("z").unwrap(), None);
    let (t, w) = table(
        "if /^x/\nif !/z/\n/w/ in\nendif\nendif\n/./ out\n",
        Flavour::Pcre,
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(t.lookup("xw").unwrap(), Some("in".into()));
    assert_eq!(t.lookup("xzw").unwrap(), Some("out".into()));
}

#[test]
fn bad_lines_warn_and_are_skipped() {
    let (t, w) = table("/a/q x\n/(b/ y\nendif\n/c/ $1\nif /d/\n", Flavour::Regexp);
    let got: Vec<(usize, &Problem)> = w.iter().map(|w| (w.line, &w.problem)).collect();
    assert!(matches!(got[0], (1, Problem::UnknownFlag('q'))));
    assert!(matches!(got[1], (2, Problem::BadPattern(_))));
    assert!(matches!(got[2], (3, Problem::EndifWithoutIf)));
    assert!(matches!(got[3], (4, Problem::IndexOutOfRange(_))));
    assert!(matches!(got[4], (5, Problem::IfWithoutEndif)));
    assert_eq!(t.lookup("a").unwrap(), None);
}

#[test]
fn catastrophic_pcre_is_a_typed_error() {
    // A back-reference makes fancy-regex backtrack itself (a plain
    // `(a+)+$` goes to the linear-time regex crate and cannot blow up).
    let (t, w) = table("/^(a+)+\\1$/ cat\n", Flavour::Pcre);
    assert!(w.is_empty(), "{w:?}");
    let key = format!("{}b", "a".repeat(30));
    assert_eq!(
        t.lookup(&key),
        Err(MatchError::BacktrackLimit {
            origin: "t".into(),
            line: 1
        })
    );
    let (t, _) = table("/(a+)+$/ cat\n", Flavour::Pcre);
    assert_eq!(t.lookup(&key).unwrap(), None);
}

#[test]
fn hostile_keys() {
    for f in [Flavour::Regexp, Flavour::Pcre] {
        let (t, _) = table("/^(.*)$/ [$1]\n", f);
        let long = "x".repeat(10_240);
        assert_eq!(t.lookup(&long).unwrap(), Some(format!("[{long}]")));
        for k in ["a\0b", "%s%n", "\"'", "a\nb"] {
            assert_eq!(t.lookup(k).unwrap(), Some(format!("[{k}]")));
        }
    }
}
