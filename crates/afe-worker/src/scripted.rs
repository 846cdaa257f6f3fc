//! A scripted executor for tests and benchmarks (`afe worker --executor scripted --script FILE`):
//! each node sleeps, optionally makes a "paid call" (a reservation, then a settlement), optionally
//! holds after it, optionally fails — and appends what it does to a calls file, one line per step,
//! so a test can count executions across processes and time a kill to a step.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use afe_store::{NewCheckpoint, Settlement, usd_to_micros};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::executor::{NodeCall, NodeError, NodeExecutor, NodeResult};

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub sleep_ms: u64,
    /// Reserve and then spend this much (0: no paid call).
    #[serde(default)]
    pub cost_usd: f64,
    /// What the provider "reports" (default: the reservation).
    #[serde(default)]
    pub settle_usd: Option<f64>,
    /// Wait this long after the paid call, before the node completes: the window between paying
    /// and committing.
    #[serde(default)]
    pub hold_after_paid_ms: u64,
    #[serde(default)]
    pub fail: bool,
    /// Save a checkpoint bundle of this many bytes.
    #[serde(default)]
    pub checkpoint_bytes: usize,
    /// Wait, after the sleep, until this file exists: a gate a test opens when it is ready,
    /// instead of a time it hopes is long enough.
    #[serde(default)]
    pub until_file: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Where each step is appended: `start|paid|done|fail TICKET NODE ATTEMPT`.
    pub calls_file: PathBuf,
    #[serde(default)]
    pub default: Step,
    #[serde(default)]
    pub nodes: BTreeMap<String, Step>,
}

#[derive(Debug)]
pub struct ScriptedExecutor {
    script: Script,
}

impl ScriptedExecutor {
    pub fn new(script: Script) -> ScriptedExecutor {
        ScriptedExecutor { script }
    }

    /// One line, written with one `write` on a file opened for appending, so lines from several
    /// processes never interleave.
    fn note(&self, step: &str, call: &NodeCall) -> Result<(), NodeError> {
        let line = format!(
            "{step} {} {} {}\n",
            call.ticket.id, call.node.id, call.attempt
        );
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.script.calls_file)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| NodeError::Failed(format!("cannot write the calls file: {e}")))
    }
}

#[async_trait]
impl NodeExecutor for ScriptedExecutor {
    async fn execute(&self, call: NodeCall) -> Result<NodeResult, NodeError> {
        let step = self
            .script
            .nodes
            .get(&call.node.id)
            .unwrap_or(&self.script.default)
            .clone();
        self.note("start", &call)?;
        tokio::time::sleep(Duration::from_millis(step.sleep_ms)).await;
        if let Some(gate) = &step.until_file {
            while !gate.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let mut settlements = Vec::new();
        if step.cost_usd > 0.0 {
            let reservation = call
                .wallet
                .reserve("scripted", usd_to_micros(step.cost_usd))
                .await?;
            self.note("paid", &call)?;
            settlements.push(Settlement {
                reservation: reservation.id,
                usd_micros: usd_to_micros(step.settle_usd.unwrap_or(step.cost_usd)),
                tokens_in: 100,
                tokens_out: 10,
            });
            tokio::time::sleep(Duration::from_millis(step.hold_after_paid_ms)).await;
        }
        if step.fail {
            self.note("fail", &call)?;
            return Err(NodeError::Failed(format!(
                "node {} failed as scripted",
                call.node.id
            )));
        }
        self.note("done", &call)?;
        Ok(NodeResult {
            output: json!({"node": call.node.id, "attempt": call.attempt}),
            settlements,
            checkpoint: (step.checkpoint_bytes > 0).then(|| NewCheckpoint {
                head: String::new(),
                git_ref: format!("refs/afe/{}/{}", call.ticket.id, call.node.id),
                parent: None,
                bundle: (0..step.checkpoint_bytes)
                    .map(|i| (i % 251) as u8)
                    .collect(),
            }),
        })
    }
}
