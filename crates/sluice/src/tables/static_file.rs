//! Static lookup tables: a `key value[, value…]` text file in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::Values;
use crate::log;
use crate::log::Logger;

/// A text file loaded into memory; reloaded when its modification time
/// changes (checked at most once a second) or on SIGHUP. A file with a bad
/// line is refused with the line number and the old contents stay in force.
pub struct StaticTable {
    name: String,
    path: PathBuf,
    map: RwLock<Arc<HashMap<String, Values>>>,
    mtime: Mutex<(Option<SystemTime>, Instant)>,
    logger: Logger,
}

impl StaticTable {
    pub fn load(name: &str, path: &Path, logger: Logger) -> Result<StaticTable, String> {
        let (map, mtime) = read_static(path)?;
        Ok(StaticTable {
            name: name.to_string(),
            path: path.to_path_buf(),
            map: RwLock::new(Arc::new(map)),
            mtime: Mutex::new((mtime, Instant::now())),
            logger,
        })
    }

    pub fn lookup(&self, key: &str) -> Option<Values> {
        self.reload_if_changed();
        let map = self.map.read().unwrap_or_else(|p| p.into_inner()).clone();
        map.get(&key.to_ascii_lowercase()).cloned()
    }

    fn reload_if_changed(&self) {
        let mut state = self.mtime.lock().unwrap_or_else(|p| p.into_inner());
        if state.1.elapsed() < Duration::from_secs(1) {
            return;
        }
        state.1 = Instant::now();
        let now = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if now != state.0 {
            state.0 = now;
            drop(state);
            self.reload();
        }
    }

    pub fn reload(&self) {
        match read_static(&self.path) {
            Ok((map, _)) => {
                let n = map.len();
                *self.map.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(map);
                log!(
                    self.logger,
                    "lookup",
                    "table {}: reloaded {} ({n} keys)",
                    self.name,
                    self.path.display()
                );
            }
            Err(err) => {
                log!(
                    self.logger,
                    "lookup",
                    "table {}: reload refused, old contents kept: {err}",
                    self.name
                );
            }
        }
    }
}

/// Parses a static table: `key value[, value…]`, `#` comments, blank lines.
pub fn parse_static(text: &str, origin: &str) -> Result<HashMap<String, Values>, String> {
    let mut map = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(2, char::is_whitespace);
        let key = parts.next().unwrap_or("").to_ascii_lowercase();
        let values: Vec<String> = parts
            .next()
            .unwrap_or("")
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        if values.is_empty() {
            return Err(format!(
                "{origin}: line {}: key {key:?} has no value",
                n + 1
            ));
        }
        map.insert(key, Arc::new(values));
    }
    Ok(map)
}

fn read_static(path: &Path) -> Result<(HashMap<String, Values>, Option<SystemTime>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Ok((parse_static(&text, &path.display().to_string())?, mtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_table_parses_and_reports_bad_lines() {
        let map = parse_static(
            "# users\nA@X.test  /m/a\nlist@x.test a@x.test, b@x.test c@x.test\n\n",
            "t",
        )
        .unwrap();
        assert_eq!(map["a@x.test"].as_slice(), ["/m/a"]);
        assert_eq!(map["list@x.test"].len(), 3);
        let err = parse_static("ok v\nlonely\n", "file.txt").unwrap_err();
        assert_eq!(err, "file.txt: line 2: key \"lonely\" has no value");
    }

    #[test]
    fn static_table_reloads_and_keeps_old_contents_on_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t");
        std::fs::write(&path, "a@x v1\n").unwrap();
        let t = StaticTable::load("t", &path, Logger::disabled()).unwrap();
        assert_eq!(t.lookup("A@x").unwrap().as_slice(), ["v1"]);
        std::fs::write(&path, "a@x v2\n").unwrap();
        t.reload();
        assert_eq!(t.lookup("a@x").unwrap().as_slice(), ["v2"]);
        std::fs::write(&path, "a@x v3\nbroken\n").unwrap();
        t.reload();
        assert_eq!(
            t.lookup("a@x").unwrap().as_slice(),
            ["v2"],
            "bad file refused"
        );
        assert!(t.lookup("b@x").is_none());
    }

    #[test]
    fn a_changed_file_is_picked_up_by_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t");
        std::fs::write(&path, "a@x old\n").unwrap();
        let t = StaticTable::load("t", &path, Logger::disabled()).unwrap();
        assert_eq!(t.lookup("a@x").unwrap().as_slice(), ["old"]);
        std::fs::write(&path, "a@x new\n").unwrap();
        // A different modification time, whatever the file system's resolution.
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.lookup("a@x").unwrap().as_slice() != ["new"] {
            assert!(Instant::now() < deadline, "not reloaded within 5 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
