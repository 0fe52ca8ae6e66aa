//! The file tables' loading, strictness and reloading.

use super::*;

const STRICT: Format = Format::Text { strict: true };

fn load(path: &Path) -> FileTable {
    FileTable::load("t", path, STRICT, Logger::disabled()).unwrap()
}

fn get(t: &FileTable, key: &str) -> Option<Values> {
    t.lookup(key).unwrap()
}

/// Writes `text` to a file in `dir` and loads it in `format`.
fn table_of(dir: &tempfile::TempDir, text: &str, format: Format) -> Result<FileTable, TableError> {
    let path = dir.path().join("file.txt");
    std::fs::write(&path, text).unwrap();
    FileTable::load("t", &path, format, Logger::disabled())
}

#[test]
fn static_table_parses_and_reports_bad_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "# users\nA@X.test  /m/a\nlist@x.test a@x.test, b@x.test c@x.test\n\n";
    let t = table_of(&tmp, text, STRICT).unwrap();
    assert_eq!(get(&t, "a@x.test").unwrap().as_slice(), ["/m/a"]);
    assert_eq!(get(&t, "list@x.test").unwrap().len(), 3);
    assert_eq!(
        get(&t, "list@x.test").unwrap().raw(),
        "a@x.test, b@x.test c@x.test",
        "Postfix's string, for users that take it whole"
    );
    let err = table_of(&tmp, "ok v\nlonely\n", STRICT).err().unwrap();
    assert!(matches!(&err, TableError::Refused { line: 2, .. }), "{err}");
    assert!(err.to_string().ends_with("file.txt: line 2: key \"lonely\": expected format: key whitespace value -- ignoring this line"), "{err}");
    let text_kind = table_of(&tmp, "ok v\nlonely\n", Format::Text { strict: false }).unwrap();
    assert_eq!(
        get(&text_kind, "ok").unwrap().raw(),
        "v",
        "a text table skips the line, as postmap"
    );
}

#[test]
fn static_table_reloads_and_keeps_old_contents_on_error() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    std::fs::write(&path, "a@x v1\n").unwrap();
    let t = load(&path);
    assert_eq!(get(&t, "A@x").unwrap().as_slice(), ["v1"]);
    std::fs::write(&path, "a@x v2\n").unwrap();
    t.reload();
    assert_eq!(get(&t, "a@x").unwrap().as_slice(), ["v2"]);
    std::fs::write(&path, "a@x v3\nbroken\n").unwrap();
    t.reload();
    assert_eq!(
        get(&t, "a@x").unwrap().as_slice(),
        ["v2"],
        "bad file refused"
    );
    assert!(get(&t, "b@x").is_none());
}

#[test]
fn comments_start_lines_and_duplicates_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = table_of(&tmp, "  # note\nfoo#bar@x.test v#1\n", STRICT).unwrap();
    assert_eq!(get(&t, "foo#bar@x.test").unwrap().as_slice(), ["v#1"]);
    let err = table_of(&tmp, "a@x v1\nA@x v2\n", STRICT).err().unwrap();
    assert!(matches!(err, TableError::Refused { line: 2, .. }), "{err}");
    assert!(
        err.to_string()
            .contains("line 2: key \"a@x\": duplicate entry"),
        "{err}"
    );
}

#[test]
fn pattern_and_cidr_files_answer_full_keys_as_given() {
    let tmp = tempfile::tempdir().unwrap();
    let t = table_of(
        &tmp,
        "/^(.*)@Example\\.com$/ $1\n",
        Format::Pattern(Flavour::Regexp),
    )
    .unwrap();
    assert!(!t.fixed());
    assert_eq!(
        get(&t, "Bob@example.com").unwrap().raw(),
        "Bob",
        "case kept, i flag default"
    );
    let c = table_of(&tmp, "192.0.2.0/24 REJECT go away\n", Format::Cidr).unwrap();
    assert_eq!(get(&c, "192.0.2.9").unwrap().raw(), "REJECT go away");
    assert!(get(&c, "198.51.100.1").is_none());
    assert!(c.contents().is_none());
}

#[test]
fn a_changed_file_is_picked_up_by_the_watcher() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    std::fs::write(&path, "a@x old\n").unwrap();
    let t = load(&path);
    assert_eq!(get(&t, "a@x").unwrap().as_slice(), ["old"]);
    std::fs::write(&path, "a@x new\n").unwrap();
    // A different modification time, whatever the file system's resolution.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(later)
        .unwrap();
    assert_eq!(
        get(&t, "a@x").unwrap().as_slice(),
        ["old"],
        "no I/O in lookups"
    );
    t.reload_if_changed();
    assert_eq!(
        get(&t, "a@x").unwrap().as_slice(),
        ["old"],
        "a file seen changing is not loaded yet: it may be half-written"
    );
    t.reload_if_changed();
    assert_eq!(get(&t, "a@x").unwrap().as_slice(), ["new"]);
}

#[test]
fn a_file_still_being_written_is_not_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t");
    std::fs::write(
        &path,
        "a@x 1
b@x 1
",
    )
    .unwrap();
    let t = load(&path);
    let touch = |secs: u64, text: &str| {
        std::fs::write(&path, text).unwrap();
        let at = std::time::SystemTime::now() + std::time::Duration::from_secs(secs);
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(at).unwrap();
    };
    // Each poll sees the writer still going: the first half only.
    touch(
        10, "a@x 2
",
    );
    t.reload_if_changed();
    touch(
        20, "a@x 2
",
    );
    t.reload_if_changed();
    assert!(
        get(&t, "b@x").is_some(),
        "the half-written file was not loaded"
    );
    touch(
        30,
        "a@x 2
b@x 2
",
    );
    t.reload_if_changed();
    t.reload_if_changed();
    assert_eq!(get(&t, "b@x").unwrap().as_slice(), ["2"]);
}

#[test]
fn a_pattern_past_its_backtracking_limit_is_try_again_and_logged() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("checks.pcre");
    std::fs::write(&path, "/^(a+)+\\1$/ cat\n").unwrap();
    let logger = Logger::start_as(Some(&tmp.path().join("log")), true).unwrap();
    let lines = logger.subscribe();
    let t = FileTable::load(
        "checks",
        &path,
        Format::Pattern(Flavour::Pcre),
        logger.clone(),
    )
    .unwrap();
    let key = format!("{}b", "a".repeat(30));
    assert!(
        matches!(t.lookup(&key), Err(LookupError::Unavailable(ref e)) if e.starts_with("table checks: "))
    );
    logger.flush();
    let events: Vec<Event<'static>> = lines
        .try_iter()
        .map(|l| {
            serde::Deserialize::deserialize(&serde_json::from_str::<serde_json::Value>(&l).unwrap())
                .unwrap()
        })
        .collect();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::LookupFailed { table, .. } if table == "checks")),
        "{events:?}"
    );
}

#[test]
fn keys_fold_beyond_ascii_as_postfix_folds_them() {
    let tmp = tempfile::tempdir().unwrap();
    let t = table_of(&tmp, "ÜSER@virt.test box\n", Format::Text { strict: false }).unwrap();
    assert_eq!(get(&t, "üser@VIRT.test").unwrap().raw(), "box");
    assert_eq!(get(&t, "ÜSER@virt.test").unwrap().raw(), "box");
}
