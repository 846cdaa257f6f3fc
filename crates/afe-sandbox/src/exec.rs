//! A command in a sandbox: what is asked (argv, stdin, environment, working directory), and what
//! comes back — the exit status, and stdout and stderr streamed as they come and kept up to a
//! bound (a command that prints without end cannot grow the worker's memory); or a command
//! attached, talked with while it runs.

use crate::SandboxError;

/// The most of each stream kept by default: 1 MiB.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1 << 20;

/// A command to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRequest {
    /// The program and its arguments; never a shell line (a caller that wants a shell says
    /// `["sh", "-c", ...]`).
    pub argv: Vec<String>,
    /// Written to the command's stdin, which is then closed; none: stdin is closed at once.
    pub stdin: Option<Vec<u8>>,
    /// `NAME=value` added to the sandbox's own variables for this command.
    pub env: Vec<(String, String)>,
    /// The directory it starts in; none: the workspace's repository.
    pub workdir: Option<String>,
    /// The most of each of stdout and stderr kept.
    pub output_limit: usize,
}

impl ExecRequest {
    /// `argv`, with nothing on stdin, in the repository, with the default bound.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> ExecRequest {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            stdin: None,
            env: Vec::new(),
            workdir: None,
            output_limit: DEFAULT_OUTPUT_LIMIT,
        }
    }
}

/// A command started with its stdin open, for a program the worker talks with while it runs (an
/// ACP agent, a terminal an agent asked for). Platform-neutral: channels, pumped by the adapter.
#[derive(Debug)]
pub struct Attached {
    /// Bytes for the command's stdin, in order; dropping it closes stdin.
    pub stdin: tokio::sync::mpsc::Sender<Vec<u8>>,
    /// The command's output as it arrives; ends once the command closed stdout and stderr.
    pub output: tokio::sync::mpsc::Receiver<OutputChunk>,
    /// How the command ended, once its output has ended.
    pub status: tokio::sync::oneshot::Receiver<Result<i64, SandboxError>>,
    /// Send (or drop) to kill the command (SIGKILL) if it has not ended.
    pub kill: tokio::sync::oneshot::Sender<()>,
}

/// A piece of a command's output, as it arrives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputChunk {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

/// One stream, kept up to its bound: the bytes kept, and how many more were seen and dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bounded {
    pub bytes: Vec<u8>,
    pub dropped: u64,
}

impl Bounded {
    /// Keeps what of `chunk` fits under `limit`, counts the rest.
    pub fn push(&mut self, chunk: &[u8], limit: usize) {
        let room = limit.saturating_sub(self.bytes.len());
        let kept = chunk.len().min(room);
        self.bytes.extend_from_slice(&chunk[..kept]);
        self.dropped += (chunk.len() - kept) as u64;
    }

    /// The kept bytes as text (invalid UTF-8 replaced), saying when some were dropped.
    pub fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.bytes).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n[{} more bytes not kept]", self.dropped));
        }
        text
    }
}

/// How a command ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Its exit status; a command killed by a signal reports 128 + the signal, as a shell does.
    pub status: i64,
    pub stdout: Bounded,
    pub stderr: Bounded,
}

impl ExecOutput {
    /// Adds a chunk to the stream it belongs to, bounded by `limit`.
    pub fn absorb(&mut self, chunk: &OutputChunk, limit: usize) {
        match chunk {
            OutputChunk::Stdout(bytes) => self.stdout.push(bytes, limit),
            OutputChunk::Stderr(bytes) => self.stderr.push(bytes, limit),
        }
    }

    pub fn succeeded(&self) -> bool {
        self.status == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_kept_up_to_its_bound_and_the_rest_is_counted() {
        let mut output = ExecOutput::default();
        for _ in 0..3 {
            output.absorb(&OutputChunk::Stdout(b"abcd".to_vec()), 10);
        }
        output.absorb(&OutputChunk::Stderr(b"oops".to_vec()), 10);
        assert_eq!(output.stdout.bytes, b"abcdabcdab");
        assert_eq!(output.stdout.dropped, 2);
        assert_eq!(output.stdout.text(), "abcdabcdab\n[2 more bytes not kept]");
        assert_eq!(
            (output.stderr.text(), output.stderr.dropped),
            ("oops".into(), 0)
        );
    }

    #[test]
    fn a_request_runs_argv_in_the_repository_with_stdin_closed() {
        let request = ExecRequest::new(["git", "status"]);
        assert_eq!(request.argv, ["git", "status"]);
        assert_eq!((request.stdin, request.workdir), (None, None));
        assert_eq!(request.output_limit, DEFAULT_OUTPUT_LIMIT);
    }
}
