//! A message's history for `sluice queue show ID`: the last lines of the
//! mail log that name its queue ID.
//!
//! The log is read as a stream, one line at a time through a fixed
//! buffer, keeping only the last [`KEEP`] matching lines: a log of any
//! size costs a few hundred KiB (reading it whole cost +307 MB RSS on a
//! large log, security review M8). A line longer than [`MAX_LINE`] is
//! shown cut to that length.
//!
//! Trust: the log is ours, but its lines quote what clients sent (names,
//! addresses); they are only matched and copied, never interpreted. A
//! queue ID matches as a whole word: `1A` does not match `1A2B`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Lines kept (the newest).
pub const KEEP: usize = 200;

/// Longest line shown; the rest of a longer one is skipped unread.
pub const MAX_LINE: usize = 8192;

/// The last [`KEEP`] lines of the log at `path` naming `qid`.
pub fn history(path: Option<&Path>, qid: &str) -> Vec<String> {
    match path.map(std::fs::File::open) {
        Some(Ok(file)) => matching(BufReader::with_capacity(64 * 1024, file), qid),
        _ => Vec::new(),
    }
}

/// The last [`KEEP`] lines of `log` naming `qid`.
pub fn matching(mut log: impl BufRead, qid: &str) -> Vec<String> {
    let mut kept = VecDeque::with_capacity(KEEP);
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        match read_line(&mut log, &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if names(&line, qid.as_bytes()) {
            if kept.len() == KEEP {
                kept.pop_front();
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            kept.push_back(String::from_utf8_lossy(text).into_owned());
        }
    }
    kept.into()
}

/// One line into `line`, at most [`MAX_LINE`] bytes of it; returns the
/// bytes consumed (0 at the end).
fn read_line(log: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let buf = log.fill_buf()?;
        if buf.is_empty() {
            return Ok(consumed);
        }
        let (take, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        log.consume(take);
        consumed += take;
        if done {
            return Ok(consumed);
        }
    }
}

/// `qid` occurs in `line` as a whole word (no letter or digit either side).
fn names(line: &[u8], qid: &[u8]) -> bool {
    memchr::memmem::find_iter(line, qid).any(|at| {
        let before = at.checked_sub(1).map(|i| line[i]);
        let after = line.get(at + qid.len()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_naming_the_id_as_a_word() {
        let mut log = String::new();
        for n in 0..500 {
            log.push_str(&format!("t sluice/qmgr: 1A2B: line {n}\n"));
            log.push_str(&format!("t sluice/qmgr: 1A2BC: other {n}\n"));
            log.push_str(&format!("t sluice/qmgr: F1A2B: other {n}\n"));
        }
        log.push_str("t sluice/smtp: 1A2B: last, no newline");
        let got = matching(log.as_bytes(), "1A2B");
        assert_eq!(got.len(), KEEP);
        assert_eq!(got[0], "t sluice/qmgr: 1A2B: line 301");
        assert_eq!(got[KEEP - 1], "t sluice/smtp: 1A2B: last, no newline");
        assert!(got.iter().all(|l| !l.contains("other")));
    }

    #[test]
    fn a_huge_line_is_cut_and_the_next_one_still_read() {
        // Through a small buffer, as a file of any size would be read.
        let mut log = format!("1A2B {}\n", "x".repeat(MAX_LINE * 8)).into_bytes();
        log.extend_from_slice(b"1A2B: next\n");
        let got = matching(BufReader::with_capacity(512, &log[..]), "1A2B");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), MAX_LINE);
        assert_eq!(got[1], "1A2B: next");
    }
}
