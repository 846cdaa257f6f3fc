//! Exit statuses. They are part of af's interface (scripts branch on them), so each number is
//! stable and documented in docs/errors.md: 0 success, 1 internal error, 2 usage (clap exits with
//! it itself), 3 invalid manifest, and for a runtime error the number of its AF-RUN code
//! ([`af_runtime::RunCode::exit_status`]).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Success,
    /// A bug or an unexpected failure of the machine (not the user's input).
    Internal,
    /// The command line did not say enough (which environment).
    Usage,
    /// The manifest was refused (AF-MAN-*).
    InvalidManifest,
    /// A runtime error: its code's status.
    Runtime(af_runtime::RunCode),
    /// `af db psql`: psql's own status, passed through.
    Psql(u8),
}

impl Exit {
    pub fn status(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Internal => 1,
            Exit::Usage => 2,
            Exit::InvalidManifest => 3,
            Exit::Runtime(code) => code.exit_status(),
            Exit::Psql(status) => status,
        }
    }
}
