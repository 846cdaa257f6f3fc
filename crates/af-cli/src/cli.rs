//! The command line: verbs, flags and their help. Only verbs that work exist.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

#[derive(Debug, Parser)]
#[command(
    name = "af",
    version,
    about = "Environments (twins) of a multi-service app, contained and proved so before any code runs",
    after_help = "Exit status: 0 success, 1 internal error, 2 usage error, 3 invalid manifest; see docs/errors.md."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Print machine-readable JSON on standard output instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// Say more about what af is doing (on standard error); repeat for more.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The environment manifest.
    #[arg(
        long,
        global = true,
        env = "AF_MANIFEST",
        default_value = "af.yaml",
        value_name = "FILE"
    )]
    pub manifest: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a manifest and report every problem in it, with where and what to write instead.
    Validate(ValidateArgs),

    /// Bring the environment up: containment probe, sidecar, every service behind its gate, ready.
    Up(EnvArgs),
    /// Remove everything that carries the environment's label, and wait until it is gone.
    Down(EnvArgs),
    /// Each service's instances ready/wanted and applied limits, read off what is running.
    Status(EnvArgs),
    /// Print a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: Shell,
    },
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    /// The environment (default: the manifest folder's git branch).
    #[arg(long, env = "AF_ENV", value_name = "NAME")]
    pub env: Option<String>,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The manifest to check (default: --manifest, or af.yaml).
    pub file: Option<PathBuf>,

    /// The environment whose id to derive (default: the manifest folder's git branch).
    #[arg(long, env = "AF_ENV", value_name = "NAME")]
    pub env: Option<String>,
}
