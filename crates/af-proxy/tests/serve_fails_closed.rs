//! `af-proxy serve` fails closed: a configuration it cannot use, or a listener it cannot bind,
//! stops it before anything is served, with a non-zero status and the reason.

use std::process::Command;

fn serve(config: &str) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!(
        "af-proxy-test-{}-{}",
        std::process::id(),
        config.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sidecar.yaml");
    std::fs::write(
        &path,
        config.replace("LOG", &dir.join("log.jsonl").display().to_string()),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_af-proxy"))
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    output
}

#[test]
fn an_invalid_configuration_exits_50_naming_every_problem() {
    let out = serve(
        "environment: x\nlisten: {}\ncontrol: {listen: 127.0.0.1:0, token: short}\nlog: {path: LOG}\n",
    );
    assert_eq!(out.status.code(), Some(50));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("AF-RUN-050"), "{stderr}");
    assert!(stderr.contains("listen names no listener"), "{stderr}");
    assert!(stderr.contains("shorter than 16"), "{stderr}");
}

#[test]
fn a_missing_configuration_exits_50() {
    let out = Command::new(env!("CARGO_BIN_EXE_af-proxy"))
        .args(["serve", "--config", "/nonexistent/sidecar.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(50));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read it"));
}

#[test]
fn a_port_it_cannot_bind_stops_it_before_serving() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = serve(&format!(
        "environment: x\nlisten: {{proxy: 127.0.0.1:{port}}}\ncontrol: {{listen: 127.0.0.1:0, token: 0123456789abcdef}}\nlog: {{path: LOG}}\n"
    ));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot listen for the forward proxy on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}
