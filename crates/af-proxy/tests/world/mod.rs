//! A small world of network namespaces for the guard's kernel tests, all of it made by the test:
//!
//! - `wl`, the workload: 10.99.0.5 and fd99::5 on a veth, default routes to `net`;
//! - `net`, everything outside, on the other end of the veth and on its loopback: a "public" host
//!   203.0.113.10 (TCP 80/443 and UDP 443 echo, ICMP), a "public" resolver 198.51.100.53 (DNS over
//!   UDP and TCP 53, DoT 853, DoH 443), the metadata endpoint 169.254.169.254 and fd00:ec2::254, an
//!   operator-network host 10.20.0.5, an "API server" 192.0.2.100:6443, a global IPv6 host
//!   2001:db8::10, and the environment's sidecar 10.99.0.2 (proxy 3128, DNS 53).
//!
//! Every listener counts what reaches it, so a route is judged where it would land, and a positive
//! control can show each one answers. The namespaces are removed when the world is dropped.

#![allow(dead_code, reason = "each test uses its own part of the world")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const WORKLOAD_UID: u32 = 1000;
pub const PROXY_UID: u32 = 1337;

pub struct World {
    pub wl: String,
    pub net: String,
    counters: Arc<BTreeMap<&'static str, AtomicUsize>>,
}

/// Every listener, by the name its counter carries.
const LISTENERS: [(&str, &str, &str); 14] = [
    ("public-tcp", "tcp", "203.0.113.10:443"),
    ("public-http", "tcp", "203.0.113.10:80"),
    ("quic", "udp", "203.0.113.10:443"),
    ("resolver-udp", "dns", "198.51.100.53:53"),
    ("resolver-tcp", "tcp", "198.51.100.53:53"),
    ("dot", "tcp", "198.51.100.53:853"),
    ("doh", "tcp", "198.51.100.53:443"),
    ("metadata", "tcp", "169.254.169.254:80"),
    ("metadata-v6", "tcp", "[fd00:ec2::254]:80"),
    ("private", "tcp", "10.20.0.5:80"),
    ("api", "tcp", "192.0.2.100:6443"),
    ("global-v6", "tcp", "[2001:db8::10]:443"),
    ("sidecar-proxy", "tcp", "10.99.0.2:3128"),
    ("sidecar-dns", "dns", "10.99.0.2:53"),
];

fn sh(args: &[&str]) -> Output {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn must(args: &[&str]) {
    let output = sh(args);
    assert!(
        output.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl World {
    /// Builds the namespaces and starts every listener. These are containment tests: without root
    /// they fail, saying so; they never skip.
    pub fn new(tag: &str) -> World {
        let id = format!("{}{}", std::process::id() % 100_000, tag);
        let (wl, net) = (format!("afwl{id}"), format!("afnet{id}"));
        let probe = sh(&["ip", "netns", "add", &wl]);
        assert!(
            probe.status.success(),
            "cannot create a network namespace ({}): the guard's kernel tests need root and iproute2; run them as root, as CI does",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
        must(&["ip", "netns", "add", &net]);
        // No duplicate address detection: the link is usable the moment it is up, instead of a
        // second or two later.
        for ns in [&wl, &net] {
            for key in [
                "net.ipv6.conf.default.accept_dad=0",
                "net.ipv6.conf.all.accept_dad=0",
            ] {
                must(&["ip", "netns", "exec", ns, "sysctl", "-q", "-w", key]);
            }
        }
        let (wl_if, net_if) = (format!("w{id}"), format!("n{id}"));
        must(&[
            "ip", "link", "add", &wl_if, "netns", &wl, "type", "veth", "peer", "name", &net_if,
            "netns", &net,
        ]);
        let in_ns = |ns: &str, args: &[&str]| {
            let mut full = vec!["ip", "netns", "exec", ns];
            full.extend_from_slice(args);
            must(&full);
        };
        for ns in [&wl, &net] {
            in_ns(ns, &["ip", "link", "set", "lo", "up"]);
        }
        in_ns(&wl, &["ip", "addr", "add", "10.99.0.5/24", "dev", &wl_if]);
        in_ns(
            &wl,
            &[
                "ip",
                "-6",
                "addr",
                "add",
                "fd99::5/64",
                "dev",
                &wl_if,
                "nodad",
            ],
        );
        in_ns(&wl, &["ip", "link", "set", &wl_if, "up"]);
        in_ns(&wl, &["ip", "route", "add", "default", "via", "10.99.0.1"]);
        in_ns(
            &wl,
            &["ip", "-6", "route", "add", "default", "via", "fd99::1"],
        );
        // Unprivileged ping sockets for every group, so ICMP can be tried as any uid.
        in_ns(
            &wl,
            &[
                "sysctl",
                "-q",
                "-w",
                "net.ipv4.ping_group_range=0 2147483647",
            ],
        );
        in_ns(&net, &["ip", "addr", "add", "10.99.0.1/24", "dev", &net_if]);
        in_ns(
            &net,
            &[
                "ip",
                "-6",
                "addr",
                "add",
                "fd99::1/64",
                "dev",
                &net_if,
                "nodad",
            ],
        );
        in_ns(&net, &["ip", "link", "set", &net_if, "up"]);
        for address in [
            "203.0.113.10/32",
            "198.51.100.53/32",
            "169.254.169.254/32",
            "10.20.0.5/32",
            "192.0.2.100/32",
            "10.99.0.2/32",
        ] {
            in_ns(&net, &["ip", "addr", "add", address, "dev", "lo"]);
        }
        for address in ["fd00:ec2::254/128", "2001:db8::10/128"] {
            in_ns(
                &net,
                &["ip", "-6", "addr", "add", address, "dev", "lo", "nodad"],
            );
        }
        // The first packet to a fresh neighbour can be lost while the link settles; wait until
        // both families answer (a refused connection to the router is an answer) so that the
        // tests' one-second attempts are not racing the link.
        let settle = "import socket, time\nfor family, address in ((socket.AF_INET, ('10.99.0.1', 9)), (socket.AF_INET6, ('fd99::1', 9))):\n  for _ in range(100):\n    s = socket.socket(family); s.settimeout(0.2)\n    try:\n      s.connect(address)\n      break\n    except ConnectionRefusedError:\n      break\n    except OSError:\n      time.sleep(0.05)\n  else:\n    raise SystemExit(f'{address} never answered')\n";
        in_ns(&wl, &["python3", "-c", settle]);
        let counters: Arc<BTreeMap<&'static str, AtomicUsize>> = Arc::new(
            LISTENERS
                .iter()
                .map(|(name, _, _)| (*name, AtomicUsize::new(0)))
                .collect(),
        );
        start_listeners(&net, &LISTENERS, counters.clone());
        start_sandbox_proxy_stand_in(&wl);
        World { wl, net, counters }
    }

    /// How many times something reached this listener.
    pub fn reached(&self, listener: &str) -> usize {
        self.counters[listener].load(Ordering::SeqCst)
    }

    pub fn reached_all(&self) -> BTreeMap<&'static str, usize> {
        self.counters
            .iter()
            .map(|(name, c)| (*name, c.load(Ordering::SeqCst)))
            .collect()
    }

    /// Runs a command in the workload namespace as root.
    pub fn in_workload(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", self.wl.as_str()];
        full.extend_from_slice(args);
        sh(&full)
    }

    /// Runs a command in the outside namespace as root.
    pub fn outside(&self, args: &[&str]) {
        let mut full = vec!["ip", "netns", "exec", self.net.as_str()];
        full.extend_from_slice(args);
        must(&full);
    }

    /// Runs a command in the workload namespace as `uid`, with no capabilities at all.
    pub fn as_uid(&self, uid: u32, args: &[&str]) -> Output {
        let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={uid}"));
        let mut full = vec![
            "setpriv",
            reuid.as_str(),
            regid.as_str(),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ];
        full.extend_from_slice(args);
        self.in_workload(&full)
    }

    /// `args` in the workload namespace as `uid`, not yet started.
    fn command_as_uid(&self, uid: u32, args: &[&str]) -> Command {
        let (reuid, regid) = (format!("--reuid={uid}"), format!("--regid={uid}"));
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.wl, "setpriv", &reuid, &regid])
            .args(["--clear-groups", "--"])
            .args(args);
        command
    }

    /// Starts `args` in the workload namespace as `uid`, its standard output piped: a check the
    /// test changes the platform under while it runs, then waits for.
    pub fn spawn_as_uid(&self, uid: u32, args: &[&str]) -> std::process::Child {
        self.command_as_uid(uid, args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts a long-running command in the workload namespace as `uid`; stopped when dropped.
    pub fn in_workload_background(&self, uid: u32, args: &[&str]) -> Background {
        Background(self.command_as_uid(uid, args).spawn().unwrap())
    }

    /// Applies rules in the workload namespace, as a platform's network policy would (the workload
    /// did not write them; they are not netlock's).
    pub fn workload_policy(&self, v4: &str, v6: &str) {
        for (command, rules) in [("iptables-restore", v4), ("ip6tables-restore", v6)] {
            let mut child = Command::new("ip")
                .args(["netns", "exec", &self.wl, command])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(rules.as_bytes())
                .unwrap();
            assert!(
                child.wait().unwrap().success(),
                "{command} failed for {rules}"
            );
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.wl]);
        let _ = sh(&["ip", "netns", "del", &self.net]);
    }
}

/// A process running for the length of a test.
pub struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The af-proxy binary under test.
pub fn af_proxy() -> &'static str {
    env!("CARGO_BIN_EXE_af-proxy")
}

/// Where the probe finds its positive control in this world: a listener on the workload's own
/// loopback, where an afe sandbox's proxy sits (netlock lets loopback through), so that it answers
/// under every lock the tests apply.
pub const SANDBOX_PROXY: &str = "127.0.0.1:3129";

/// `af-proxy probe` with its positive control at [`SANDBOX_PROXY`] and every standard route at
/// this world's hosts.
pub fn probe_args() -> Vec<&'static str> {
    let mut args = vec![
        af_proxy(),
        "probe",
        "--sidecar-proxy",
        SANDBOX_PROXY,
        "--sidecar-patience-s",
        "5",
        // Routes left open stay open in these worlds: one round judges them (each listener
        // counts one arrival); denied ones still take their rounds to settle.
        "--deadline-s",
        "0",
    ];
    args.extend(standard_targets());
    args
}

impl World {
    /// The positive control every denial needs (TESTING.md, "a denial needs a listener"): before
    /// anything is closed, each standard target answers a client in the workload's namespace, so
    /// a route later seen denied was denied, not aimed at a port where nothing listens.
    pub fn assert_every_target_answers(&self) {
        let open = verdict(&self.as_uid(PROXY_UID, &probe_args()));
        let routes = outcomes(&open);
        assert!(!routes.is_empty(), "{open}");
        for (route, outcome) in routes {
            assert_eq!(
                outcome, "escaped",
                "positive control: {route} answers: {open}"
            );
        }
    }
}

/// The probe/gate flags that point every standard route at this world's hosts.
pub fn standard_targets() -> Vec<&'static str> {
    vec![
        "--public-tcp",
        "203.0.113.10:443",
        "--public-dns",
        "198.51.100.53:53",
        "--metadata",
        "169.254.169.254:80",
        "--metadata-v6",
        "[fd00:ec2::254]:80",
        "--platform-api",
        "192.0.2.100:6443",
        "--timeout-ms",
        "1000",
    ]
}

/// E3, E5, E7, E8, E9 and E19 as extra routes.
pub fn battery_routes() -> Vec<&'static str> {
    vec![
        "--route",
        "dns-over-tcp=tcp:198.51.100.53:53",
        "--route",
        "global-v6=tcp:[2001:db8::10]:443",
        "--route",
        "private=tcp:10.20.0.5:80",
        "--route",
        "ping=icmp:203.0.113.10",
        "--route",
        "quic=udp:203.0.113.10:443",
        "--route",
        "dot=tcp:198.51.100.53:853",
        "--route",
        "doh=tcp:198.51.100.53:443",
        "--route",
        "public-http=tcp:203.0.113.10:80",
    ]
}

/// The JSON verdict line a command printed.
pub fn verdict(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!(
            "no verdict; stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// Outcome by route name.
pub fn outcomes(verdict: &serde_json::Value) -> BTreeMap<String, String> {
    verdict["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A TCP listener at [`SANDBOX_PROXY`] in the workload namespace, accepting and closing.
fn start_sandbox_proxy_stand_in(wl: &str) {
    let path = format!("/var/run/netns/{wl}");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("entering the workload namespace");
        let listener =
            std::net::TcpListener::bind(SANDBOX_PROXY).expect("the sandbox proxy stand-in");
        ready_tx.send(()).unwrap();
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    ready_rx.recv().expect("the sandbox proxy stand-in starts");
}

impl World {
    /// Starts `listeners` (name, kind, address) in the workload's own namespace — loopback
    /// addresses a platform puts there — and returns their counters.
    pub fn listen_in_workload(
        &self,
        listeners: &'static [(&'static str, &'static str, &'static str)],
    ) -> Counters {
        let counters: Arc<BTreeMap<&'static str, AtomicUsize>> = Arc::new(
            listeners
                .iter()
                .map(|(name, _, _)| (*name, AtomicUsize::new(0)))
                .collect(),
        );
        start_listeners(&self.wl, listeners, counters.clone());
        Counters(counters)
    }
}

/// What reached listeners a test started itself.
pub struct Counters(Arc<BTreeMap<&'static str, AtomicUsize>>);

impl Counters {
    pub fn reached(&self, listener: &str) -> usize {
        self.0[listener].load(Ordering::SeqCst)
    }
}

fn start_listeners(
    ns: &str,
    listeners: &'static [(&'static str, &'static str, &'static str)],
    counters: Arc<BTreeMap<&'static str, AtomicUsize>>,
) {
    let path = format!("/var/run/netns/{ns}");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("entering the listeners' namespace");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            for &(name, kind, address) in listeners {
                let addr: SocketAddr = address.parse().unwrap();
                let counters = counters.clone();
                match kind {
                    "tcp" => {
                        let listener = tokio::net::TcpListener::bind(addr)
                            .await
                            .unwrap_or_else(|e| panic!("{address}: {e}"));
                        tokio::spawn(async move {
                            while let Ok((mut stream, _)) = listener.accept().await {
                                counters[name].fetch_add(1, Ordering::SeqCst);
                                tokio::spawn(async move {
                                    let _ = stream.write_all(b"hello from the outside\n").await;
                                    let _ = stream.read(&mut [0u8; 64]).await;
                                });
                            }
                        });
                    }
                    _ => {
                        let socket = tokio::net::UdpSocket::bind(addr)
                            .await
                            .unwrap_or_else(|e| panic!("{address}: {e}"));
                        let is_dns = kind == "dns";
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 2048];
                            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                                counters[name].fetch_add(1, Ordering::SeqCst);
                                let mut reply = buf[..n].to_vec();
                                if is_dns && n >= 12 {
                                    reply[2] |= 0x80; // a response (empty answer) to the same id
                                }
                                let _ = socket.send_to(&reply, from).await;
                            }
                        });
                    }
                }
            }
            ready_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
    });
    ready_rx.recv().expect("the listeners start");
}
