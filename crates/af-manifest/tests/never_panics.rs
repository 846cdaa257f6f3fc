//! Arbitrary input never panics the parser: it yields a manifest or problems, and every problem
//! points inside the text.

use proptest::prelude::*;

/// YAML-shaped text built from the manifest's own vocabulary, so that generated documents reach
/// deep into the decoder rather than stopping at the first syntax error.
fn yamlish() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "name",
        "runtime",
        "provider",
        "services",
        "web",
        "image",
        "build",
        "port",
        "replicas",
        "resources",
        "cpu",
        "memory",
        "cron",
        "depends_on",
        "env",
        "egress",
        "allow",
        "capture",
        "mail",
        "database",
        "health_path",
        "migrate",
        "from_env",
        "url",
        "context",
        "x",
    ]);
    let scalars = prop::sample::select(vec![
        "local",
        "kubernetes",
        "0",
        "-1",
        "70000",
        "1.5",
        "true",
        "~",
        "\"\"",
        "250m",
        "0x10",
        "*.a.b",
        "[a, b]",
        "{a: 1}",
        "\"* * * * *\"",
        "/h",
        "&a x",
        "*a",
        "!!str 1",
        "|\n  x",
    ]);
    let line =
        (0usize..4, keys, prop::option::of(scalars)).prop_map(|(indent, key, value)| match value {
            Some(v) => format!("{}{key}: {v}", "  ".repeat(indent)),
            None => format!("{}{key}:", "  ".repeat(indent)),
        });
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.join("\n"))
}

fn check(source: &str) {
    if let Err(err) = af_manifest::parse(source, "fuzz.yaml") {
        assert!(!err.problems.is_empty());
        for problem in &err.problems {
            let at = problem.location.expect("text problems have a place");
            assert!(
                at.offset + at.len <= source.len(),
                "{problem} points past the text"
            );
            assert!(at.line >= 1 && at.column >= 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text_never_panics(source in any::<String>()) {
        check(&source);
    }

    #[test]
    fn manifest_shaped_text_never_panics(source in yamlish()) {
        check(&source);
    }
}

#[test]
fn alias_bombs_are_refused_not_expanded() {
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n";
    check(bomb);
}
