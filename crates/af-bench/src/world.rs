//! The benchmark's network: an "origin" network namespace at TEST-NET addresses, joined to this
//! one by a veth pair, so direct requests, squid and the sidecar all cross the same link. Nothing
//! leaves the machine. Removed when dropped.
//!
//! While it exists, this namespace reuses ports in TIME_WAIT for new outgoing connections
//! (`net.ipv4.tcp_tw_reuse = 1`, the usual setting on a proxy host; restored on drop). Every
//! new-connection scenario opens tens of thousands of connections to one origin address in a few
//! seconds, and whoever closes first keeps each port for a minute: without reuse the 28k
//! ephemeral ports run out part-way through a run, and the scenarios measured after that — in
//! whichever column — measure the kernel's port search instead of a proxy.

use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

/// The origin's HTTP and fake-TLS address.
pub const ORIGIN: &str = "203.0.113.10";
/// The upstream DNS server the DNS benchmark forwards to.
pub const UPSTREAM_DNS: &str = "203.0.113.53";
/// This namespace's end of the link.
const HOST_SIDE: &str = "203.0.113.1";

pub struct World {
    /// The namespace and this side's link, once made (so a failed start removes only what is).
    namespace: Option<String>,
    host_link: Option<String>,
    origin: Option<Child>,
    /// `tcp_tw_reuse` as it was before, to put back.
    tw_reuse_before: Option<String>,
    /// The congestion control as it was before, to put back, when the run chose another.
    congestion_before: Option<String>,
}

const TW_REUSE: &str = "/proc/sys/net/ipv4/tcp_tw_reuse";
const CONGESTION: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

/// The TCP congestion control new connections in this namespace get.
pub fn congestion_control() -> Result<String> {
    Ok(std::fs::read_to_string(CONGESTION)
        .with_context(|| format!("reading {CONGESTION}"))?
        .trim()
        .to_string())
}

fn run(args: &[&str]) -> Result<()> {
    let status = Command::new(args[0])
        .args(&args[1..])
        .status()
        .with_context(|| format!("running {args:?}"))?;
    if !status.success() {
        bail!("{args:?} failed ({status})");
    }
    Ok(())
}

impl World {
    /// Creates the namespace and link, and starts the origin servers inside it (this binary's
    /// `origin` subcommand). With `congestion`, connections in both namespaces use that TCP
    /// congestion control until the world is dropped; otherwise the origin's namespace gets the
    /// machine's, as the client and the proxies have it.
    pub fn create(congestion: Option<&str>) -> Result<World> {
        let id = std::process::id();
        let namespace = format!("afbench{id}");
        let host_link = format!("afb{id}h");
        let origin_link = format!("afb{id}o");
        let mut world = World {
            namespace: None,
            host_link: None,
            origin: None,
            tw_reuse_before: None,
            congestion_before: None,
        };
        let machine_congestion = congestion_control()?;
        let congestion = congestion.unwrap_or(&machine_congestion).to_string();
        if congestion != machine_congestion {
            std::fs::write(CONGESTION, &congestion).with_context(|| {
                format!(
                    "setting TCP congestion control {congestion}: is it in /proc/sys/net/ipv4/tcp_available_congestion_control?"
                )
            })?;
            world.congestion_before = Some(machine_congestion);
        }
        run(&["ip", "netns", "add", &namespace])
            .context("creating a network namespace needs root")?;
        world.namespace = Some(namespace.clone());
        let before =
            std::fs::read_to_string(TW_REUSE).with_context(|| format!("reading {TW_REUSE}"))?;
        std::fs::write(TW_REUSE, "1").with_context(|| format!("writing {TW_REUSE}"))?;
        world.tw_reuse_before = Some(before.trim().to_string());
        run(&[
            "ip",
            "link",
            "add",
            &host_link,
            "type",
            "veth",
            "peer",
            "name",
            &origin_link,
        ])?;
        world.host_link = Some(host_link.clone());
        run(&["ip", "link", "set", &origin_link, "netns", &namespace])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{HOST_SIDE}/24"),
            "dev",
            &host_link,
        ])?;
        run(&["ip", "link", "set", &host_link, "up"])?;
        let inside = |args: &[&str]| -> Result<()> {
            let mut full = vec!["ip", "netns", "exec", namespace.as_str()];
            full.extend_from_slice(args);
            run(&full)
        };
        inside(&["ip", "link", "set", "lo", "up"])?;
        // A new namespace may start from the kernel's default instead of the machine's setting.
        inside(&[
            "sysctl",
            "-qw",
            &format!("net.ipv4.tcp_congestion_control={congestion}"),
        ])?;
        inside(&[
            "ip",
            "addr",
            "add",
            &format!("{ORIGIN}/24"),
            "dev",
            &origin_link,
        ])?;
        inside(&[
            "ip",
            "addr",
            "add",
            &format!("{UPSTREAM_DNS}/24"),
            "dev",
            &origin_link,
        ])?;
        inside(&["ip", "link", "set", &origin_link, "up"])?;
        let exe = std::env::current_exe()?;
        let origin = Command::new("ip")
            .args(["netns", "exec", &namespace])
            .arg(exe)
            .arg("origin")
            .stdin(Stdio::null())
            .spawn()
            .context("starting the origin")?;
        world.origin = Some(origin);
        crate::wait_for_port(&format!("{ORIGIN}:80"))?;
        crate::wait_for_port(&format!("{ORIGIN}:443"))?;
        Ok(world)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(before) = self.tw_reuse_before.take() {
            let _ = std::fs::write(TW_REUSE, before);
        }
        if let Some(before) = self.congestion_before.take() {
            let _ = std::fs::write(CONGESTION, before);
        }
        if let Some(mut origin) = self.origin.take() {
            let _ = origin.kill();
            let _ = origin.wait();
        }
        if let Some(link) = self.host_link.take() {
            let _ = Command::new("ip").args(["link", "del", &link]).status();
        }
        if let Some(namespace) = self.namespace.take() {
            let _ = Command::new("ip")
                .args(["netns", "del", &namespace])
                .status();
        }
    }
}
