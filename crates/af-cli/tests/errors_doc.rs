//! docs/errors.md has an entry for every code the code can produce, and none for a code that does
//! not exist: docs follow code.

use std::collections::BTreeSet;
use std::path::Path;

use af_egress::refusal::AnswerCode;
use af_manifest::ManifestCode;
use af_runtime::RunCode;

#[test]
fn errors_md_documents_exactly_the_existing_codes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let documented: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter_map(|l| l.split_whitespace().next())
        // afe's codes (AFE-*) are checked by afe's own tests.
        .filter(|code| code.starts_with("AF-"))
        .map(str::to_string)
        .collect();
    let every: Vec<String> = ManifestCode::all()
        .map(|c| c.as_str().to_string())
        .chain(RunCode::all().map(|c| c.as_str().to_string()))
        // The sidecar's own HTTP answers to workloads: codes, but not exits of a command.
        .chain(AnswerCode::all().map(|c| c.as_str().to_string()))
        .collect();
    let existing: BTreeSet<String> = every.iter().cloned().collect();
    assert_eq!(
        existing.len(),
        every.len(),
        "a code is written on two variants: {every:?}"
    );
    assert_eq!(
        documented, existing,
        "docs/errors.md headings vs the codes in the code"
    );
    // Every runtime code is on its category's row, and on no other.
    for code in RunCode::all() {
        let rows: Vec<&str> = doc
            .lines()
            .filter(|l| l.starts_with("| `") && l.contains(code.as_str()))
            .collect();
        let expected = format!("| `{}` |", code.category().as_str());
        assert!(
            rows.len() == 1 && rows[0].starts_with(&expected),
            "{code} must be on the {expected} row of the category table alone: {rows:?}"
        );
    }
    // Every runtime code has its exit status in the table: its own number, or 4 for the codes
    // without one (listed on that row).
    for code in RunCode::all() {
        let row = match code.exit_status() {
            4 => "| 4 | a runtime error without a number of its own (".to_string(),
            status => format!("| {status} | {}:", code.as_str()),
        };
        assert!(doc.contains(&row), "the exit status table lacks {row}");
        if code.exit_status() == 4 {
            let line = doc
                .lines()
                .find(|l| l.starts_with("| 4 |"))
                .unwrap_or_default();
            assert!(
                line.contains(code.as_str()),
                "the status-4 row must name {code}"
            );
        }
    }
}
