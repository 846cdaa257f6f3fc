//! Every broken config under examples/afe/broken fails with exactly the codes, files, lines,
//! columns and field paths its EXPECTED file lists; together they use every AFE-CFG code; a
//! config with several mistakes reports them all; the example config is valid.

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use afe_config::{CfgCode, Origin, Revision, load_folder};

/// A diagnostic as EXPECTED writes it: `CODE FILE:LINE:COLUMN PATH`, the file relative to the case.
fn line(case: &Path, d: &afe_config::Diagnostic) -> String {
    let origin = match &d.place.origin {
        Origin::File(path) if path == case => "(folder)".to_string(),
        Origin::File(path) => path
            .strip_prefix(case)
            .unwrap_or(path)
            .display()
            .to_string(),
        Origin::Object(name) => name.clone(),
    };
    let at = d
        .place
        .line_column
        .map(|(l, c)| format!(":{l}:{c}"))
        .unwrap_or_default();
    format!("{} {origin}{at} {}", d.code, d.place.path)
        .trim_end()
        .to_string()
}

/// What `afe validate` reports for a folder: the config's problems, then a pin that does not match.
fn problems(case: &Path) -> Vec<afe_config::Diagnostic> {
    match load_folder(case) {
        Ok(config) => Revision::of(&config).pin_problems(&config),
        Err(invalid) => invalid.diagnostics,
    }
}

#[test]
fn every_broken_config_fails_with_its_codes_at_their_places() {
    let root = support::repo().join("examples/afe/broken");
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    let mut seen = BTreeSet::new();
    for case in &cases {
        let expected = std::fs::read_to_string(case.join("EXPECTED")).unwrap();
        let expected: Vec<&str> = expected.lines().collect();
        let found = problems(case);
        let lines: Vec<String> = found.iter().map(|d| line(case, d)).collect();
        assert_eq!(lines, expected, "{}", case.display());
        for d in &found {
            assert!(!d.message.is_empty() && !d.help.is_empty(), "{d}");
            seen.insert(d.code);
        }
        // A case named after a code shows that code.
        let name = case.file_name().unwrap().to_str().unwrap();
        if let Some(number) = name.split('-').next().filter(|n| n.len() == 3) {
            let code = format!("AFE-CFG-{number}");
            assert!(
                found.iter().any(|d| d.code.as_str() == code),
                "{name} does not show {code}"
            );
        }
    }
    let missing: Vec<&str> = CfgCode::all()
        .filter(|c| !seen.contains(c))
        .map(|c| c.as_str())
        .collect();
    assert!(missing.is_empty(), "no broken example shows {missing:?}");
}

#[test]
fn a_config_with_several_mistakes_reports_every_one() {
    let case = support::repo().join("examples/afe/broken/several-mistakes");
    let codes: BTreeSet<CfgCode> = problems(&case).iter().map(|d| d.code).collect();
    assert_eq!(
        codes,
        BTreeSet::from([
            CfgCode::UnknownKey,
            CfgCode::InvalidName,
            CfgCode::GvisorRefused,
            CfgCode::UnknownNeed,
            CfgCode::InvalidField,
        ])
    );
}

#[test]
fn a_when_written_with_a_dash_is_told_the_underscore_spelling() {
    let case = support::repo().join("examples/afe/broken/014-when-variable");
    let found = problems(&case);
    assert!(
        found[0]
            .help
            .contains("write text_request for text-request"),
        "{}",
        found[0]
    );
    assert!(
        found[1].help.contains("add it to this node's needs"),
        "{}",
        found[1]
    );
}

#[test]
fn the_example_config_is_valid_and_uses_every_node_kind() {
    let config = load_folder(&support::example_config()).unwrap_or_else(|e| panic!("{e}"));
    let flow = &config.flows["fix-bug"].spec;
    assert!(flow.nodes.iter().any(|n| n.git.is_some()));
    assert!(flow.nodes.iter().any(|n| n.agent.is_some()));
    assert!(flow.nodes.iter().any(|n| n.deep.is_some()));
    assert!(flow.nodes.iter().any(|n| n.acp.is_some()));
    assert!(flow.nodes.iter().any(|n| n.exec.is_some()));
    assert!(config.runtime.is_some());
    assert!(config.prompts["coder"].contains("failing test first"));
}

#[test]
fn errors_md_documents_exactly_the_afe_cfg_codes() {
    let doc = std::fs::read_to_string(support::repo().join("docs/errors.md")).unwrap();
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|code| code.starts_with("AFE-CFG-"))
        .collect();
    let existing: Vec<&str> = CfgCode::all().map(|c| c.as_str()).collect();
    assert_eq!(documented, existing, "docs/errors.md vs CfgCode::all()");
}
