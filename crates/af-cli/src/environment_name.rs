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

/// A command's manifest and environment: the manifest loaded (its problems reported), its folder,
/// and the environment id. `Err` is the exit status, the reason already printed.
pub fn load_environment(
    manifest_path: &Path,
    env: Option<&str>,
) -> Result<
    (
        af_manifest::Manifest,
        std::path::PathBuf,
        af_manifest::EnvironmentId,
    ),
    crate::exit::Exit,
> {
    let manifest = af_manifest::load(manifest_path).map_err(|invalid| {
        eprint!("{}", crate::problem_report::render(&invalid));
        crate::exit::Exit::InvalidManifest
    })?;
    let dir = manifest_path
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let name = environment_name(env, &dir).map_err(|why| {
        eprintln!("af: cannot tell which environment: {why}");
        crate::exit::Exit::Usage
    })?;
    let id = af_manifest::EnvironmentId::derive(&manifest.name, &name);
    Ok((manifest, dir, id))
}
