//! The whole roster on the Kubernetes runtime, on the project's own cluster — Kubernetes 1.20's
//! control plane from Debian's source and the tests' node (crates/af-testcluster), which enforces
//! no NetworkPolicy, so every fixture runs with netlock — as CI runs it: `af-conformance run
//! --runtime kubernetes --cluster control-plane`, then the reader's `verdicts` on its records. A
//! process exiting 0 is not the claim; the reader's acceptance of the records is.
//!
//! Needs the control plane (`scripts/control-plane install`, which `.ci/install` runs), the Docker
//! daemon and the static engine binary; without them this fails, saying so. It is never skipped.

mod support;

#[test]
fn the_whole_roster_passes_on_the_projects_control_plane_and_the_reader_accepts_it() {
    let out = std::env::temp_dir().join(format!(
        "af-conformance-control-plane-{}.jsonl",
        std::process::id()
    ));
    let summary = support::run_and_read(
        &["--runtime", "kubernetes", "--cluster", "control-plane"],
        "kubernetes",
        &out,
    );
    // Skipped by name, and only what the Kubernetes runtime does not do: the local half of the
    // readiness difference, and the databases it refuses (AF-RUN-044).
    assert!(
        summary.ends_with(
            "4 skipped (readiness_any_health_status_counts_locally, external_database_reached_only_through_the_sidecar_and_recorded, database_branch_reached_from_its_services_and_nothing_else, database_branches_are_separate)"
        ),
        "{summary}"
    );
    let _ = std::fs::remove_file(&out);
}
