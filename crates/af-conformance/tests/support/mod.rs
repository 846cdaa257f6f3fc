//! A roster run as CI runs it: `af-conformance run` with `args`, then the reader's `verdicts` on
//! the records it wrote. A process exiting 0 is not the claim; the reader's acceptance is.

use std::path::Path;
use std::process::Command;

/// Runs the roster (`run ARGS --out OUT`), asserts it exited 0 and that the reader accepts
/// `OUT` for `runtime`; the reader's summary (`N passed, 0 failed, K skipped (...)`).
pub fn run_and_read(args: &[&str], runtime: &str, out: &Path) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_af-conformance"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let progress = String::from_utf8_lossy(&run.stderr);
    eprintln!("{progress}");
    assert_eq!(
        run.status.code(),
        Some(0),
        "the run: {progress}{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let check = Command::new(env!("CARGO_BIN_EXE_af-conformance"))
        .args(["verdicts"])
        .arg(out)
        .args(["--runtime", runtime])
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&check.stdout).trim().to_string();
    eprintln!("reader: {summary}");
    assert_eq!(check.status.code(), Some(0), "{summary}");
    assert!(summary.contains(" passed, 0 failed, "), "{summary}");
    summary
}
