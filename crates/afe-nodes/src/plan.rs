//! The decisions behind a node, pure: which kind it is, the sandbox its ticket wants, where its
//! repository is, what an exec node's command sees, what of its output is kept.

use std::collections::BTreeMap;

use afe_config::kinds::{AcpAgent, FlowNode, GitAction};
use afe_sandbox::{Bounded, SandboxError, SandboxSpec};
use afe_worker::FrozenSandbox;
use afe_workspace::WorkspaceError;
use serde_json::{Value, json};

/// What a node does, of the kinds this executor runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Clone,
    Push,
    Exec(Vec<String>),
    /// One call of the named agent.
    Agent(String),
    /// A tool loop of the named agent over the workspace.
    Deep(String),
    /// An ACP agent in the sandbox.
    Acp(AcpAgent),
}

/// The node's kind; none when it has no kind this afe knows (a newer afe wrote the revision).
pub fn kind_of(node: &FlowNode) -> Option<Kind> {
    match (&node.git, &node.exec, &node.agent, &node.deep, &node.acp) {
        (Some(GitAction::Clone), ..) => Some(Kind::Clone),
        (Some(GitAction::Push), ..) => Some(Kind::Push),
        (None, Some(argv), ..) => Some(Kind::Exec(argv.clone())),
        (None, None, Some(agent), ..) => Some(Kind::Agent(agent.clone())),
        (None, None, None, Some(agent), _) => Some(Kind::Deep(agent.clone())),
        (None, None, None, None, Some(acp)) => Some(Kind::Acp(acp.clone())),
        _ => None,
    }
}

/// The sandbox of `ticket` as its flow froze it: the image, the limits, the egress, and the
/// variables the flow names with their values from the worker's environment (`lookup`) — nothing
/// else of the worker's. A named variable the worker does not have is refused, not left out.
pub fn sandbox_spec(
    ticket: &str,
    sandbox: &FrozenSandbox,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<SandboxSpec, SandboxError> {
    let mut env = BTreeMap::new();
    for name in &sandbox.env {
        let value = lookup(name).ok_or_else(|| SandboxError::VariableRefused {
            name: name.clone(),
            why: "the flow names it in spec.sandbox.env, and the worker's environment does not have it".to_string(),
        })?;
        env.insert(name.clone(), value);
    }
    let egress = sandbox
        .egress
        .iter()
        .map(|rule| {
            af_manifest::parse_host_rule(rule).map_err(|why| SandboxError::Platform {
                operation: "reading the flow's egress".to_string(),
                detail: format!("{rule:?}: {why}"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SandboxSpec {
        ticket: ticket.to_string(),
        image: sandbox
            .image
            .clone()
            .unwrap_or_else(|| "afe-sandbox".to_string()),
        cpus: sandbox.cpus,
        memory_bytes: sandbox.memory_bytes,
        env,
        egress,
        // runc is every platform's default: named, it is the same sandbox as unnamed.
        runtime_class: sandbox
            .runtime_class_name
            .clone()
            .filter(|class| class != "runc"),
    })
}

/// The repository a ticket's git nodes work on: its input's `repository` (a URL) and, when given,
/// `branch`.
pub fn repository_of(input: &Value) -> Result<(String, Option<String>), WorkspaceError> {
    let url = input
        .get("repository")
        .and_then(Value::as_str)
        .filter(|url| !url.is_empty())
        .ok_or_else(|| {
            WorkspaceError::NoRepository(
                "the ticket's input has no `repository` field, so its git nodes have nothing to clone or push".to_string(),
            )
        })?;
    let branch = input
        .get("branch")
        .and_then(Value::as_str)
        .filter(|b| !b.is_empty())
        .map(str::to_string);
    Ok((url.to_string(), branch))
}

/// The variables an exec node's command gets besides the sandbox's: which ticket, node and
/// attempt it is (a command that must not repeat an outside effect can tell a retry).
pub fn exec_env(ticket: &str, node: &str, attempt: i32) -> Vec<(String, String)> {
    vec![
        ("AFE_TICKET".to_string(), ticket.to_string()),
        ("AFE_NODE".to_string(), node.to_string()),
        ("AFE_ATTEMPT".to_string(), attempt.to_string()),
    ]
}

/// The most of each stream an exec node's output keeps (the rest is counted).
pub const OUTPUT_KEPT: usize = 64 << 10;

/// An exec node's output: its status, and the end of each stream (a test's verdict is at the
/// end), each kept up to [`OUTPUT_KEPT`].
pub fn exec_output(status: i64, stdout: &Bounded, stderr: &Bounded) -> Value {
    json!({"status": status, "stdout": stdout.text(), "stderr": stderr.text()})
}

/// Why an exec node failed, in a line a person reads first: the command, its status, and the
/// last lines it wrote to stderr (or stdout, when stderr is empty).
pub fn exec_failure(argv: &[String], status: i64, stdout: &Bounded, stderr: &Bounded) -> String {
    let said = if stderr.bytes.is_empty() {
        stdout.text()
    } else {
        stderr.text()
    };
    let tail: Vec<&str> = said.lines().rev().take(5).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    format!(
        "`{}` exited with status {status}{}{}",
        argv.join(" "),
        if tail.is_empty() { "" } else { ": " },
        tail.join(" | ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: Value) -> FlowNode {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn kinds() {
        assert_eq!(
            kind_of(&node(json!({"id": "c", "git": "clone"}))),
            Some(Kind::Clone)
        );
        assert_eq!(
            kind_of(&node(json!({"id": "p", "git": "push"}))),
            Some(Kind::Push)
        );
        assert_eq!(
            kind_of(&node(json!({"id": "t", "exec": ["make", "test"]}))),
            Some(Kind::Exec(vec!["make".into(), "test".into()]))
        );
        assert_eq!(
            kind_of(&node(json!({"id": "a", "agent": "x"}))),
            Some(Kind::Agent("x".into()))
        );
        assert_eq!(
            kind_of(&node(json!({"id": "d", "deep": "y"}))),
            Some(Kind::Deep("y".into()))
        );
        assert_eq!(
            kind_of(&node(
                json!({"id": "r", "acp": {"command": ["a"], "timeoutSeconds": 5}})
            )),
            Some(Kind::Acp(AcpAgent {
                command: vec!["a".into()],
                env: Vec::new(),
                prompt: None,
                permissions: Default::default(),
                timeout_seconds: Some(5),
            }))
        );
    }

    #[test]
    fn the_sandbox_gets_the_variables_the_flow_names_and_nothing_else() {
        let frozen = FrozenSandbox {
            image: None,
            cpus: Some(2.0),
            memory_bytes: Some(1 << 30),
            egress: vec!["pypi.org".into()],
            env: vec!["API_KEY".into()],
            runtime_class_name: Some("runc".into()),
        };
        let worker = |name: &str| match name {
            "API_KEY" => Some("k".to_string()),
            "AFE_GIT_TOKEN" => Some("never".to_string()),
            _ => None,
        };
        let spec = sandbox_spec("t", &frozen, worker).unwrap();
        assert_eq!(spec.image, "afe-sandbox");
        assert_eq!(
            spec.env,
            BTreeMap::from([("API_KEY".to_string(), "k".to_string())])
        );
        assert_eq!(spec.egress.len(), 1);
        let missing = sandbox_spec("t", &frozen, |_| None);
        assert!(
            matches!(missing, Err(SandboxError::VariableRefused { ref name, .. }) if name == "API_KEY")
        );
    }

    #[test]
    fn the_repository_comes_from_the_input() {
        assert_eq!(
            repository_of(&json!({"repository": "https://x/r.git", "branch": "dev"})).unwrap(),
            ("https://x/r.git".to_string(), Some("dev".to_string()))
        );
        assert_eq!(
            repository_of(&json!({"repository": "https://x/r.git"}))
                .unwrap()
                .1,
            None
        );
        let none = repository_of(&json!({"topic": "x"})).unwrap_err();
        assert_eq!(none.code(), "AFE-GIT-003");
    }

    #[test]
    fn a_failed_command_says_what_it_ran_and_its_last_words() {
        let mut stderr = Bounded::default();
        stderr.push(b"a\nb\nc\nd\ne\nf\nFAILED: test_x\n", 1 << 10);
        let line = exec_failure(
            &["make".into(), "test".into()],
            2,
            &Bounded::default(),
            &stderr,
        );
        assert_eq!(
            line,
            "`make test` exited with status 2: c | d | e | f | FAILED: test_x"
        );
    }
}
