//! Where a config comes from, and how its prompts are found: a folder (every `*.yaml` / `*.yml`
//! file in it, several documents each allowed; `promptRef: {file}` relative to it), or a
//! cluster's custom resources plus the ConfigMap that `spec.config.configMapRef` names (its keys
//! ending in `.yaml`/`.yml` are manifests too; `promptRef: {configMapKey}` names any key).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::diagnostic::{CfgCode, Diagnostic, Origin, Place};
use crate::document::Document;

/// Where prompt references are resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptSource {
    Folder(PathBuf),
    ConfigMap {
        name: String,
        data: BTreeMap<String, String>,
    },
}

/// Why a prompt reference cannot be resolved: the message and what to do.
pub type PromptProblem = (String, String);

impl PromptSource {
    /// The text of `promptRef: {file}`.
    pub fn file(&self, path: &str) -> Result<String, PromptProblem> {
        let PromptSource::Folder(root) = self else {
            return Err((
                "promptRef.file needs a folder: a custom resource has no files beside it".to_string(),
                "put the prompt in a key of the config's ConfigMap and write promptRef: {configMapKey: KEY}".to_string(),
            ));
        };
        let relative = Path::new(path);
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err((
                format!("{path:?} leaves the config folder"),
                "write a path relative to the folder, without '..' or a leading '/'".to_string(),
            ));
        }
        std::fs::read_to_string(root.join(relative)).map_err(|err| {
            (
                format!("cannot read {}: {err}", root.join(relative).display()),
                "create the file or fix the path (relative to the config folder)".to_string(),
            )
        })
    }

    /// The text of `promptRef: {configMapKey}`.
    pub fn config_map_key(&self, key: &str) -> Result<String, PromptProblem> {
        match self {
            PromptSource::Folder(_) => Err((
                "promptRef.configMapKey needs a ConfigMap: this config is a folder".to_string(),
                "write promptRef: {file: PATH}, relative to the folder; or, if these are the objects you apply to a cluster with their ConfigMap, check them with `afe validate --objects`".to_string(),
            )),
            PromptSource::ConfigMap { name, data } => data.get(key).cloned().ok_or_else(|| {
                (
                    format!("the ConfigMap {name} has no key {key:?}"),
                    format!(
                        "add the key to the ConfigMap, or name one it has: {}",
                        data.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            }),
        }
    }
}

/// The documents of a source, in a stable order, and the problems met reading them.
#[derive(Debug, Default)]
pub struct Read {
    pub documents: Vec<Document>,
    pub problems: Vec<Diagnostic>,
}

impl Read {
    fn text(&mut self, origin: Origin, text: &str) {
        match af_manifest::tree::parse_documents(text) {
            Ok(trees) => {
                for tree in &trees {
                    let (document, duplicates) = Document::from_tree(origin.clone(), tree);
                    self.documents.push(document);
                    self.problems.extend(duplicates);
                }
            }
            Err(syntax) => self.problems.push(Diagnostic {
                code: CfgCode::Syntax,
                place: Place {
                    origin,
                    line_column: Some((syntax.location.line, syntax.location.column)),
                    path: String::new(),
                },
                message: format!("this is not valid YAML: {}", syntax.message),
                help: "fix the YAML at this place; indentation must use spaces".to_string(),
            }),
        }
    }
}

fn is_manifest_name(name: &str) -> bool {
    name.ends_with(".yaml") || name.ends_with(".yml")
}

/// Reads every `*.yaml` / `*.yml` file directly in `dir`, in name order.
pub fn read_folder(dir: &Path) -> Read {
    let mut read = Read::default();
    let unreadable = |message: String| Diagnostic {
        code: CfgCode::Unreadable,
        place: Place {
            origin: Origin::File(dir.to_path_buf()),
            line_column: None,
            path: String::new(),
        },
        message,
        help: "point -c at the folder that holds the config's *.yaml files".to_string(),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) => {
            read.problems
                .push(unreadable(format!("cannot read the folder: {err}")));
            return read;
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.to_str().is_some_and(is_manifest_name))
        .collect();
    files.sort();
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => read.text(Origin::File(file), &text),
            Err(err) => read.problems.push(Diagnostic {
                place: Place {
                    origin: Origin::File(file),
                    line_column: None,
                    path: String::new(),
                },
                ..unreadable(format!("cannot read the file: {err}"))
            }),
        }
    }
    if read.documents.is_empty() && read.problems.is_empty() {
        read.problems.push(unreadable(
            "the folder holds no *.yaml manifest".to_string(),
        ));
    }
    read
}

/// Metadata the API server writes; none of it is part of what a person configured.
const SERVER_METADATA: [&str; 9] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "ownerReferences",
    "finalizers",
];

/// An object as the API server returns it, without what the server adds (`status`, server
/// metadata, `selfLink`, `generateName`): the file it was applied from.
pub fn as_applied(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
            for key in SERVER_METADATA.iter().chain(&["selfLink", "generateName"]) {
                metadata.remove(*key);
            }
        }
    }
    object
}

/// Reads custom resources as the API server returns them, and the ConfigMap's manifest keys.
/// What the server adds (`status`, server metadata, `selfLink`, `generateName`) is dropped first,
/// so an object read back from a cluster is checked like the file it was applied from.
pub fn read_objects(objects: &[Value], config_map: &str, data: &BTreeMap<String, String>) -> Read {
    let mut read = Read::default();
    for object in objects {
        let object = as_applied(object);
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("?");
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let origin = Origin::Object(format!("{kind}/{name}"));
        read.documents.push(Document::from_object(origin, object));
    }
    for (key, text) in data.iter().filter(|(k, _)| is_manifest_name(k)) {
        read.text(
            Origin::Object(format!("ConfigMap/{config_map}[{key}]")),
            text,
        );
    }
    read
}

/// The config's ConfigMap, as a folder of cluster objects holds it.
#[derive(Debug)]
pub struct SourceMap {
    pub name: String,
    pub data: BTreeMap<String, String>,
}

/// Reads a folder of what `kubectl apply` takes — custom resources and the config's ConfigMap —
/// as the operator would read them from the cluster: the ConfigMap's keys are its prompts, and
/// those ending in `.yaml` / `.yml` are manifests too. Problems keep their files and lines.
pub fn read_cluster_folder(dir: &Path) -> (Read, Vec<SourceMap>) {
    let mut read = read_folder(dir);
    let (maps, documents): (Vec<Document>, Vec<Document>) = std::mem::take(&mut read.documents)
        .into_iter()
        .partition(|d| d.kind() == Some("ConfigMap"));
    read.documents = documents;
    let mut sources = Vec::new();
    for map in maps {
        let name = map.name().unwrap_or("").to_string();
        let mut data = BTreeMap::new();
        if let Some(entries) = map.value.get("data").and_then(Value::as_object) {
            for (key, value) in entries {
                match value.as_str() {
                    Some(text) => {
                        data.insert(key.clone(), text.to_string());
                    }
                    None => read.problems.push(map.diagnostic(
                        CfgCode::InvalidValue,
                        &format!("/data/{}", crate::document::escape(key)),
                        format!("ConfigMap key {key:?} is not text"),
                        "a ConfigMap's data values are strings".to_string(),
                    )),
                }
            }
        }
        for (key, text) in data.iter().filter(|(k, _)| is_manifest_name(k)) {
            read.text(Origin::Object(format!("ConfigMap/{name}[{key}]")), text);
        }
        sources.push(SourceMap { name, data });
    }
    (read, sources)
}
