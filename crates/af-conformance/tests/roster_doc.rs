//! docs/conformance.md lists every behaviour of the roster (docs follow code).

#[test]
fn every_behaviour_is_in_docs_conformance_md() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/conformance.md"),
    )
    .unwrap();
    let missing: Vec<&str> = af_conformance::roster()
        .iter()
        .map(|b| b.name)
        .filter(|name| !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "add these to docs/conformance.md (af-conformance roster prints the table): {missing:?}"
    );
}
