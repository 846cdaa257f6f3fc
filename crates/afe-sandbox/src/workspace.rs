//! The paths a sandbox has: one volume mounted at `/workspace`, the ticket's clone in
//! `/workspace/repo`, each scope's worktree in `/workspace/worktrees/<scope>`. Whatever a flow or a
//! model names as a path is confined here before any adapter sees it.

use crate::SandboxError;

/// Where the ticket's volume is mounted.
pub const ROOT: &str = "/workspace";
/// The ticket's clone: every command starts here unless it says otherwise.
pub const REPO: &str = "/workspace/repo";

/// The worktree of `scope`: a name of letters, digits, `-`, `_` and `.`, not `.` or `..`.
pub fn worktree(scope: &str) -> Result<String, SandboxError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if scope.is_empty() || scope == "." || scope == ".." || !scope.chars().all(allowed) {
        return Err(SandboxError::PathRefused {
            path: scope.to_string(),
            why: "a scope is a name of letters, digits, `-`, `_` and `.`".to_string(),
        });
    }
    Ok(format!("{ROOT}/worktrees/{scope}"))
}

/// `path` (absolute, or relative to the repository) as an absolute path inside the workspace,
/// with `.` and `..` resolved by text alone; refused when it would leave the workspace. The sandbox
/// itself may hold symlinks pointing out of it: an adapter that reads or writes a file resolves
/// it inside the sandbox, as the sandbox's unprivileged user, so a link leads nowhere that user
/// could not go anyway.
pub fn confine(path: &str) -> Result<String, SandboxError> {
    let refused = |why: &str| SandboxError::PathRefused {
        path: path.to_string(),
        why: why.to_string(),
    };
    if path.is_empty() {
        return Err(refused("it is empty"));
    }
    if path.contains('\0') {
        return Err(refused("it contains a NUL byte"));
    }
    let absolute = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{REPO}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in absolute.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(refused("it climbs above the root"));
                }
            }
            other => parts.push(other),
        }
    }
    let resolved = format!("/{}", parts.join("/"));
    if resolved == ROOT || resolved.starts_with(&format!("{ROOT}/")) {
        Ok(resolved)
    } else {
        Err(refused("it is outside /workspace"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_confined_to_the_workspace() {
        assert_eq!(
            confine("src/main.rs").unwrap(),
            "/workspace/repo/src/main.rs"
        );
        assert_eq!(confine("./a/../b").unwrap(), "/workspace/repo/b");
        assert_eq!(
            confine("/workspace/worktrees/x/f").unwrap(),
            "/workspace/worktrees/x/f"
        );
        assert_eq!(confine("../worktrees/x").unwrap(), "/workspace/worktrees/x");
        for outside in [
            "../../etc/passwd",
            "/etc/passwd",
            "/workspace/../etc",
            "/workspacex/a",
            "",
            "a\0b",
        ] {
            assert!(confine(outside).is_err(), "{outside:?} must be refused");
        }
    }

    #[test]
    fn scopes_are_names() {
        assert_eq!(worktree("fix-1").unwrap(), "/workspace/worktrees/fix-1");
        for bad in ["", ".", "..", "a/b", "a b", "../x"] {
            assert!(worktree(bad).is_err(), "{bad:?}");
        }
    }
}
