//! The whole roster on the local runtime, against the real Docker daemon, as CI runs it: the
//! `af-conformance run` command, then the reader's `verdicts` command on the records it wrote. A
//! process exiting 0 is not the claim; the reader's acceptance of the records is.
//!
//! Needs the Docker daemon and the static engine binary (`scripts/build-engine`, which
//! `.ci/test` runs); without them this fails, saying so. It is never skipped.

mod support;

use std::process::Command;

#[test]
fn the_whole_roster_passes_on_the_local_runtime_and_the_reader_accepts_it() {
    let out =
        std::env::temp_dir().join(format!("af-conformance-local-{}.jsonl", std::process::id()));
    let summary = support::run_and_read(&["--runtime", "local"], "local", &out);
    let passed: usize = summary
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(passed >= 40, "{summary}");
    // The one skip is the Kubernetes half of the documented readiness difference, by name.
    assert!(
        summary.ends_with("1 skipped (readiness_health_status_must_be_2xx_or_3xx)"),
        "{summary}"
    );
    // The same records from another runtime's point of view are refused.
    let wrong_runtime = Command::new(env!("CARGO_BIN_EXE_af-conformance"))
        .args(["verdicts"])
        .arg(&out)
        .args(["--runtime", "kubernetes"])
        .output()
        .unwrap();
    assert_eq!(wrong_runtime.status.code(), Some(1));
    let _ = std::fs::remove_file(&out);
}
