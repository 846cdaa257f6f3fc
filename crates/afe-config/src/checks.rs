//! The meaning checks, after every document has its shape: names, references, `needs`, `when`,
//! Schema fields, prompts, tools, secrets named not written, gVisor refused. Each check reports and
//! goes on, so one run lists every mistake.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::Config;
use crate::diagnostic::{CfgCode, Diagnostic};
use crate::document::Document;
use crate::engine::AgentFlowEngineSpec;
use crate::fields::field_schema;
use crate::kinds::{AgentSpec, FlowNode, FlowSpec, PluginSpec, Sandbox, SchemaSpec};
use crate::names::{cel_variable, is_env_name, label_problem, suggested_label};
use crate::runtime::RuntimeSpec;
use crate::source::PromptSource;
use crate::structure::{Kind, Object};
use crate::when::free_variables;

/// The workspace tools every agent may be given.
pub const BUILTIN_TOOLS: [&str; 4] = ["ws.read", "ws.write", "ws.exec", "ws.test"];

pub(crate) struct Checker<'a> {
    documents: &'a [Document],
    pub(crate) problems: Vec<Diagnostic>,
    /// Objects whose shape was refused: a reference to one is not a second mistake.
    pub(crate) refused: BTreeSet<(Kind, String)>,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(documents: &'a [Document]) -> Checker<'a> {
        Checker {
            documents,
            problems: Vec::new(),
            refused: BTreeSet::new(),
        }
    }

    fn report(
        &mut self,
        document: usize,
        code: CfgCode,
        pointer: &str,
        message: String,
        help: String,
    ) {
        let diagnostic = self.documents[document].diagnostic(code, pointer, message, help);
        self.problems.push(diagnostic);
    }

    fn is_refused(&self, kind: Kind, name: &str) -> bool {
        self.refused.contains(&(kind, name.to_string()))
    }

    fn label(&mut self, document: usize, pointer: &str, name: &str, what: &str) {
        if let Some(why) = label_problem(name) {
            self.report(
                document,
                CfgCode::InvalidName,
                pointer,
                format!("{what} {name:?} is not a DNS-1123 label: {why}"),
                format!(
                    "Kubernetes refuses any other object name; write e.g. {:?}",
                    suggested_label(name)
                ),
            );
        }
    }

    fn env_names<'n>(
        &mut self,
        document: usize,
        pointer: &str,
        names: impl IntoIterator<Item = &'n String>,
    ) {
        for (i, name) in names.into_iter().enumerate() {
            if !is_env_name(name) {
                self.report(
                    document,
                    CfgCode::InvalidEnvName,
                    &format!("{pointer}/{i}"),
                    format!("{name:?} is not an environment variable name"),
                    "write a name of letters, digits and '_' (not starting with a digit); the value comes from the platform, never from the config".to_string(),
                );
            }
        }
    }

    fn env_name(&mut self, document: usize, pointer: &str, name: Option<&String>) {
        if let Some(name) = name
            && !is_env_name(name)
        {
            self.report(
                document,
                CfgCode::InvalidEnvName,
                pointer,
                format!("{name:?} is not an environment variable name"),
                "write the variable's name (e.g. AFE_DATABASE_URL), not its value".to_string(),
            );
        }
    }

    fn quantity(&mut self, document: usize, pointer: &str, text: Option<&String>) {
        if let Some(text) = text
            && let Err(err) = af_manifest::parse_quantity(text)
        {
            let err = match err {
                af_manifest::QuantityError::Malformed(why) => why,
                af_manifest::QuantityError::NotPositive => "it is not above zero".to_string(),
                af_manifest::QuantityError::TooLarge => "it is too large".to_string(),
            };
            self.report(
                document,
                CfgCode::InvalidQuantity,
                pointer,
                format!("{text:?} is not a Kubernetes quantity: {err}"),
                "write e.g. 512Mi, 4Gi or 20Gi".to_string(),
            );
        }
    }

    fn runtime_class(&mut self, document: usize, pointer: &str, class: Option<&String>) {
        if let Some(class) = class {
            let lower = class.to_ascii_lowercase();
            if lower.contains("gvisor") || lower.contains("runsc") {
                self.report(
                    document,
                    CfgCode::GvisorRefused,
                    pointer,
                    format!("runtime class {class:?} is gVisor, which does not implement the netfilter owner match netlock needs: the sandbox would look isolated without being so"),
                    "leave runtimeClassName out (runc) or name a Kata class".to_string(),
                );
            }
        }
    }

    fn one_of(&mut self, document: usize, pointer: &str, present: &[(&str, bool)]) {
        let set: Vec<&str> = present
            .iter()
            .filter(|(_, p)| *p)
            .map(|(n, _)| *n)
            .collect();
        let names: Vec<&str> = present.iter().map(|(n, _)| *n).collect();
        if set.len() != 1 {
            self.report(
                document,
                CfgCode::OneOf,
                pointer,
                if set.is_empty() {
                    format!("needs one of {}", names.join(", "))
                } else {
                    format!("has {}; it takes exactly one", set.join(" and "))
                },
                format!("write exactly one of {}", names.join(", ")),
            );
        }
    }
}

/// Every meaning check over a config whose documents all had their shape. Resolves prompts into
/// `config.prompts` on the way.
pub(crate) fn check(config: &mut Config, checker: &mut Checker<'_>, prompts: &PromptSource) {
    for schema in config.schemas.values() {
        check_schema(checker, schema);
    }
    for agent in config.agents.values() {
        check_agent(checker, agent, &config.plugins);
        if let Some(text) = resolve_prompt(checker, agent, prompts) {
            config.prompts.insert(agent.name.clone(), text);
        }
    }
    for flow in config.flows.values() {
        check_flow(checker, flow, config);
    }
    for plugin in config.plugins.values() {
        check_plugin(checker, plugin);
    }
    if let Some(runtime) = &config.runtime {
        check_runtime(checker, runtime);
    }
    for engine in &config.engines {
        check_engine(checker, engine);
    }
}

/// Object names, for every kind but the Runtime.
pub(crate) fn check_name(checker: &mut Checker<'_>, document: usize, name: &str, kind: &str) {
    checker.label(
        document,
        "/metadata/name",
        name,
        &format!("the {kind} name"),
    );
}

fn check_schema(checker: &mut Checker<'_>, schema: &Object<SchemaSpec>) {
    let d = schema.document;
    for (name, field) in &schema.spec.fields {
        if let Err(why) = field_schema(field) {
            checker.report(
                d,
                CfgCode::InvalidField,
                &format!("/spec/fields/{}", crate::document::escape(name)),
                format!("field {name:?}: {why}"),
                "write a type name or a JSON Schema mapping (e.g. {type: integer, minimum: 1})"
                    .to_string(),
            );
        }
    }
    for (i, name) in schema.spec.optional.iter().enumerate() {
        if !schema.spec.fields.contains_key(name) {
            checker.report(
                d,
                CfgCode::UnresolvedReference,
                &format!("/spec/optional/{i}"),
                format!("{name:?} is not a field of this Schema"),
                "list only fields written under spec.fields".to_string(),
            );
        }
    }
}

fn check_agent(
    checker: &mut Checker<'_>,
    agent: &Object<AgentSpec>,
    plugins: &BTreeMap<String, Object<PluginSpec>>,
) {
    let d = agent.document;
    let spec = &agent.spec;
    if spec.model.api_key_ref.is_some() && spec.model.api_key_env.is_some() {
        checker.report(
            d,
            CfgCode::OneOf,
            "/spec/model",
            "has both apiKeyRef and apiKeyEnv".to_string(),
            "write apiKeyRef on Kubernetes or apiKeyEnv on one machine, not both".to_string(),
        );
    }
    checker.env_name(d, "/spec/model/apiKeyEnv", spec.model.api_key_env.as_ref());
    if let Some(price) = &spec.model.price {
        for (key, value) in [("input", price.input), ("output", price.output)] {
            if !(value >= 0.0 && value.is_finite()) {
                checker.report(
                    d,
                    CfgCode::InvalidValue,
                    &format!("/spec/model/price/{key}"),
                    format!("a price of {value} dollars per million tokens is not a price"),
                    "write the provider's price per million tokens: zero or more".to_string(),
                );
            }
        }
    }
    if let Some(budget) = &spec.budget {
        check_budget(checker, d, "/spec/budget", budget.usd);
    }
    for (i, tool) in spec.tools.iter().enumerate() {
        let plugin = tool.split_once('.').map_or(tool.as_str(), |(p, _)| p);
        if checker.is_refused(Kind::Plugin, plugin) {
            continue;
        }
        if let Some((message, help)) = tool_problem(tool, plugins) {
            checker.report(
                d,
                CfgCode::UnknownTool,
                &format!("/spec/tools/{i}"),
                message,
                help,
            );
        }
    }
    if let Some(first) = &spec.first_tool
        && !spec.tools.contains(first)
    {
        checker.report(
            d,
            CfgCode::UnknownTool,
            "/spec/firstTool",
            format!("firstTool {first:?} is not one of the agent's tools"),
            "name one of spec.tools, or add it there".to_string(),
        );
    }
}

fn check_budget(checker: &mut Checker<'_>, document: usize, pointer: &str, usd: Option<f64>) {
    if let Some(usd) = usd
        && !(usd > 0.0 && usd.is_finite())
    {
        checker.report(
            document,
            CfgCode::InvalidValue,
            &format!("{pointer}/usd"),
            format!("a budget of {usd} dollars lets nothing run"),
            "write a positive amount".to_string(),
        );
    }
}

/// Why a tool name is not one an agent can be given.
fn tool_problem(
    tool: &str,
    plugins: &BTreeMap<String, Object<PluginSpec>>,
) -> Option<(String, String)> {
    if BUILTIN_TOOLS.contains(&tool) {
        return None;
    }
    let builtins = BUILTIN_TOOLS.join(", ");
    if tool.starts_with("ws.") {
        return Some((
            format!("{tool:?} is not a workspace tool"),
            format!("the workspace tools are {builtins}"),
        ));
    }
    let (plugin, name) = match tool.split_once('.') {
        Some((plugin, name)) => (plugin, Some(name)),
        None => (tool, None),
    };
    let Some(found) = plugins.get(plugin) else {
        return Some((
            format!("{tool:?} is neither a workspace tool nor a plugin's"),
            format!("write one of {builtins}, or PLUGIN / PLUGIN.TOOL for a Plugin of this config"),
        ));
    };
    match name {
        Some(name)
            if !found.spec.tools.is_empty() && !found.spec.tools.iter().any(|t| t == name) =>
        {
            Some((
                format!("plugin {plugin} does not offer {name:?}"),
                format!("its tools are {}", found.spec.tools.join(", ")),
            ))
        }
        _ => None,
    }
}

fn resolve_prompt(
    checker: &mut Checker<'_>,
    agent: &Object<AgentSpec>,
    prompts: &PromptSource,
) -> Option<String> {
    let d = agent.document;
    let spec = &agent.spec;
    match (&spec.prompt, &spec.prompt_ref) {
        (Some(text), None) => Some(text.clone()),
        (None, None) => {
            checker.report(
                d,
                CfgCode::Prompt,
                "/spec/prompt",
                "the agent has no prompt".to_string(),
                "write prompt: TEXT, or promptRef: {file: PATH} (folder) / {configMapKey: KEY} (custom resources)".to_string(),
            );
            None
        }
        (Some(_), Some(_)) => {
            checker.report(
                d,
                CfgCode::Prompt,
                "/spec/promptRef",
                "the agent has both prompt and promptRef".to_string(),
                "keep one of the two".to_string(),
            );
            None
        }
        (None, Some(reference)) => {
            let resolved = match (&reference.file, &reference.config_map_key) {
                (Some(file), None) => prompts.file(file),
                (None, Some(key)) => prompts.config_map_key(key),
                _ => Err((
                    "promptRef takes exactly one of file and configMapKey".to_string(),
                    "write promptRef: {file: PATH} in a folder, {configMapKey: KEY} in a custom resource".to_string(),
                )),
            };
            match resolved {
                Ok(text) => Some(text),
                Err((message, help)) => {
                    checker.report(d, CfgCode::Prompt, "/spec/promptRef", message, help);
                    None
                }
            }
        }
    }
}

fn check_flow(checker: &mut Checker<'_>, flow: &Object<FlowSpec>, config: &Config) {
    let d = flow.document;
    let spec = &flow.spec;
    if !config.schemas.contains_key(&spec.input) && !checker.is_refused(Kind::Schema, &spec.input) {
        checker.report(
            d,
            CfgCode::UnresolvedReference,
            "/spec/input",
            format!("there is no Schema named {:?}", spec.input),
            known("Schemas", config.schemas.keys()),
        );
    }
    if let Some(sandbox) = &spec.sandbox {
        check_sandbox(checker, d, sandbox);
    }
    if let Some(budget) = &spec.budget {
        check_budget(checker, d, "/spec/budget", budget.usd);
    }
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, node) in spec.nodes.iter().enumerate() {
        let at = format!("/spec/nodes/{i}");
        checker.label(d, &format!("{at}/id"), &node.id, "the node id");
        if let Some(first) = ids.insert(&node.id, i) {
            checker.report(
                d,
                CfgCode::Duplicate,
                &format!("{at}/id"),
                format!("node id {:?} is used twice (nodes[{first}] too)", node.id),
                "give every node of a flow its own id".to_string(),
            );
        }
        check_node(checker, d, &at, node, config);
    }
    for (i, node) in spec.nodes.iter().enumerate() {
        for (j, need) in node.needs.iter().enumerate() {
            if !ids.contains_key(need.as_str()) {
                checker.report(
                    d,
                    CfgCode::UnknownNeed,
                    &format!("/spec/nodes/{i}/needs/{j}"),
                    format!(
                        "node {:?} needs {need:?}, which this flow does not have",
                        node.id
                    ),
                    known("nodes", ids.keys()),
                );
            } else if need == &node.id {
                checker.report(
                    d,
                    CfgCode::NeedsCycle,
                    &format!("/spec/nodes/{i}/needs/{j}"),
                    format!("node {:?} needs itself", node.id),
                    "remove it from its own needs".to_string(),
                );
            }
        }
    }
    let needs = graph(&spec.nodes);
    for cycle in af_manifest::find_cycles(&needs) {
        let first = ids.get(cycle[0]).copied().unwrap_or(0);
        checker.report(
            d,
            CfgCode::NeedsCycle,
            &format!("/spec/nodes/{first}/needs"),
            format!("needs go round in a cycle: {}", cycle.join(" -> ")),
            "remove one of these needs; a flow is a graph without cycles".to_string(),
        );
    }
    for (i, node) in spec.nodes.iter().enumerate() {
        if let Some(when) = &node.when {
            check_when(checker, d, i, node, when, flow, &needs);
        }
    }
}

fn known<'k>(
    what: &str,
    names: impl Iterator<Item = &'k (impl AsRef<str> + 'k + ?Sized)>,
) -> String {
    let names: Vec<&str> = names.map(AsRef::as_ref).collect();
    if names.is_empty() {
        format!("this config has no {what}")
    } else {
        format!("the {what} are {}", names.join(", "))
    }
}

/// Node id → the ids it needs (those that exist, itself left out: reported on its own).
fn graph(nodes: &[FlowNode]) -> BTreeMap<&str, Vec<&str>> {
    let ids: BTreeSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    nodes
        .iter()
        .map(|n| {
            let needs = n
                .needs
                .iter()
                .map(String::as_str)
                .filter(|need| ids.contains(need) && *need != n.id)
                .collect();
            (n.id.as_str(), needs)
        })
        .collect()
}

/// Every node `id` needs, directly or through others.
fn transitive_needs<'a>(id: &'a str, needs: &BTreeMap<&'a str, Vec<&'a str>>) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![id];
    while let Some(at) = stack.pop() {
        for next in needs.get(at).into_iter().flatten() {
            if seen.insert(*next) {
                stack.push(next);
            }
        }
    }
    seen.remove(id);
    seen
}

fn check_sandbox(checker: &mut Checker<'_>, d: usize, sandbox: &Sandbox) {
    checker.runtime_class(
        d,
        "/spec/sandbox/runtimeClassName",
        sandbox.runtime_class_name.as_ref(),
    );
    checker.quantity(d, "/spec/sandbox/memory", sandbox.memory.as_ref());
    if let Some(cpus) = sandbox.cpus
        && !(cpus > 0.0 && cpus.is_finite())
    {
        checker.report(
            d,
            CfgCode::InvalidValue,
            "/spec/sandbox/cpus",
            format!("{cpus} CPUs cannot run anything"),
            "write a positive number, e.g. 2 or 0.5".to_string(),
        );
    }
    for (i, rule) in sandbox.egress.iter().enumerate() {
        let problem = match af_manifest::parse_host_rule(rule) {
            _ if rule.contains("://") => Some(format!(
                "egress rule {rule:?} is a URL; a rule names a host"
            )),
            Ok(af_manifest::HostRule::Exact(_) | af_manifest::HostRule::Wildcard(_)) => None,
            Ok(_) => Some(format!(
                "egress rule {rule:?} is an address; the sandbox's proxy allows host names only"
            )),
            Err(why) => Some(format!("egress rule {rule:?}: {why}")),
        };
        if let Some(message) = problem {
            checker.report(
                d,
                CfgCode::InvalidEgress,
                &format!("/spec/sandbox/egress/{i}"),
                message,
                "write a host name (pypi.org) or a wildcard (\"*.pythonhosted.org\")".to_string(),
            );
        }
    }
    checker.env_names(d, "/spec/sandbox/env", &sandbox.env);
}

fn check_node(checker: &mut Checker<'_>, d: usize, at: &str, node: &FlowNode, config: &Config) {
    checker.one_of(
        d,
        at,
        &[
            ("git", node.git.is_some()),
            ("agent", node.agent.is_some()),
            ("deep", node.deep.is_some()),
            ("acp", node.acp.is_some()),
            ("exec", node.exec.is_some()),
        ],
    );
    for (key, agent) in [("agent", &node.agent), ("deep", &node.deep)] {
        if let Some(agent) = agent
            && !config.agents.contains_key(agent)
            && !checker.is_refused(Kind::Agent, agent)
        {
            checker.report(
                d,
                CfgCode::UnresolvedReference,
                &format!("{at}/{key}"),
                format!("there is no Agent named {agent:?}"),
                known("Agents", config.agents.keys()),
            );
        }
    }
    if let Some(output) = &node.output {
        if node.agent.is_none() {
            checker.report(
                d,
                CfgCode::InvalidValue,
                &format!("{at}/output"),
                "output is a structured answer, which only an agent node gives".to_string(),
                "remove output, or make this an agent node".to_string(),
            );
        }
        if !config.schemas.contains_key(output) && !checker.is_refused(Kind::Schema, output) {
            checker.report(
                d,
                CfgCode::UnresolvedReference,
                &format!("{at}/output"),
                format!("there is no Schema named {output:?}"),
                known("Schemas", config.schemas.keys()),
            );
        }
    }
    let empty_command = |command: &[String]| command.first().is_none_or(|c| c.trim().is_empty());
    if let Some(exec) = &node.exec
        && empty_command(exec)
    {
        checker.report(
            d,
            CfgCode::InvalidValue,
            &format!("{at}/exec"),
            "the command is empty".to_string(),
            "write the command and its arguments, e.g. [make, test]".to_string(),
        );
    }
    if let Some(acp) = &node.acp {
        if empty_command(&acp.command) {
            checker.report(
                d,
                CfgCode::InvalidValue,
                &format!("{at}/acp/command"),
                "the command is empty".to_string(),
                "write the ACP agent's command, e.g. [claude-agent-acp]".to_string(),
            );
        }
        checker.env_names(d, &format!("{at}/acp/env"), &acp.env);
        check_timeout(
            checker,
            d,
            &format!("{at}/acp/timeoutSeconds"),
            acp.timeout_seconds,
        );
    }
}

fn check_when(
    checker: &mut Checker<'_>,
    d: usize,
    index: usize,
    node: &FlowNode,
    when: &str,
    flow: &Object<FlowSpec>,
    needs: &BTreeMap<&str, Vec<&str>>,
) {
    let pointer = format!("/spec/nodes/{index}/when");
    let used = match free_variables(when) {
        Ok(used) => used,
        Err(why) => {
            checker.report(
                d,
                CfgCode::WhenSyntax,
                &pointer,
                format!("{when:?} is not valid CEL: {why}"),
                "write a CEL expression, e.g. text_request.topic == 'k8s'".to_string(),
            );
            return;
        }
    };
    // Variable → the name it stands for (a Schema's or a node's, maybe with '-').
    let mut visible: BTreeMap<String, String> = BTreeMap::new();
    visible.insert(cel_variable(&flow.spec.input), flow.spec.input.clone());
    for id in transitive_needs(&node.id, needs) {
        visible.insert(cel_variable(id), id.to_string());
    }
    let all_nodes: BTreeSet<String> = flow
        .spec
        .nodes
        .iter()
        .map(|n| cel_variable(&n.id))
        .collect();
    for variable in used.iter().filter(|v| !visible.contains_key(*v)) {
        let dashed = std::iter::once(&flow.spec.input)
            .chain(flow.spec.nodes.iter().map(|n| &n.id))
            .find(|name| name.contains('-') && when.contains(name.as_str()));
        let help = if let Some(name) = dashed {
            format!(
                "write {} for {name}: in CEL, '-' is a subtraction, so {name:?} reads as {}",
                cel_variable(name),
                name.split('-').collect::<Vec<_>>().join(" minus ")
            )
        } else if all_nodes.contains(variable) {
            format!(
                "node {variable}'s output is visible only to nodes that need it (directly or through others); add it to this node's needs"
            )
        } else {
            format!(
                "the variables here are {}",
                visible.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        };
        checker.report(
            d,
            CfgCode::WhenVariable,
            &pointer,
            match dashed {
                Some(name) => format!(
                    "node {:?}: when writes {name:?}, which CEL reads as a subtraction of unknown variables",
                    node.id
                ),
                None => format!("node {:?}: when uses {variable:?}, which it cannot see", node.id),
            },
            help,
        );
        if dashed.is_some() {
            break; // one mistake, several pieces: say it once
        }
    }
}

fn check_plugin(checker: &mut Checker<'_>, plugin: &Object<PluginSpec>) {
    let d = plugin.document;
    let spec = &plugin.spec;
    checker.one_of(
        d,
        "/spec",
        &[
            ("stdio", spec.stdio.is_some()),
            ("http", spec.http.is_some()),
        ],
    );
    if let Some(stdio) = &spec.stdio {
        if stdio.command.first().is_none_or(|c| c.trim().is_empty()) {
            checker.report(
                d,
                CfgCode::InvalidValue,
                "/spec/stdio/command",
                "the command is empty".to_string(),
                "write the MCP server's command and arguments".to_string(),
            );
        }
        checker.env_names(d, "/spec/stdio/env", &stdio.env);
    }
    check_timeout(checker, d, "/spec/timeoutSeconds", spec.timeout_seconds);
}

/// A `timeoutSeconds` of 0 lets nothing run.
fn check_timeout(checker: &mut Checker<'_>, document: usize, pointer: &str, seconds: Option<u64>) {
    if seconds == Some(0) {
        checker.report(
            document,
            CfgCode::InvalidValue,
            pointer,
            "a timeout of 0 seconds lets nothing run".to_string(),
            "write how many seconds it may take, or leave it out for the default".to_string(),
        );
    }
}

fn check_runtime(checker: &mut Checker<'_>, runtime: &Object<RuntimeSpec>) {
    let d = runtime.document;
    let spec = &runtime.spec;
    if let Some(store) = &spec.store {
        checker.one_of(
            d,
            "/spec/store",
            &[
                ("sqlite", store.sqlite.is_some()),
                ("postgres", store.postgres.is_some()),
            ],
        );
        checker.env_name(
            d,
            "/spec/store/postgres/urlEnv",
            store.postgres.as_ref().map(|p| &p.url_env),
        );
    }
    if let Some(broker) = &spec.broker {
        checker.one_of(
            d,
            "/spec/broker",
            &[
                ("embedded", broker.embedded.is_some()),
                ("redis", broker.redis.is_some()),
            ],
        );
        checker.env_name(
            d,
            "/spec/broker/redis/urlEnv",
            broker.redis.as_ref().map(|r| &r.url_env),
        );
    }
    if let Some(tracer) = &spec.tracer {
        checker.env_name(
            d,
            "/spec/tracer/otlp/headersEnv",
            tracer.otlp.headers_env.as_ref(),
        );
    }
    if let Some(sandbox) = &spec.sandbox {
        checker.one_of(
            d,
            "/spec/sandbox",
            &[
                ("docker", sandbox.docker.is_some()),
                ("kubernetes", sandbox.kubernetes.is_some()),
            ],
        );
        if let Some(kubernetes) = &sandbox.kubernetes {
            checker.runtime_class(
                d,
                "/spec/sandbox/kubernetes/runtimeClassName",
                kubernetes.runtime_class_name.as_ref(),
            );
            checker.quantity(
                d,
                "/spec/sandbox/kubernetes/storage",
                kubernetes.storage.as_ref(),
            );
        }
    }
}

fn check_engine(checker: &mut Checker<'_>, engine: &Object<AgentFlowEngineSpec>) {
    let d = engine.document;
    let afe = &engine.spec.afe;
    checker.one_of(
        d,
        "/spec/afe/store",
        &[
            ("external", afe.store.external.is_some()),
            ("managed", afe.store.managed.is_some()),
        ],
    );
    checker.quantity(
        d,
        "/spec/afe/store/managed/storage",
        afe.store.managed.as_ref().and_then(|m| m.storage.as_ref()),
    );
    checker.one_of(
        d,
        "/spec/afe/broker",
        &[
            ("external", afe.broker.external.is_some()),
            ("managed", afe.broker.managed.is_some()),
        ],
    );
    checker.quantity(
        d,
        "/spec/afe/broker/managed/storage",
        afe.broker.managed.as_ref().and_then(|m| m.storage.as_ref()),
    );
    checker.runtime_class(
        d,
        "/spec/afe/sandbox/runtimeClassName",
        afe.sandbox.runtime_class_name.as_ref(),
    );
    checker.quantity(d, "/spec/afe/sandbox/storage", afe.sandbox.storage.as_ref());
    let deployment = engine.spec.deployment.as_ref();
    if let Some(image) = deployment.and_then(|d| d.image.as_ref())
        && image.tag.is_some() == image.digest.is_some()
    {
        checker.one_of(
            d,
            "/spec/deployment/image",
            &[
                ("tag", image.tag.is_some()),
                ("digest", image.digest.is_some()),
            ],
        );
    }
    if let Some(scaling) = deployment
        .and_then(|d| d.workers.as_ref())
        .and_then(|w| w.autoscaling.as_ref())
        && scaling.min_replicas > scaling.max_replicas
    {
        checker.report(
            d,
            CfgCode::InvalidValue,
            "/spec/deployment/workers/autoscaling",
            format!(
                "minReplicas {} is above maxReplicas {}",
                scaling.min_replicas, scaling.max_replicas
            ),
            "make minReplicas at most maxReplicas".to_string(),
        );
    }
}
