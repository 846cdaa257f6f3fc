//! docs/afe-operator.md maps each operator sentence of seed 003 to the tests that prove it; every
//! test it names must exist, so the table cannot point at a test that was renamed or removed.

use std::path::Path;

#[test]
fn every_test_the_seed_table_names_exists() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = crate_dir.join("../..");
    let doc = std::fs::read_to_string(repo.join("docs/afe-operator.md")).unwrap();
    let table: Vec<&str> = doc
        .lines()
        .skip_while(|l| !l.starts_with("## Seed 003, sentence by sentence"))
        .take_while(|l| !l.starts_with("## Left for later"))
        .filter(|l| l.starts_with("| ") && !l.starts_with("| sentence") && !l.starts_with("|---"))
        .collect();
    assert!(table.len() >= 15, "{} rows", table.len());
    let mut named = 0;
    for row in table {
        let tests: Vec<&str> = row
            .split('`')
            .filter(|cell| cell.contains(".rs::"))
            .collect();
        assert!(!tests.is_empty(), "a row names no test: {row}");
        for test in tests {
            let (file, name) = test.split_once("::").unwrap();
            let path = if file.starts_with("crates/") {
                repo.join(file)
            } else {
                crate_dir.join(file)
            };
            let source = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (named in the seed table)", path.display()));
            assert!(
                source.contains(&format!("fn {name}(")),
                "{file} has no test {name} (named in the seed table)"
            );
            named += 1;
        }
    }
    assert!(named >= 25, "{named} tests named");
}
