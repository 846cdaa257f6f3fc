//! The two proxies under test, started fresh (for each scenario) with equivalent allowlists: ours
//! (`af-proxy serve`: the static build when given, else a sibling of this binary) and squid (Debian's package); and, when asked
//! for, reference relays to read both against.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::load::ORIGIN_NAME;
use crate::world::{ORIGIN, UPSTREAM_DNS};

/// A started proxy process, stopped when dropped.
pub struct Proxy {
    child: Child,
    dir: PathBuf,
}

impl Proxy {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The most memory the process ever held (VmHWM), in bytes.
    pub fn peak_rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmHWM in /proc status")?;
        Ok(kib * 1024)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scratch(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("af-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // squid drops to its own user and must write here.
    Command::new("chmod").arg("0777").arg(&dir).status()?;
    Ok(dir)
}

/// A started proxy, once it accepts connections on `port` (killed, and its directory removed, if
/// it does not).
fn serving(child: Child, dir: PathBuf, port: u16) -> Result<Proxy> {
    let proxy = Proxy { child, dir };
    crate::wait_for_port(&format!("127.0.0.1:{port}"))?;
    Ok(proxy)
}

/// The sidecar under test: the binary given (`--sidecar` or `AF_PROXY_BINARY`, which is what
/// `scripts/build-engine` prints: the static build the engine image carries), or else the
/// `af-proxy` built next to this binary.
pub fn sidecar_binary(given: Option<PathBuf>) -> Result<PathBuf> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("af-proxy"),
    };
    if !path.exists() {
        bail!(
            "{} is missing: build it first (AF_PROXY_BINARY=$(scripts/build-engine), or cargo build --release -p af-proxy -p af-bench)",
            path.display()
        );
    }
    Ok(path)
}

/// How the sidecar under test is linked, for the first line of a benchmark: a dynamically linked
/// build's resident size also counts the shared libraries' pages it touches, which the static
/// build the engine image carries does not have.
pub fn linkage(path: &std::path::Path) -> Result<&'static str> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)?
        .take(64 * 1024)
        .read_to_end(&mut head)?;
    Ok(match has_interpreter(&head) {
        Some(false) => "static, as the engine image carries it",
        Some(true) => {
            "dynamically linked: its RSS counts shared libraries' pages the engine image's static build does not have (AF_PROXY_BINARY=$(scripts/build-engine))"
        }
        None => "not an ELF executable this benchmark can read",
    })
}

/// Whether a 64-bit little-endian ELF image names a program interpreter (`PT_INTERP`), i.e. is
/// dynamically linked; `None` when `head` (the file's first bytes) is not one or is too short.
fn has_interpreter(head: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if head.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(head.get(at..at + 2)?.try_into().ok()?));
    let phoff = usize::try_from(u64::from_le_bytes(head.get(0x20..0x28)?.try_into().ok()?)).ok()?;
    let (entry_size, entries) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    let mut interpreter = false;
    for index in 0..entries {
        let at = phoff + index * entry_size;
        let kind = u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?);
        interpreter |= kind == PT_INTERP;
    }
    Some(interpreter)
}

/// Our sidecar (`binary`) with the proxy listener (and, for the DNS benchmark, the DNS listener).
pub fn start_ours(
    binary: &std::path::Path,
    proxy_port: u16,
    dns_port: Option<u16>,
) -> Result<Proxy> {
    let dir = scratch("ours")?;
    let dns = match dns_port {
        Some(port) => format!(
            "  dns: 127.0.0.1:{port}\ndns:\n  answer_v4: 10.99.0.2\n  internal_suffixes: [bench.internal]\n  upstream: {UPSTREAM_DNS}:53\n"
        ),
        None => String::new(),
    };
    let config = format!(
        "environment: bench\npolicy:\n  allow: [{ORIGIN_NAME}, 203.0.113.0/24]\nlisten:\n  proxy: 127.0.0.1:{proxy_port}\n{dns}control: {{listen: 127.0.0.1:0, token: bench-token-0123456789}}\nlog: {{path: {log}}}\nresolver:\n  static_hosts: {{{ORIGIN_NAME}: [{ORIGIN}]}}\n",
        log = dir.join("decisions.jsonl").display()
    );
    let path = dir.join("sidecar.yaml");
    std::fs::write(&path, config)?;
    let child = Command::new(binary)
        .args(["serve", "--config"])
        .arg(&path)
        .env("RUST_LOG", "warn")
        // As the engine image starts it.
        .envs(af_sidecar_api::PROCESS_ENVIRONMENT.iter().copied())
        .stdin(Stdio::null())
        .spawn()
        .context("starting af-proxy")?;
    serving(child, dir, proxy_port)
}

/// squid with the same allowlist: the origin's name (resolved from a hosts file, as ours resolves
/// it from its configuration), CONNECT to 443 only, no caching, an access log like our decision log.
pub fn start_squid(port: u16) -> Result<Proxy> {
    let dir = scratch("squid")?;
    std::fs::write(dir.join("hosts"), format!("{ORIGIN} {ORIGIN_NAME}\n"))?;
    let config = format!(
        "http_port 127.0.0.1:{port}
visible_hostname af-bench
pid_filename {d}/squid.pid
cache_log {d}/cache.log
access_log stdio:{d}/access.log
coredump_dir {d}
hosts_file {d}/hosts
# Never ask a real resolver: names come from the hosts file.
dns_nameservers 127.0.0.1
cache deny all
cache_mem 0 MB
shutdown_lifetime 0 seconds
acl allowed dstdomain {ORIGIN_NAME}
acl SSL_ports port 443
acl CONNECT method CONNECT
http_access deny CONNECT !SSL_ports
http_access allow allowed
http_access deny all
",
        d = dir.display()
    );
    let path = dir.join("squid.conf");
    std::fs::write(&path, config)?;
    let child = Command::new("squid")
        .args(["-N", "-f"])
        .arg(&path)
        .stdin(Stdio::null())
        .spawn()
        .context("starting squid (apt-get install squid)")?;
    serving(child, dir, port)
}

/// A reference relay (`least_relay.rs`, `bare_hyper.rs`): this binary again, run as `subcommand`,
/// a process of its own so that its CPU is counted apart from the client's.
pub fn start_reference(subcommand: &str, port: u16) -> Result<Proxy> {
    let dir = scratch(subcommand)?;
    let child = Command::new(std::env::current_exe()?)
        .args([subcommand, "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting af-bench {subcommand}"))?;
    serving(child, dir, port)
}

/// dnsmasq answering the same way as our responder: outside names with one fixed address,
/// `bench.internal` forwarded to the same upstream, no cache (ours has none), no other sources.
pub fn start_dnsmasq(port: u16) -> Result<Proxy> {
    let dir = scratch("dnsmasq")?;
    let child = Command::new("dnsmasq")
        .args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--no-poll",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            &format!("--port={port}"),
            &format!("--server=/bench.internal/{UPSTREAM_DNS}"),
            "--address=/#/10.99.0.2",
            "--cache-size=0",
            "--dns-forward-max=1000",
            "--user=root",
            &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
        ])
        .stdin(Stdio::null())
        .spawn()
        .context("starting dnsmasq (apt-get install dnsmasq-base)")?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    Ok(Proxy { child, dir })
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::has_interpreter;

    /// An ELF header whose program headers (56 bytes each, right after it) have these types.
    fn elf_with(kinds: &[u32]) -> Vec<u8> {
        let mut image = vec![0u8; 64];
        image[..5].copy_from_slice(b"\x7fELF\x02");
        image[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        image[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        image[0x38..0x3a].copy_from_slice(&u16::try_from(kinds.len()).unwrap().to_le_bytes());
        for kind in kinds {
            let mut entry = vec![0u8; 56];
            entry[..4].copy_from_slice(&kind.to_le_bytes());
            image.extend(entry);
        }
        image
    }

    #[test]
    fn an_executable_is_dynamically_linked_when_it_names_an_interpreter() {
        const PT_LOAD: u32 = 1;
        const PT_INTERP: u32 = 3;
        assert_eq!(has_interpreter(&elf_with(&[PT_LOAD, PT_LOAD])), Some(false));
        assert_eq!(
            has_interpreter(&elf_with(&[PT_LOAD, PT_INTERP])),
            Some(true)
        );
    }

    #[test]
    fn what_is_not_a_whole_elf_header_is_not_judged() {
        assert_eq!(has_interpreter(b"#!/bin/sh\n"), None);
        let image = elf_with(&[3]);
        assert_eq!(has_interpreter(&image[..image.len() - 60]), None);
    }
}
