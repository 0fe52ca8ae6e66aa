//! Tests that need the process to themselves. Every test is one module of
//! one binary, and libtest runs them as threads of one process; a test
//! that asserts on process-wide state (the `log` crate's one logger,
//! which the first daemon of a process installs) runs itself again in a
//! process of its own. Under nextest every test already has one.

use std::process::Command;

/// Set in the process that re-runs one test.
const ALONE: &str = "SLUICE_TEST_ALONE";

/// Runs test `name` of module `module` (`module_path!()`) in a process
/// of its own, unless this is one already; `true` when it ran there (and
/// passed), so the caller returns.
pub fn elsewhere(module: &str, name: &str) -> bool {
    let own_process =
        std::env::var("NEXTEST_EXECUTION_MODE").is_ok_and(|m| m == "process-per-test");
    if own_process || std::env::var_os(ALONE).is_some() {
        return false;
    }
    let path = module.split_once("::").map_or("", |(_, rest)| rest);
    let test = format!("{path}::{name}");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([&test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{test} alone: {said}");
    assert!(
        said.contains("1 passed"),
        "{test} did not run alone: {said}"
    );
    true
}
