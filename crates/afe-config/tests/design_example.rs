//! The manifests exactly as the design (AFE.md, "Manifests") writes them are read as written: the
//! shorthand and fragment fields, an inline prompt with template braces, the budget, the sandbox,
//! each node kind in flow style, `when` with the `_` spelling. Only what AFE.md leaves out for
//! brevity is added: `apiVersion` on every document, a sandbox image, the `plan` Schema and the
//! `planner` Agent its nodes name.

mod support;

const AFE_MD: &str = r#"
apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {name: text-request, annotations: {afe.dev/description: What the user asks}}
spec:
  fields:
    topic: string                       # shorthand
    priority: {type: integer, minimum: 1}   # or a JSON Schema fragment
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {name: coder}
spec:
  model: {provider: openrouter, name: anthropic/claude-sonnet-4}   # OpenAI-compatible endpoint
  prompt: "You fix the bug described in {{ text_request.topic }}."  # or promptRef: {file: prompts/coder.md}
  tools: [ws.read, ws.write, ws.exec, ws.test]
  budget: {usd: 2.00, turns: 40}
---
apiVersion: afe.dev/v1alpha1
kind: Flow
metadata: {name: fix}
spec:
  input: text-request
  sandbox: {image: afe-sandbox, cpus: 2, memory: 4Gi, egress: [pypi.org, "*.pythonhosted.org"]}
  nodes:
    - {id: clone, git: clone}
    - {id: plan, agent: planner, output: plan}            # one call, structured output validated by Schema `plan`
    - {id: fix, deep: coder, needs: [plan], when: "text_request.topic == 'k8s'"}   # tool loop in the workspace
    - {id: review, acp: {command: [claude-agent-acp]}, needs: [fix]}   # an ACP agent inside the sandbox
    - {id: test, exec: [make, test], needs: [fix]}
    - {id: push, git: push, needs: [test]}
"#;

const ADDED: &str = r#"
apiVersion: afe.dev/v1alpha1
kind: Schema
metadata: {name: plan}
spec:
  fields:
    steps: {type: array, items: {type: string}}
---
apiVersion: afe.dev/v1alpha1
kind: Agent
metadata: {name: planner}
spec:
  model: {provider: openrouter, name: anthropic/claude-sonnet-4}
  prompt: "Plan the fix of {{ text_request.topic }}."
"#;

#[test]
fn the_design_documents_manifests_are_read_as_written() {
    let dir = support::scratch("design");
    std::fs::write(dir.join("afe.yaml"), AFE_MD).unwrap();
    std::fs::write(dir.join("added.yaml"), ADDED).unwrap();
    let config = afe_config::load_folder(&dir).unwrap_or_else(|e| panic!("{e}"));
    let flow = &config.flows["fix"].spec;
    assert_eq!(flow.nodes.len(), 6);
    assert_eq!(
        config.schemas["text-request"].description.as_deref(),
        Some("What the user asks")
    );
    assert_eq!(
        config.agents["coder"].spec.budget.as_ref().unwrap().turns,
        Some(40)
    );
    // Without the added objects, exactly the two references fail.
    std::fs::remove_file(dir.join("added.yaml")).unwrap();
    let invalid = afe_config::load_folder(&dir).unwrap_err();
    assert_eq!(
        invalid.codes(),
        [
            afe_config::CfgCode::UnresolvedReference,
            afe_config::CfgCode::UnresolvedReference
        ],
        "{invalid}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
