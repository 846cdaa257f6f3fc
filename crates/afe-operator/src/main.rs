//! `afe-operator`: reconciles the AgentFlowEngines of one namespace until a signal stops it.
//! In a Pod it uses its ServiceAccount; elsewhere a kubeconfig context (for development against
//! a disposable cluster). It says at start which API server it talks to.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use afe_operator::controller;
use afe_operator::reconcile::Context;
use clap::Parser;
use kube::runtime::events::{Recorder, Reporter};

/// afe's operator: each AgentFlowEngine of the namespace reconciled in six steps.
#[derive(Debug, Parser)]
#[command(name = "afe-operator", version)]
struct Args {
    /// The namespace whose AgentFlowEngines it reconciles (its own, in a Pod).
    #[arg(long, env = "AFE_OPERATOR_NAMESPACE")]
    namespace: String,
    /// A kubeconfig context (outside a cluster; default: in-cluster, else the current context).
    #[arg(long)]
    kube_context: Option<String>,
    /// How often each resource is reconciled when nothing changes (the reaper's sweep).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    requeue: Duration,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let connected = match afe_sandbox_kube::connect::connect(args.kube_context.as_deref()).await {
        Ok(connected) => connected,
        Err(afe_sandbox::SandboxError::Platform { operation, detail }) => {
            eprintln!(
                "AFE-OPR-005 {operation} failed: {detail}\n  help: in a Pod, check its ServiceAccount; outside, name a kubeconfig context with --kube-context"
            );
            return ExitCode::from(2);
        }
        Err(err) => {
            eprintln!("AFE-OPR-005 {err}");
            return ExitCode::from(2);
        }
    };
    tracing::info!(api = %connected.described, namespace = %args.namespace, "afe-operator starting");
    if let Err(err) = controller::check_installed(&connected.client).await {
        eprintln!("{err}");
        return ExitCode::from(3);
    }
    let reporter = Reporter {
        controller: "afe-operator".to_string(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let ctx = Arc::new(Context::new(
        connected.client.clone(),
        Recorder::new(connected.client.clone(), reporter),
        Arc::new(now_ms),
        args.requeue,
    ));
    controller::run(connected.client, &args.namespace, ctx).await;
    tracing::info!("afe-operator stopped");
    ExitCode::SUCCESS
}
