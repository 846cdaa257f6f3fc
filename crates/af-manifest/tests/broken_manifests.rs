//! Every broken manifest under `tests/broken/` is refused with exactly the problems its header
//! names (`# expect: AF-MAN-0xx LINE:COLUMN`), and together they exercise every code that a
//! manifest's text can produce.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use af_manifest::ManifestCode;

fn broken_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the broken manifests in {}",
        dir.display()
    );
    files
}

/// The `# expect:` lines of a file, as written.
fn expectations(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn each_broken_manifest_reports_exactly_its_expected_problems() {
    for file in broken_files() {
        let source = fs::read_to_string(&file).unwrap();
        let expected = expectations(&source);
        assert!(
            !expected.is_empty(),
            "{} has no # expect: line",
            file.display()
        );
        let err = af_manifest::parse(&source, &file)
            .expect_err(&format!("{} should be refused", file.display()));
        let found: Vec<String> = err
            .problems
            .iter()
            .map(|p| {
                let at = p.location.expect("every text problem has a place");
                format!("{} {}:{}", p.code, at.line, at.column)
            })
            .collect();
        assert_eq!(found, expected, "{}:\n{:#?}", file.display(), err.problems);
        for problem in &err.problems {
            assert!(
                !problem.help.is_empty(),
                "{}: {problem} says nothing to do",
                file.display()
            );
            let at = problem.location.unwrap();
            assert!(
                at.offset <= source.len(),
                "{}: offset beyond the text",
                file.display()
            );
        }
    }
}

#[test]
fn the_broken_manifests_cover_every_text_code() {
    let mut covered = BTreeSet::new();
    for file in broken_files() {
        let source = fs::read_to_string(&file).unwrap();
        for line in expectations(&source) {
            covered.insert(line.split(' ').next().unwrap().to_string());
        }
    }
    // These two come from reading the disk, not from the text; load.rs tests them.
    let from_disk = [ManifestCode::Unreadable, ManifestCode::BuildContextMissing];
    for code in ManifestCode::all().filter(|c| !from_disk.contains(c)) {
        assert!(
            covered.contains(code.as_str()),
            "no broken manifest exercises {code}"
        );
    }
}
