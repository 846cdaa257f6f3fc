//! `af-proxy connect`: standard input reaches the address, its answer comes out on standard
//! output, and the end of standard input half-closes the connection without cutting the answer.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

#[test]
fn connect_relays_standard_input_and_output_to_a_tcp_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut asked = Vec::new();
        // The client's half-close ends this read: the whole question arrived.
        stream.read_to_end(&mut asked).unwrap();
        stream.write_all(b"answer to: ").unwrap();
        stream.write_all(&asked).unwrap();
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_af-proxy"))
        .args(["connect", &address.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"question").unwrap();
    let output = child.wait_with_output().unwrap();
    server.join().unwrap();
    assert!(output.status.success());
    assert_eq!(output.stdout, b"answer to: question");
}

#[test]
fn connect_to_nothing_fails_saying_where() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_af-proxy"))
        .args(["connect", &free.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&free.to_string()), "{stderr}");
}
