//! A workload image for the node's own tests: Debian's static BusyBox (`busybox-static`, which
//! `.ci/install` installs) in an image FROM scratch, with a link for every applet it has — a shell,
//! `nc`, `wget`, `sleep` — built on the local daemon (no registry is reachable) and tagged with the
//! digest of its context, so an unchanged one is not built again.

use bollard::Docker;
use bollard::query_parameters::BuildImageOptions;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

const BUSYBOX: &str = "/bin/busybox";

fn context() -> Result<Vec<u8>, String> {
    let binary = std::fs::read(BUSYBOX).map_err(|e| {
        format!("{BUSYBOX}: {e}; the node's tests run Debian's static BusyBox: apt-get install busybox-static")
    })?;
    let listed = std::process::Command::new(BUSYBOX)
        .arg("--list-full")
        .output()
        .map_err(|e| format!("{BUSYBOX} --list-full: {e}"))?;
    let applets = String::from_utf8_lossy(&listed.stdout).into_owned();
    let mut archive = tar::Builder::new(Vec::new());
    let mut add = |path: &str, bytes: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        archive
            .append_data(&mut header, path, bytes)
            .map_err(|e| e.to_string())
    };
    add(
        "Dockerfile",
        b"FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin:/sbin:/usr/bin:/usr/sbin\nCMD [\"sh\"]\n",
        0o644,
    )?;
    add("rootfs/bin/busybox", &binary, 0o755)?;
    add("rootfs/tmp/.keep", b"", 0o644)?;
    for applet in applets
        .lines()
        .filter(|l| !l.is_empty() && *l != "bin/busybox")
    {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        header.set_mtime(0);
        archive
            .append_link(&mut header, format!("rootfs/{applet}"), "/bin/busybox")
            .map_err(|e| e.to_string())?;
    }
    archive.into_inner().map_err(|e| e.to_string())
}

/// The BusyBox image's reference, built when the daemon does not have it.
pub async fn busybox(docker: &Docker) -> Result<String, String> {
    let context = context()?;
    let digest: String = Sha256::digest(&context)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let tag = format!("af-testcluster/busybox:{digest}");
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let options = BuildImageOptions {
        t: Some(tag.clone()),
        rm: true,
        ..Default::default()
    };
    let mut progress = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = progress.next().await {
        let step = step.map_err(|e| format!("building {tag}: {e}"))?;
        if let Some(error) = step.error_detail.and_then(|d| d.message) {
            return Err(format!("building {tag}: {error}"));
        }
    }
    Ok(tag)
}
