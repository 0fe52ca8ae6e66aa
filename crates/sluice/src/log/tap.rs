//! Taps on the mail log: whoever subscribes ([`super::Logger::subscribe`])
//! gets every line as the writer writes it, instead of re-reading the
//! file. The tests use it for the servers they run in their own process.
//!
//! Trusts nothing a subscriber does: one that went away is forgotten.
//! Costs nothing while nobody subscribed: one `is_empty` check per write.
//!
//! Invariant: a subscriber gets exactly the bytes written to the file after
//! it subscribed, one line at a time without its line end, and each line
//! only after the flush that wrote it to the file (so whatever a
//! subscriber has, the file has too).

use std::io::{BufWriter, Write};
use std::sync::mpsc;

/// Where the writer's lines go: the file (or stderr) through a large
/// buffer, and a copy to each subscriber.
pub(super) struct Out {
    file: BufWriter<Box<dyn Write + Send>>,
    /// The subscribers, until they hang up.
    taps: Vec<mpsc::Sender<String>>,
    /// Bytes written since the last flush, for the subscribers (empty
    /// while there are none).
    pending: Vec<u8>,
}

impl Out {
    pub(super) fn new(file: Box<dyn Write + Send>) -> Out {
        Out {
            file: BufWriter::with_capacity(256 << 10, file),
            taps: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Writes to `file` from now on (a reopened log); what the old one
    /// buffered is flushed (and handed to the subscribers) first.
    pub(super) fn replace(&mut self, file: Box<dyn Write + Send>) {
        let _ = self.flush();
        self.file = BufWriter::with_capacity(256 << 10, file);
    }

    /// Adds a subscriber: it gets the lines written from now on.
    pub(super) fn subscribe(&mut self, tap: mpsc::Sender<String>) {
        self.taps.push(tap);
    }

    /// Hands the whole lines written so far to the subscribers (a line
    /// not yet ended waits for its end).
    fn deliver(&mut self) {
        let Some(end) = memchr::memrchr(b'\n', &self.pending) else {
            return;
        };
        let rest = self.pending.split_off(end + 1);
        let whole = std::mem::replace(&mut self.pending, rest);
        for line in whole[..end].split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            self.taps.retain(|tap| tap.send(line.to_string()).is_ok());
        }
        if self.taps.is_empty() {
            self.pending.clear();
        }
    }
}

/// The writer is gone: the file gets the rest before the subscribers
/// hang up, so a subscriber that sees the end can read the whole file.
impl Drop for Out {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        if !self.taps.is_empty() {
            self.pending.extend_from_slice(&buf[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let flushed = self.file.flush();
        self.deliver();
        flushed
    }
}

#[cfg(test)]
mod tests {
    use crate::log::{Event, Logger};

    /// A subscriber gets the lines written after it subscribed, exactly
    /// as in the file, by the time a flush returns.
    #[test]
    fn a_subscriber_gets_each_line_as_the_file_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("maillog");
        let logger = Logger::start_as(Some(&path), true).unwrap();
        logger.emit(&Event::Flush { messages: 0 });
        logger.flush();
        let lines = logger.subscribe();
        for i in 0..100 {
            logger.emit(&Event::Flush { messages: i });
        }
        logger.flush();
        let got: Vec<String> = lines.try_iter().collect();
        let text = std::fs::read_to_string(&path).unwrap();
        let after: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(got.len(), 100);
        assert_eq!(got, after);
        let last: serde_json::Value = serde_json::from_str(&got[99]).unwrap();
        assert_eq!(last["event"], "flush");
        assert_eq!(last["messages"], 99);
        // A subscriber that hung up is forgotten; the log goes on.
        drop(lines);
        logger.emit(&Event::Flush { messages: 100 });
        logger.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 102);
        assert!(Logger::disabled().subscribe().try_recv().is_err());
    }
}
