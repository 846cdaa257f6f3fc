//! docs/errors.md documents exactly the codes the operator says (AFE-OPR-*), each under its own
//! heading.

use std::path::Path;

fn codes_in(text: &str) -> Vec<String> {
    let mut codes: Vec<String> = text
        .match_indices("AFE-OPR-")
        .map(|(at, _)| text[at..at + 11].to_string())
        .collect();
    codes.sort();
    codes.dedup();
    codes
}

#[test]
fn errors_md_documents_exactly_the_operators_codes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut said = String::new();
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            said.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let doc = std::fs::read_to_string(root.join("../../docs/errors.md")).unwrap();
    let documented: String = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .collect::<Vec<_>>()
        .join("\n");
    let said = codes_in(&said);
    assert_eq!(said.len(), 5, "{said:?}");
    assert_eq!(codes_in(&documented), said);
}
