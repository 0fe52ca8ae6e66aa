//! The example configuration in docs/CONFIG.md is a valid configuration:
//! it parses (unknown keys are errors) and passes validation.

#[test]
fn the_documented_configuration_loads() {
    let doc = include_str!("../../../../docs/CONFIG.md");
    let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + doc[start..].find("```").expect("its end");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, &doc[start..end]).unwrap();
    let config = sluice::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    config.validate().unwrap();
    assert_eq!(config.delivery.default_concurrency, 20);
}
