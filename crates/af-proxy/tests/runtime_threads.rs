//! `af-proxy serve` runs its async runtime on `limits.worker_threads` threads, never more than the
//! cores it is given: counted from the running process's threads, as the kernel lists them.

use std::process::{Child, Command, Stdio};

/// A serving sidecar with `limits` (YAML flow mapping), and the directory it writes to.
fn serving(name: &str, limits: &str) -> (Child, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("af-proxy-threads-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "environment: threads\nlisten: {{proxy: 127.0.0.1:{port}}}\ncontrol: {{listen: 127.0.0.1:0, token: 0123456789abcdef}}\nlog: {{path: {}}}\nlimits: {limits}\n",
        dir.join("log.jsonl").display()
    );
    let path = dir.join("sidecar.yaml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_af-proxy"))
        .args(["serve", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Serving once the proxy port accepts; the runtime's threads are started before that.
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (child, dir);
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("af-proxy exited with {status} before serving");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("af-proxy never accepted on 127.0.0.1:{port}");
}

/// How many of the process's threads are the runtime's workers.
fn workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "tokio-rt-worker")
        .count()
}

fn count_and_stop(name: &str, limits: &str) -> usize {
    let (mut child, dir) = serving(name, limits);
    let counted = workers(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    counted
}

#[test]
fn the_runtime_runs_on_the_configured_threads_capped_by_the_cores() {
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(count_and_stop("one", "{worker_threads: 1}"), 1);
    assert_eq!(count_and_stop("default", "{}"), cores.min(2));
    assert_eq!(
        count_and_stop("many", "{worker_threads: 64}"),
        cores.min(64),
        "never more than the cores"
    );
}
