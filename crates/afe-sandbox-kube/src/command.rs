//! A request's command as `pods/exec` takes it (pure). The API's exec has no working directory
//! and no environment, so each command starts in a small shell that goes to the directory,
//! exports the variables and then becomes the command. Every value is a positional argument,
//! never part of the script, so no directory, name or value can change what runs.

use afe_sandbox::{ExecRequest, SandboxError, workspace};

const WRAPPER: &str = r#"cd "$1" || exit 126
n=$2; shift 2
while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n - 1)); done
exec "$@""#;

/// The argv that runs `request` in the sandbox: its directory confined to the workspace, its
/// variables' names checked.
pub fn wrap(request: &ExecRequest) -> Result<Vec<String>, SandboxError> {
    for (name, _) in &request.env {
        if !af_manifest::is_env_name(name) {
            return Err(SandboxError::VariableRefused {
                name: name.clone(),
                why: "not a variable name".to_string(),
            });
        }
    }
    let workdir = match &request.workdir {
        Some(dir) => workspace::confine(dir)?,
        None => workspace::REPO.to_string(),
    };
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        WRAPPER.to_string(),
        "sh".to_string(),
        workdir,
        request.env.len().to_string(),
    ];
    argv.extend(
        request
            .env
            .iter()
            .map(|(name, value)| format!("{name}={value}")),
    );
    argv.extend(request.argv.iter().cloned());
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_arguments_and_the_directory_is_confined() {
        let mut request = ExecRequest::new(["printf", "%s", "x"]);
        request.env = vec![("A".into(), "$(rm -rf /)".into())];
        request.workdir = Some("sub".into());
        let argv = wrap(&request).unwrap();
        assert_eq!(&argv[..2], ["sh", "-c"]);
        assert!(!argv[2].contains("rm -rf"));
        assert_eq!(
            &argv[3..],
            [
                "sh",
                "/workspace/repo/sub",
                "1",
                "A=$(rm -rf /)",
                "printf",
                "%s",
                "x"
            ]
        );
        request.workdir = Some("../../etc".into());
        assert!(wrap(&request).is_err());
        request.workdir = None;
        request.env = vec![("A B".into(), "x".into())];
        assert!(matches!(
            wrap(&request),
            Err(SandboxError::VariableRefused { .. })
        ));
    }

    /// The wrapper as a real shell runs it.
    #[test]
    fn the_wrapper_goes_to_the_directory_exports_and_becomes_the_command() {
        let dir = std::env::temp_dir();
        let out = std::process::Command::new("sh")
            .args(["-c", WRAPPER, "sh"])
            .arg(&dir)
            .args([
                "2",
                "A=one two",
                "B=$HOME",
                "sh",
                "-c",
                "pwd; printf '%s|%s' \"$A\" \"$B\"",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            std::path::Path::new(lines.next().unwrap())
                .canonicalize()
                .unwrap(),
            dir.canonicalize().unwrap()
        );
        assert_eq!(lines.next().unwrap(), "one two|$HOME");
    }
}
