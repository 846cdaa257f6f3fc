//! docs/errors.md documents exactly the codes of the store, the queue, the sandbox, the workspace,
//! the nodes, model calls, telemetry and `afe run` (the config's are checked by afe-config's own test).

fn documented(prefixes: &[&str]) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let doc = std::fs::read_to_string(path).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("### "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|code| prefixes.iter().any(|p| code.starts_with(p)))
        .map(str::to_string)
        .collect()
}

#[test]
fn errors_md_documents_exactly_the_store_queue_sandbox_workspace_and_node_codes() {
    let existing: Vec<String> = afe_store::StoreError::CODES
        .iter()
        .chain(afe_queue::QueueError::CODES.iter())
        .chain(afe_sandbox::SandboxError::CODES.iter())
        .chain(afe_workspace::WorkspaceError::CODES.iter())
        .chain(afe_nodes::NodeFailure::CODES.iter())
        .chain(afe_model::ModelError::CODES.iter())
        .chain(afe_telemetry::TelemetryError::CODES.iter())
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        documented(&[
            "AFE-STO-",
            "AFE-QUE-",
            "AFE-SBX-",
            "AFE-GIT-",
            "AFE-NODE-",
            "AFE-MOD-",
            "AFE-TEL-"
        ]),
        existing
    );
}

/// `afe run`'s codes live in the binary: every one its source says is documented, and no other.
#[test]
fn errors_md_documents_exactly_the_codes_afe_run_says() {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/run.rs"),
    )
    .unwrap();
    let mut said: Vec<String> = source
        .match_indices("\"AFE-RUN-")
        .map(|(at, _)| source[at + 1..at + 12].to_string())
        .collect();
    said.sort();
    said.dedup();
    assert_eq!(said.len(), 3, "{said:?}");
    assert_eq!(documented(&["AFE-RUN-"]), said);
}

/// The codes a source file of the binary says, each once, in order.
fn said_in(file: &str, prefix: &str) -> Vec<String> {
    let source =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .unwrap();
    let mut said: Vec<String> = source
        .match_indices(prefix)
        .map(|(at, _)| source[at..at + prefix.len() + 3].to_string())
        .filter(|code| code[prefix.len()..].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    said.sort();
    said.dedup();
    said
}

/// `afe serve`'s, `afe ticket`'s and the API's codes: each documented, and no other.
#[test]
fn errors_md_documents_exactly_the_codes_of_serve_the_client_and_the_api() {
    assert_eq!(
        documented(&["AFE-SRV-"]),
        said_in("src/serve.rs", "AFE-SRV-")
    );
    assert_eq!(
        documented(&["AFE-CLI-"]),
        said_in("src/client.rs", "AFE-CLI-")
    );
    let api: Vec<String> = afe_api::ApiCode::ALL
        .iter()
        .map(|c| c.code().to_string())
        .collect();
    assert_eq!(documented(&["AFE-API-"]), api);
}
