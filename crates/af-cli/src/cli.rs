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
    /// A service's log lines, from every instance; `--follow` keeps them coming.
    Logs(LogsArgs),
    /// The sidecar's records of what left, or tried to.
    Net {
        #[command(subcommand)]
        command: NetCommand,
    },
    /// What the sidecar captured instead of letting out: requests to captured hosts, and mail.
    Inbox(InboxArgs),
    /// Deliver requests to services as a third party would.
    Webhook {
        #[command(subcommand)]
        command: WebhookCommand,
    },
    /// The environment's database branch (`database: {provider: container}`).
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Print every object the environment would be on a runtime, in the order they are applied,
    /// without touching a cluster.
    Render(RenderArgs),
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

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The runtime whose objects to print (only kubernetes has objects to print).
    #[arg(long, value_parser = ["kubernetes"])]
    pub runtime: String,
    /// The environment (default: the manifest folder's git branch).
    #[arg(long, env = "AF_ENV", value_name = "NAME")]
    pub env: Option<String>,
    /// The sidecar Service's ClusterIP, every pod's resolver and proxy. A cluster assigns it when
    /// the Service is created; until then a documentation address stands in.
    #[arg(long, default_value = "192.0.2.53", value_name = "IP")]
    pub sidecar_ip: std::net::IpAddr,
    /// The cluster's resolver (the kube-dns Service), to which the sidecar forwards names inside
    /// the environment.
    #[arg(long, default_value = "10.96.0.10:53", value_name = "ADDRESS")]
    pub cluster_dns: std::net::SocketAddr,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// The namespace of the ingress controller, let in to web services when a domain is set.
    #[arg(long, default_value = "ingress-nginx")]
    pub ingress_namespace: String,
}

#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Make the branch fresh from its template again: what the seed made, nothing written since.
    Reset(EnvArgs),
    /// psql on the branch as its owner, through the database's container (no port is published).
    /// From a terminal it is interactive (it runs `docker exec -it`); otherwise SQL is read from
    /// standard input and psql's status is af's.
    Psql(PsqlArgs),
}

#[derive(Debug, Args)]
pub struct PsqlArgs {
    #[command(flatten)]
    pub env: EnvArgs,
    /// Arguments for psql, after `--` (e.g. `-- -c 'select 1'`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Every decision the sidecar made, oldest first.
    Log(NetLogArgs),
}

#[derive(Debug, Args)]
pub struct NetLogArgs {
    #[command(flatten)]
    pub env: EnvArgs,
    /// Only this verdict: allow, capture or deny.
    #[arg(long)]
    pub verdict: Option<String>,
    /// Only this host.
    #[arg(long)]
    pub host: Option<String>,
    /// Only decisions at or after this RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Keep printing decisions as they are made (until interrupted).
    #[arg(long, short)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct InboxArgs {
    #[command(flatten)]
    pub env: EnvArgs,
    /// Show this entry whole instead of listing them all.
    pub id: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Send a request to a service through the sidecar, and print its answer.
    Trigger(WebhookArgs),
}

#[derive(Debug, Args)]
pub struct WebhookArgs {
    #[command(flatten)]
    pub env: EnvArgs,
    pub service: String,
    /// The path, starting with '/'.
    pub path: String,
    #[arg(long, default_value = "POST")]
    pub method: String,
    #[arg(long, default_value = "")]
    pub body: String,
    /// A header, `Name: value` (repeat for several).
    #[arg(long = "header")]
    pub headers: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub env: EnvArgs,
    pub service: String,
    #[arg(long, short)]
    pub follow: bool,
}
