//! What the engine-tier tests of `af` share: running `af` with every probe target at TEST-NET
//! addresses nothing answers, the engine image, and what Docker holds of an environment.
#![allow(dead_code)] // each test binary uses its own part

use std::process::Command;

pub fn af_command(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_af"));
    command
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("AF_PROBE_PUBLIC_TCP", "203.0.113.10:443")
        .env("AF_PROBE_PUBLIC_DNS", "203.0.113.10:53")
        .env("AF_PROBE_METADATA", "203.0.113.10:80")
        .env("AF_PROBE_METADATA_V6", "[2001:db8::10]:80");
    command
}

pub fn af(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    af_command(dir, args).output().unwrap()
}

/// The engine image, built if missing: the service of these tests, so nothing is pulled.
pub fn engine_image() -> String {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let docker = af_docker::connect()
            .await
            .expect("these tests need the Docker daemon (CI runs one)");
        af_docker::engine_image::ensure(&docker)
            .await
            .expect("the engine image: run scripts/build-engine or set AF_PROXY_BINARY")
    })
}

/// What Docker holds of `env`: containers, networks, volumes, by name.
pub fn objects_of(env: &af_manifest::EnvironmentId) -> Vec<String> {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let docker = af_docker::connect().await.unwrap();
        let mut found = af_docker::teardown::containers(&docker, env).await.unwrap();
        found.extend(af_docker::networks::list(&docker, env).await.unwrap());
        found.extend(af_docker::teardown::volumes(&docker, env).await.unwrap());
        found
    })
}
