//! A whole config: every document of a source checked for shape, then for meaning, then gathered
//! by kind. Either every check passes and a [`Config`] comes back, or every problem found does.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::checks::{Checker, check, check_name};
use crate::diagnostic::{CfgCode, InvalidConfig, Place};
use crate::document::Document;
use crate::engine::AgentFlowEngineSpec;
use crate::kinds::{AgentSpec, FlowSpec, PluginSpec, SchemaSpec};
use crate::runtime::RuntimeSpec;
use crate::source::{PromptSource, Read, read_cluster_folder, read_folder, read_objects};
use crate::structure::{Kind, Object, Parsed};

/// A valid config. Only [`load_folder`] and [`load_objects`] make one.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub schemas: BTreeMap<String, Object<SchemaSpec>>,
    pub agents: BTreeMap<String, Object<AgentSpec>>,
    pub flows: BTreeMap<String, Object<FlowSpec>>,
    pub plugins: BTreeMap<String, Object<PluginSpec>>,
    /// The Runtime document, when the source has one (not part of a revision).
    pub runtime: Option<Object<RuntimeSpec>>,
    /// AgentFlowEngine documents the source holds (not part of a revision).
    pub engines: Vec<Object<AgentFlowEngineSpec>>,
    /// Each agent's prompt text, with references resolved.
    pub prompts: BTreeMap<String, String>,
    /// The documents read, for the places of later reports.
    documents: Vec<Document>,
}

impl Config {
    /// The place of `pointer` in the document an object came from (`Object::document`).
    pub fn place(&self, document: usize, pointer: &str) -> Place {
        self.documents[document].place(pointer)
    }
}

/// Loads a config folder: every `*.yaml` / `*.yml` file in it.
pub fn load_folder(dir: &Path) -> Result<Config, InvalidConfig> {
    assemble(read_folder(dir), &PromptSource::Folder(dir.to_path_buf()))
}

/// Loads a config from custom resources, as the API server returns them, and the ConfigMap named
/// `config_map` with its keys (`data`): the operator's source.
pub fn load_objects(
    objects: &[Value],
    config_map: &str,
    data: &BTreeMap<String, String>,
) -> Result<Config, InvalidConfig> {
    assemble(
        read_objects(objects, config_map, data),
        &PromptSource::ConfigMap {
            name: config_map.to_string(),
            data: data.clone(),
        },
    )
}

/// Loads a folder of what `kubectl apply` takes (custom resources and exactly one ConfigMap, the
/// config's source) as the operator reads the same objects from a cluster: prompts from the
/// ConfigMap's keys, never from files.
pub fn load_cluster_folder(dir: &Path) -> Result<Config, InvalidConfig> {
    let (read, mut sources) = read_cluster_folder(dir);
    if sources.len() != 1 {
        let mut problems = read.problems;
        problems.push(crate::diagnostic::Diagnostic {
            code: CfgCode::Unreadable,
            place: Place {
                origin: crate::diagnostic::Origin::File(dir.to_path_buf()),
                line_column: None,
                path: String::new(),
            },
            message: format!(
                "the folder holds {} ConfigMaps; a cluster's config comes from exactly one (spec.config.configMapRef)",
                sources.len()
            ),
            help: "keep the config's ConfigMap in the folder, and only it".to_string(),
        });
        return Err(InvalidConfig {
            diagnostics: problems,
        });
    }
    let source = sources.remove(0);
    assemble(
        read,
        &PromptSource::ConfigMap {
            name: source.name,
            data: source.data,
        },
    )
}

fn assemble(read: Read, prompts: &PromptSource) -> Result<Config, InvalidConfig> {
    let Read {
        documents,
        mut problems,
    } = read;
    let mut config = Config {
        schemas: BTreeMap::new(),
        agents: BTreeMap::new(),
        flows: BTreeMap::new(),
        plugins: BTreeMap::new(),
        runtime: None,
        engines: Vec::new(),
        prompts: BTreeMap::new(),
        documents: Vec::new(),
    };
    let mut checker = Checker::new(&documents);
    for (index, document) in documents.iter().enumerate() {
        let parsed = match crate::structure::check(document, index) {
            Ok(parsed) => parsed,
            Err(found) => {
                problems.extend(found);
                // Its problems are reported; references to it are not reported again.
                if let (Some(kind), Some(name)) =
                    (document.kind().and_then(Kind::parse), document.name())
                {
                    checker.refused.insert((kind, name.to_string()));
                }
                continue;
            }
        };
        let first = match parsed {
            Parsed::Schema(o) => insert(&mut config.schemas, o, "Schema", &mut checker),
            Parsed::Agent(o) => insert(&mut config.agents, o, "Agent", &mut checker),
            Parsed::Flow(o) => insert(&mut config.flows, o, "Flow", &mut checker),
            Parsed::Plugin(o) => insert(&mut config.plugins, o, "Plugin", &mut checker),
            Parsed::AgentFlowEngine(o) => {
                check_name(&mut checker, o.document, &o.name, "AgentFlowEngine");
                config.engines.push(*o);
                None
            }
            Parsed::Runtime(o) => match &config.runtime {
                Some(kept) => Some(kept.document),
                None => {
                    config.runtime = Some(o);
                    None
                }
            },
        };
        if let Some(first) = first {
            problems.push(document.diagnostic(
                CfgCode::Duplicate,
                "/metadata/name",
                format!(
                    "a second {} {:?}; the first is in {}",
                    document.kind().unwrap_or("object"),
                    document.name().unwrap_or(""),
                    documents[first].origin
                ),
                "give each object of a kind its own name, or remove one".to_string(),
            ));
        }
    }
    check(&mut config, &mut checker, prompts);
    problems.extend(checker.problems);
    if problems.is_empty() {
        config.documents = documents;
        Ok(config)
    } else {
        problems.sort_by(|a, b| a.place.cmp(&b.place));
        Err(InvalidConfig {
            diagnostics: problems,
        })
    }
}

/// Adds an object under its name; a name already taken returns the first one's document.
fn insert<S>(
    map: &mut BTreeMap<String, Object<S>>,
    object: Object<S>,
    kind: &str,
    checker: &mut Checker<'_>,
) -> Option<usize> {
    if let Some(first) = map.get(&object.name) {
        return Some(first.document);
    }
    check_name(checker, object.document, &object.name, kind);
    map.insert(object.name.clone(), object);
    None
}
