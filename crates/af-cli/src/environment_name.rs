//! Which environment a command means: `--env`, or else the git branch the manifest's folder is on.

use std::path::Path;
use std::process::Command;

/// The environment name given, or the current git branch of `dir`. `Err` says why neither is
/// available, in words for the person.
pub fn environment_name(given: Option<&str>, dir: &Path) -> Result<String, String> {
    if let Some(name) = given {
        return Ok(name.to_string());
    }
    let output = Command::new("git")
        .arg("-C")
        .arg(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
        .args(["symbolic-ref", "--quiet", "--short", "HEAD"])
        .output()
        .map_err(|err| format!("git could not be run ({err}); pass --env NAME"))?;
    let branch = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if output.status.success() && !branch.is_empty() {
        Ok(branch)
    } else {
        Err("the manifest's folder is not on a git branch (no repository, or a detached HEAD); pass --env NAME".to_string())
    }
}
