//! The channel protocols of Kubernetes' streaming WebSockets (pure): every binary message is one
//! channel byte and data — 0 stdin, 1 stdout, 2 stderr, 3 the error channel (a `metav1.Status` in
//! v4 and v5), 4 terminal resizes; v5 adds a close message (255, then the channel) so a client can
//! close stdin and still read. Port-forward uses two channels per port, data and error, each
//! opened by the port number (two bytes, little-endian).

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5's close message.
pub const CLOSE: u8 = 255;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

/// `channel` then `data`, as one message.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(channel);
    out.extend_from_slice(data);
    out
}

/// The error channel's last message: success, or the exit status as the kubelet reports a
/// command that exited non-zero (`NonZeroExitCode`, its code in `details.causes`).
pub fn exit_status(command: &[String], exit_code: i64) -> Vec<u8> {
    let status = if exit_code == 0 {
        serde_json::json!({"metadata": {}, "status": "Success"})
    } else {
        serde_json::json!({
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "command terminated with non-zero exit code: error executing command {command:?}, exit code {exit_code}"
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": exit_code.to_string()}]}
        })
    };
    frame(ERROR, status.to_string().as_bytes())
}

/// A failure that is not an exit status (the container is gone, the runtime failed).
pub fn failure(message: &str) -> Vec<u8> {
    let status = serde_json::json!({
        "metadata": {}, "status": "Failure", "message": message, "reason": "InternalError"
    });
    frame(ERROR, status.to_string().as_bytes())
}

/// A resize message's width and height.
pub fn resize(data: &[u8]) -> Option<(u16, u16)> {
    let size: serde_json::Value = serde_json::from_slice(data).ok()?;
    Some((
        u16::try_from(size["Width"].as_u64()?).ok()?,
        u16::try_from(size["Height"].as_u64()?).ok()?,
    ))
}

/// The first message of a port-forward channel: the port, little-endian.
pub fn port_opening(channel: u8, port: u16) -> Vec<u8> {
    frame(channel, &port.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_channel_carries_the_exit_status_as_a_status_object() {
        let ok = exit_status(&["true".into()], 0);
        assert_eq!(ok[0], ERROR);
        let ok: serde_json::Value = serde_json::from_slice(&ok[1..]).unwrap();
        assert_eq!(ok["status"], "Success");
        let failed = exit_status(&["sh".into(), "-c".into(), "exit 3".into()], 3);
        let failed: serde_json::Value = serde_json::from_slice(&failed[1..]).unwrap();
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
    }

    #[test]
    fn resizes_and_port_openings_read_and_write_as_the_kubelet_does() {
        assert_eq!(resize(br#"{"Width":80,"Height":24}"#), Some((80, 24)));
        assert_eq!(resize(b"nonsense"), None);
        assert_eq!(port_opening(2, 8080), vec![2, 0x90, 0x1f]);
    }
}
