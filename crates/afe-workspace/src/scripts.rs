//! The commands the workspace runs inside the sandbox, as its user: POSIX shell and git, the
//! sandbox image's contract (docs/afe-sandbox.md). Each takes its values as positional arguments,
//! never spliced into the script, so no branch, file or node name can change what runs. Every git
//! call ignores the repository's hooks (the ticket could have written them) and commits as `afe`.

use afe_sandbox::workspace;

/// Where bundles are written in the sandbox before git reads them (seed 003: a bundle is a file in
/// the sandbox before `git fetch`); removed once fetched.
pub const BUNDLES: &str = "/workspace/.afe/bundles";

/// The exit status of the restore script when a bundle does not verify.
pub const BUNDLE_REFUSED: i64 = 65;

const GIT: &str = "g() { git -c core.hooksPath=/dev/null -c user.name=afe -c user.email=afe@afe.invalid \"$@\"; }";

/// The branch the ticket's work is on, in the sandbox and when pushed: `afe/<ticket>/work`. A
/// ticket id is unique (a UUID), so the branch is the ticket's alone; later scopes add their own
/// branches beside it, under `afe/<ticket>/`.
pub fn work_branch(ticket: &str) -> String {
    format!("afe/{ticket}/work")
}

/// Every branch of the ticket, as `git bundle create --branches` reads a pattern.
pub fn ticket_branches(ticket: &str) -> String {
    format!("afe/{ticket}/*")
}

fn argv(script: &str, args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("set -e\n{GIT}\n{script}"),
        "sh".to_string(),
    ];
    argv.extend(args);
    argv
}

/// The restore: a new repository in `/workspace/repo`, each bundle (`file`, the ref it carries)
/// verified and then fetched in order, `branch` checked out at `head`. An empty list of bundles
/// makes just the repository.
pub fn restore(branch: &str, head: &str, bundles: &[(String, String)]) -> Vec<String> {
    let script = format!(
        r#"cd {repo}
g init -q .
branch=$1; head=$2; shift 2
n=0
while [ $# -gt 0 ]; do
  file=$1; ref=$2; shift 2; n=$((n + 1))
  if ! g bundle verify -q "$file" >/dev/null 2>&1; then
    echo "bundle $n ($ref): $(g bundle verify "$file" 2>&1 | tail -n 1)" >&2
    exit {refused}
  fi
  # verify reads the header; the pack's own checksums are read as it is fetched.
  if ! g fetch -q --no-tags "$file" "$ref:refs/afe/restore/$n"; then
    echo "bundle $n ($ref): its objects could not be read" >&2
    exit {refused}
  fi
done
if [ -n "$head" ]; then g checkout -q -B "$branch" "$head"; fi
g for-each-ref --format='delete %(refname)' refs/afe/restore | g update-ref --stdin
rm -rf {bundles}"#,
        repo = workspace::REPO,
        refused = BUNDLE_REFUSED,
        bundles = BUNDLES,
    );
    let mut args = vec![branch.to_string(), head.to_string()];
    for (file, git_ref) in bundles {
        args.push(file.clone());
        args.push(git_ref.clone());
    }
    argv(&script, args)
}

/// The checkpoint after a node: everything in the repository committed (ignored files aside) on
/// `branch`, and — when its head moved from `previous` — `changed <head>` on the first line of
/// stdout and then the bundle of what is new since `previous` (all of it when there is none);
/// `unchanged <head>` alone otherwise. A branch moved back to an older commit gets a bundle of its
/// tip alone, since every object it needs is in earlier bundles.
pub fn checkpoint(branch: &str, previous: Option<&str>, node: &str) -> Vec<String> {
    let script = format!(
        r#"cd {repo}
branch=$1; previous=$2; node=$3
[ -d .git ] || g init -q .
g add -A
if ! g diff --cached --quiet 2>/dev/null; then
  g commit -q --no-verify -m "afe: the workspace after node $node"
fi
if ! head=$(g rev-parse -q --verify HEAD); then echo "unchanged"; exit 0; fi
g update-ref "refs/heads/$branch" "$head"
if [ "$head" = "$previous" ]; then echo "unchanged $head"; exit 0; fi
echo "changed $head"
if [ -z "$previous" ]; then
  g bundle create -q - "refs/heads/$branch"
elif ! g bundle create -q - "refs/heads/$branch" "^$previous" 2>/dev/null; then
  g bundle create -q - -1 "refs/heads/$branch"
fi"#,
        repo = workspace::REPO,
    );
    argv(
        &script,
        [
            branch.to_string(),
            previous.unwrap_or_default().to_string(),
            node.to_string(),
        ],
    )
}

/// A bundle of every branch of the ticket (`afe/<ticket>/*`), whole: what the worker pushes.
pub fn branches_bundle(ticket: &str) -> Vec<String> {
    let script = format!(
        r#"cd {repo}
g bundle create -q - --branches="$1""#,
        repo = workspace::REPO,
    );
    argv(&script, [ticket_branches(ticket)])
}

/// How a checkpoint's stdout reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointOutput {
    /// Nothing moved (or there is nothing yet to commit).
    Unchanged { head: Option<String> },
    /// The branch is at `head`; `bundle` carries what is new.
    Changed { head: String, bundle: Vec<u8> },
}

/// Reads the checkpoint script's stdout; `None` when it is not what the script prints.
pub fn read_checkpoint(stdout: &[u8]) -> Option<CheckpointOutput> {
    let end = stdout.iter().position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&stdout[..end]).ok()?;
    let rest = &stdout[end + 1..];
    match line.split_once(' ') {
        None if line == "unchanged" => Some(CheckpointOutput::Unchanged { head: None }),
        Some(("unchanged", head)) => Some(CheckpointOutput::Unchanged {
            head: Some(head.to_string()),
        }),
        Some(("changed", head)) if !rest.is_empty() => Some(CheckpointOutput::Changed {
            head: head.to_string(),
            bundle: rest.to_vec(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_arguments_never_part_of_the_script() {
        let evil = "x\"; rm -rf / #";
        for argv in [
            restore(evil, evil, &[(evil.to_string(), evil.to_string())]),
            checkpoint(evil, Some(evil), evil),
            branches_bundle(evil),
        ] {
            assert_eq!(&argv[..2], ["sh", "-c"]);
            assert!(!argv[2].contains(evil), "{}", argv[2]);
            assert!(argv[4..].iter().any(|a| a.contains(evil)));
        }
    }

    #[test]
    fn git_ignores_the_repositorys_hooks_everywhere() {
        for argv in [
            restore("b", "h", &[]),
            checkpoint("b", None, "n"),
            branches_bundle("t"),
        ] {
            assert!(argv[2].contains("core.hooksPath=/dev/null"));
            let calls_git_directly = argv[2]
                .lines()
                .skip(2)
                .any(|l| l.trim_start().starts_with("git "));
            assert!(!calls_git_directly, "{}", argv[2]);
        }
    }

    #[test]
    fn checkpoint_output_reads() {
        assert_eq!(
            read_checkpoint(b"unchanged abc\n"),
            Some(CheckpointOutput::Unchanged {
                head: Some("abc".into())
            })
        );
        assert_eq!(
            read_checkpoint(b"unchanged\n"),
            Some(CheckpointOutput::Unchanged { head: None })
        );
        assert_eq!(
            read_checkpoint(b"changed abc\n# v2 git bundle\n"),
            Some(CheckpointOutput::Changed {
                head: "abc".into(),
                bundle: b"# v2 git bundle\n".to_vec()
            })
        );
        assert_eq!(
            read_checkpoint(b"changed abc\n"),
            None,
            "a change has a bundle"
        );
        assert_eq!(read_checkpoint(b"noise"), None);
    }

    #[test]
    fn the_ticket_works_on_a_branch_of_its_own() {
        assert_eq!(work_branch("t-1"), "afe/t-1/work");
        assert_eq!(ticket_branches("t-1"), "afe/t-1/*");
    }
}
