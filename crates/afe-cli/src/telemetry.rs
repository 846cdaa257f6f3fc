//! The log and the tracer of `afe run` and `afe worker`: stderr filtered by `AFE_LOG`, and the
//! spans exported to the Runtime's OTLP tracer when one is named (afe-telemetry).

use std::process::ExitCode;

use afe_config::runtime::OtlpRuntime;
use afe_telemetry::Telemetry;

/// Starts the log (default filter `default_filter`) and, with `tracer`, the export; a tracer that
/// cannot start is an error with its code, before any ticket runs, and the process exits with
/// `status`.
pub fn start(
    default_filter: &str,
    tracer: Option<&OtlpRuntime>,
    runtime: &tokio::runtime::Handle,
    status: u8,
) -> Result<Telemetry, ExitCode> {
    let refuse = |err: afe_telemetry::TelemetryError| {
        eprintln!("afe: {err}\n  help: {}", err.help());
        ExitCode::from(status)
    };
    let otlp = match tracer {
        Some(tracer) => {
            afe_nodes::call::capture_prompts(tracer.capture_prompts);
            Some(
                afe_telemetry::otlp_from_env(&tracer.endpoint, tracer.headers_env.as_deref())
                    .map_err(refuse)?,
            )
        }
        None => None,
    };
    Telemetry::init(default_filter, otlp, runtime.clone()).map_err(refuse)
}
