//! A ticket's flow as its revision froze it, and the pure decisions over it: the order nodes run
//! in, what a `when` sees, whether it holds, and what a node that was interrupted gets.

use std::collections::{BTreeMap, BTreeSet};

use afe_config::kinds::FlowNode;
use afe_config::names::cel_variable;
use afe_store::{NodeRun, NodeState};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The part of a normalized flow the worker reads.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct FrozenFlow {
    pub input: String,
    pub nodes: Vec<FlowNode>,
    /// The ticket's sandbox, its defaults filled by normalization.
    #[serde(default)]
    pub sandbox: FrozenSandbox,
}

/// A flow's `sandbox` as a revision froze it (defaults filled, memory in bytes, lists sorted).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FrozenSandbox {
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Host rules the proxy lets through; empty: no proxy, nothing leaves.
    #[serde(default)]
    pub egress: Vec<String>,
    /// Names of the worker's variables passed into the sandbox.
    #[serde(default)]
    pub env: Vec<String>,
    /// The RuntimeClass (Kubernetes); `runc`, the default, is written out.
    #[serde(default)]
    pub runtime_class_name: Option<String>,
}

impl FrozenFlow {
    /// The flow named `flow` in a revision's normalized document.
    pub fn from_revision(document: &Value, flow: &str) -> Result<FrozenFlow, String> {
        let found = document
            .pointer(&format!("/flows/{flow}"))
            .ok_or_else(|| format!("the revision has no flow {flow:?}"))?;
        serde_json::from_value(found.clone()).map_err(|err| format!("flow {flow:?}: {err}"))
    }

    /// The nodes in an order that respects `needs` (file order among the ready ones). The config
    /// was validated, so there is no cycle; a node left over would be one, and is left out.
    pub fn order(&self) -> Vec<&FlowNode> {
        let mut done: BTreeSet<&str> = BTreeSet::new();
        let mut order = Vec::with_capacity(self.nodes.len());
        while order.len() < self.nodes.len() {
            let ready: Vec<&FlowNode> = self
                .nodes
                .iter()
                .filter(|n| !done.contains(n.id.as_str()))
                .filter(|n| n.needs.iter().all(|need| done.contains(need.as_str())))
                .collect();
            if ready.is_empty() {
                break;
            }
            for node in ready {
                done.insert(&node.id);
                order.push(node);
            }
        }
        order
    }
}

/// What a node sees: the input under its Schema's name and each completed node's output under
/// its id (`-` written `_`).
pub fn context(flow: &FrozenFlow, input: &Value, runs: &BTreeMap<String, NodeRun>) -> Value {
    let mut map = Map::new();
    map.insert(cel_variable(&flow.input), input.clone());
    for (node, run) in runs {
        if run.state == NodeState::Completed {
            map.insert(
                cel_variable(node),
                run.output.clone().unwrap_or(Value::Null),
            );
        }
    }
    Value::Object(map)
}

/// Whether a node runs: every node it needs completed (a skipped need skips it too), and its
/// `when`, if any, true.
pub fn should_run(
    node: &FlowNode,
    runs: &BTreeMap<String, NodeRun>,
    context: &Value,
) -> Result<bool, String> {
    let skipped_need = node.needs.iter().any(|need| {
        runs.get(need)
            .is_some_and(|r| r.state == NodeState::Skipped)
    });
    if skipped_need {
        return Ok(false);
    }
    let Some(when) = &node.when else {
        return Ok(true);
    };
    let program = cel::Program::compile(when).map_err(|e| format!("when: {e}"))?;
    let mut cel_context = cel::Context::default();
    if let Value::Object(variables) = context {
        for (name, value) in variables {
            cel_context
                .add_variable(name.as_str(), value.clone())
                .map_err(|e| format!("when: {e}"))?;
        }
    }
    match program.execute(&cel_context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("when gave {other:?}, not a boolean")),
        Err(err) => Err(format!("when: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flow() -> FrozenFlow {
        serde_json::from_value(json!({
            "input": "text-request",
            "nodes": [
                {"id": "push", "git": "push", "needs": ["test"]},
                {"id": "clone", "git": "clone"},
                {"id": "test", "exec": ["make"], "needs": ["fix"]},
                {"id": "fix", "deep": "coder", "needs": ["clone"], "when": "text_request.topic == 'k8s'"},
            ]
        }))
        .unwrap()
    }

    fn run(node: &str, state: NodeState, output: Value) -> (String, NodeRun) {
        (
            node.to_string(),
            NodeRun {
                ticket: "t".into(),
                node: node.into(),
                state,
                output: Some(output),
                error: None,
                attempts: 1,
                started_at: 0,
                finished_at: Some(0),
            },
        )
    }

    #[test]
    fn nodes_run_after_what_they_need() {
        let flow = flow();
        let order: Vec<&str> = flow.order().iter().map(|n| n.id.as_str()).collect();
        assert_eq!(order, ["clone", "fix", "test", "push"]);
    }

    #[test]
    fn when_reads_the_input_and_a_skipped_need_skips() {
        let flow = flow();
        let fix = &flow.nodes[3];
        let runs = BTreeMap::from([run("clone", NodeState::Completed, json!({}))]);
        let k8s = context(&flow, &json!({"topic": "k8s"}), &runs);
        assert_eq!(should_run(fix, &runs, &k8s), Ok(true));
        let other = context(&flow, &json!({"topic": "docs"}), &runs);
        assert_eq!(should_run(fix, &runs, &other), Ok(false));
        let runs = BTreeMap::from([run("fix", NodeState::Skipped, json!(null))]);
        assert_eq!(should_run(&flow.nodes[2], &runs, &other), Ok(false));
    }
}
