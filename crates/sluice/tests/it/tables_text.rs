//! Postfix's table source format read as Postfix reads it: the same
//! files, made by a seeded generator from the awkward parts of the format
//! (continuations, comments and blank lines between them, tabs, CRs,
//! trailing blanks, `#` inside values, keys without values, duplicates,
//! upper case), are queried with the real `postmap -q - texthash:FILE`
//! and with `sluice::tables::text::parse`, and every key must get the
//! same answer (found with the same value, or not found).
//!
//! Keys are ASCII: Postfix folds non-ASCII keys only with SMTPUTF8 on,
//! which the lookups of issue 37 settle with the table interface.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::temp_dir;

/// xorshift64*: the same files for the same seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

const KEYS: [&str; 10] = [
    "user@example.com",
    "User@Example.COM",
    "@example.com",
    "postmaster",
    "a+b@c.test",
    "k:",
    "x",
    "X",
    "dup",
    "192.0.2.1",
];
const WORDS: [&str; 8] = [
    "v",
    "two words",
    "a#b",
    "tab\there",
    "1,2, 3",
    "#",
    "x  y",
    "z",
];
const BLANKS: [&str; 4] = [" ", "\t", "  ", " \t "];

/// One generated table file.
fn table(rng: &mut Rng) -> String {
    let mut text = String::new();
    for _ in 0..40 {
        let line = match rng.below(10) {
            0 => "# a comment".to_string(),
            1 => format!("{}# indented comment", rng.pick(&BLANKS)),
            2 => String::new(),
            3 => rng.pick(&BLANKS).to_string(),
            4 | 5 => format!("{}{}", rng.pick(&BLANKS), rng.pick(&WORDS)),
            6 => rng.pick(&KEYS).to_string(),
            _ => format!(
                "{}{}{}",
                rng.pick(&KEYS),
                rng.pick(&BLANKS),
                rng.pick(&WORDS)
            ),
        };
        let end = ["\n", "\n", "\n", " \n", "\r\n"][rng.below(5)];
        text.push_str(&line);
        text.push_str(end);
    }
    text
}

/// `postmap -q -`'s answers: key as asked → value, for the keys found.
fn postmap(
    path: &std::path::Path,
    config: &std::path::Path,
    keys: &[String],
) -> Vec<(String, String)> {
    let mut child = Command::new("postmap")
        .arg("-c")
        .arg(config)
        .arg("-q")
        .arg("-")
        .arg(format!("texthash:{}", path.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("postmap (Debian package postfix)");
    let mut stdin = child.stdin.take().unwrap();
    for key in keys {
        writeln!(stdin, "{key}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn a_table_file_reads_as_postmap_reads_it() {
    let dir = temp_dir("tables-text");
    std::fs::write(dir.join("main.cf"), "").unwrap();
    let mut keys: BTreeSet<String> = KEYS.iter().map(|k| k.to_string()).collect();
    keys.extend(KEYS.iter().map(|k| k.to_uppercase()));
    keys.extend(["absent".to_string(), "#".to_string(), "v".to_string()]);
    let keys: Vec<String> = keys.into_iter().collect();
    let files: Vec<(u64, String, std::path::PathBuf)> = (1..=40u64)
        .map(|seed| {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let text = table(&mut rng);
            let path = dir.join(format!("t{seed}"));
            std::fs::write(&path, &text).unwrap();
            (seed, text, path)
        })
        .collect();
    // `postmap -q -` takes about 1.5 s of wall time however small its
    // input (little CPU): the files are asked all at once.
    let answers: Vec<Vec<(String, String)>> = std::thread::scope(|s| {
        let asked: Vec<_> = files
            .iter()
            .map(|(_, _, path)| s.spawn(|| postmap(path, &dir, &keys)))
            .collect();
        asked.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut compared = 0;
    for ((seed, text, _), theirs) in files.iter().zip(&answers) {
        let (ours, _warnings) = sluice::tables::text::parse(text);
        for key in &keys {
            let want = theirs.iter().find(|(k, _)| k == key).map(|(_, v)| v);
            let got = ours.get(&key.to_ascii_lowercase());
            assert_eq!(got, want, "seed {seed}, key {key:?}, file:\n{text}");
            compared += 1;
        }
    }
    assert_eq!(compared, 40 * keys.len());
}
