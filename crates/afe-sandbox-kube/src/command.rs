//! A request's command as `pods/exec` takes it (pure). The API's exec has no working directory
//! and no environment, so each command starts in a small shell that goes to the directory,
//! exports the variables and then becomes the command. Every value is a positional argument,
//! never part of the script, so no directory, name or value can change what runs.

use afe_sandbox::{ExecRequest, SandboxError, workspace};

const WRAPPER: &str = r#"cd "$1" || exit 126
n=$2; shift 2
while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n - 1)); done
exec "$@""#;

/// Where an attached command's process id is kept, so that it can be killed: the API's exec
/// cannot signal a command, and closing its stream does not end one that is not on a terminal.
pub fn pid_file(id: &str) -> String {
    format!("/tmp/afe-exec-{id}.pid")
}

/// [`wrap`], the command's process id written first to `pid_file` (the shell's own id, which
/// `exec` hands to the command).
pub fn wrap_keeping_pid(
    request: &ExecRequest,
    pid_file: &str,
) -> Result<Vec<String>, SandboxError> {
    let mut argv = wrap(request)?;
    argv[2] = format!("echo $$ > \"$1\" || exit 126\nshift\n{WRAPPER}");
    argv.insert(4, pid_file.to_string());
    Ok(argv)
}

/// The command that kills what `pid_file` names, and then forgets it.
pub fn kill(pid_file: &str) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        r#"kill -KILL "$(cat "$1")" 2>/dev/null; rm -f "$1""#.to_string(),
        "sh".to_string(),
        pid_file.to_string(),
    ]
}

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

    /// A command started with its pid kept is killed by the kill command, as a real shell runs
    /// both.
    #[test]
    fn a_kept_pid_is_the_commands_and_the_kill_ends_it() {
        let pid = std::env::temp_dir().join(format!("afe-exec-test-{}.pid", std::process::id()));
        let pid = pid.to_str().unwrap();
        let mut request = ExecRequest::new(["sleep", "600"]);
        request.workdir = Some("/workspace".into());
        let mut argv = wrap_keeping_pid(&request, pid).unwrap();
        // The workspace is not on this machine: start in the temp folder instead.
        argv[5] = std::env::temp_dir().display().to_string();
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::read_to_string(pid).map_or(true, |t| t.trim().is_empty()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the wrapper never kept its pid"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            std::fs::read_to_string(pid).unwrap().trim(),
            child.id().to_string(),
            "exec keeps the shell's id for the command"
        );
        let killed = std::process::Command::new("sh")
            .args(&kill(pid)[1..])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
        assert!(!std::path::Path::new(pid).exists());
    }
}
