//! The man pages and shell completions the .deb ships, made by the real
//! binary as packaging/build-deb.sh makes them: `sluice generate man DIR`
//! and `sluice generate completions SHELL` (issue 35 item 10).

use std::process::Command;

fn sluice(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice");
    assert!(
        out.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn generate_man_writes_a_section_8_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice(&["generate", "man", &dir.path().to_string_lossy()]);
    let listed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    for name in [
        "sluice",
        "sluice-serve",
        "sluice-queue",
        "sluice-queue-list",
    ] {
        let path = dir.path().join(format!("{name}.8"));
        assert!(
            listed.contains(&path.to_string_lossy().into_owned()),
            "{name}.8 not listed: {listed:?}"
        );
        let page = std::fs::read_to_string(&path).unwrap();
        let th = page.lines().find(|l| l.starts_with(".TH ")).unwrap_or("");
        assert!(th.starts_with(&format!(".TH {name} 8 ")), "{name}: {th:?}");
        assert!(page.contains("\n.SH SYNOPSIS\n"), "{name}");
    }
    let list = std::fs::read_to_string(dir.path().join("sluice-queue-list.8")).unwrap();
    assert!(list.contains(r"\fB\-\-sender\fR"), "{list}");
    assert!(
        list.contains("Only mail from this envelope sender"),
        "{list}"
    );
    assert!(
        !dir.path().join("sluice-generate.8").exists(),
        "the hidden subcommand has no page"
    );
}

#[test]
fn generate_completions_prints_a_script_per_shell() {
    let bash = String::from_utf8(sluice(&["generate", "completions", "bash"]).stdout).unwrap();
    assert!(bash.contains("_sluice()"), "{bash}");
    assert!(bash.contains("complete -F _sluice"), "{bash}");
    assert!(bash.contains("queue"), "{bash}");
    assert!(!bash.contains("generate"), "hidden: {bash}");
    let zsh = String::from_utf8(sluice(&["generate", "completions", "zsh"]).stdout).unwrap();
    assert!(zsh.starts_with("#compdef sluice"), "{zsh}");
    let fish = String::from_utf8(sluice(&["generate", "completions", "fish"]).stdout).unwrap();
    assert!(fish.contains("complete -c sluice"), "{fish}");
    let refused = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["generate", "completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "usage error");
}
