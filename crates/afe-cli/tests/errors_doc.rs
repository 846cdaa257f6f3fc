//! docs/errors.md documents exactly the store's and the queue's codes (the config's are checked by
//! afe-config's own test).

#[test]
fn errors_md_documents_exactly_the_store_and_queue_codes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|code| code.starts_with("AFE-STO-") || code.starts_with("AFE-QUE-"))
        .collect();
    let existing: Vec<&str> = afe_store::StoreError::CODES
        .iter()
        .chain(afe_queue::QueueError::CODES.iter())
        .copied()
        .collect();
    assert_eq!(documented, existing);
}
