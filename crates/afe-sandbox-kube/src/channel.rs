//! The Kubernetes remote-command stream as data (`v5.channel.k8s.io`, pure): every WebSocket
//! message is one binary frame whose first byte names its stream — 0 stdin, 1 stdout, 2 stderr,
//! 3 the status, 4 a terminal resize — and v5 adds 255, "close", whose second byte names the
//! stream closed. v4 has no close: the only way to end stdin there is to close the whole
//! connection, and the command's trailing output is lost with it; afe refuses v4.

/// The subprotocol afe requires.
pub const V5: &str = "v5.channel.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;

/// A frame that carries `bytes` to the command's stdin.
pub fn stdin(bytes: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(bytes.len() + 1);
    frame.push(STDIN);
    frame.extend_from_slice(bytes);
    frame
}

/// The v5 frame that closes the command's stdin (its read sees end of file); the stream stays
/// open for the rest of its output.
pub fn close_stdin() -> Vec<u8> {
    vec![CLOSE, STDIN]
}

/// What a frame from the server carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Stdout(&'a [u8]),
    Stderr(&'a [u8]),
    /// The command's end, as a `metav1.Status` (JSON).
    Status(&'a [u8]),
    /// A stream afe does not read (a close of one of them, a resize), or an empty frame.
    Other,
}

/// Reads one binary frame.
pub fn read(frame: &[u8]) -> Frame<'_> {
    match frame.split_first() {
        Some((&STDOUT, rest)) => Frame::Stdout(rest),
        Some((&STDERR, rest)) => Frame::Stderr(rest),
        Some((&STATUS, rest)) => Frame::Status(rest),
        _ => Frame::Other,
    }
}

/// The exit status a `metav1.Status` says: 0 for `Success`; the code of a `NonZeroExitCode`
/// failure (`details.causes[].reason == "ExitCode"`); otherwise the command did not run, and the
/// error is the server's message (an executable that is not there, a container that stopped).
pub fn exit_status(status: &[u8]) -> Result<i64, String> {
    let status: serde_json::Value = serde_json::from_slice(status)
        .map_err(|e| format!("the status channel said something unreadable: {e}"))?;
    if status["status"] == "Success" {
        return Ok(0);
    }
    let code = status["details"]["causes"].as_array().and_then(|causes| {
        causes
            .iter()
            .find(|cause| cause["reason"] == "ExitCode")
            .and_then(|cause| cause["message"].as_str())
            .and_then(|code| code.trim().parse::<i64>().ok())
    });
    match (status["reason"].as_str(), code) {
        (Some("NonZeroExitCode"), Some(code)) => Ok(code),
        _ => Err(status["message"]
            .as_str()
            .unwrap_or("the command failed without a message")
            .to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_named_by_their_first_byte() {
        assert_eq!(stdin(b"ab"), [0, b'a', b'b']);
        assert_eq!(close_stdin(), [255, 0]);
        assert_eq!(read(&[1, b'x']), Frame::Stdout(b"x"));
        assert_eq!(read(&[2, b'y']), Frame::Stderr(b"y"));
        assert_eq!(read(&[3, b'{', b'}']), Frame::Status(b"{}"));
        assert_eq!(read(&[255, 1]), Frame::Other);
        assert_eq!(read(&[]), Frame::Other);
    }

    #[test]
    fn the_status_says_how_the_command_ended() {
        assert_eq!(exit_status(br#"{"metadata":{},"status":"Success"}"#), Ok(0));
        // As the kubelet writes a command that exited 3.
        let failed = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        assert_eq!(exit_status(failed), Ok(3));
        let missing = br#"{"metadata":{},"status":"Failure","message":"exec: \"nope\": executable file not found in $PATH","reason":"InternalError"}"#;
        assert!(
            exit_status(missing)
                .unwrap_err()
                .contains("executable file not found")
        );
        assert!(exit_status(b"not json").is_err());
    }
}
