//! The `af` environment manifest (`af.yaml`): its types, and the parser that turns YAML text into
//! a validated, normalized [`Manifest`] or a list of every problem in it, each with a stable
//! `AF-MAN-0xx` code, a line and column, and what to write instead.
//!
//! ```
//! let manifest = af_manifest::parse(
//!     "name: shop\nruntime: {provider: local}\nservices:\n  web: {image: shop/web, port: 8080}\n",
//!     "af.yaml",
//! ).unwrap();
//! assert_eq!(manifest.services["web"].port, Some(8080));
//! ```

mod cron;
mod decode;
mod dependencies;
mod diagnostic;
mod egress_match;
mod egress_rule;
mod environment_id;
mod model;
mod names;
mod quantity;
mod reader;
mod secrets;
pub mod tree;

use std::path::Path;

pub use cron::{CronSchedule, parse_cron};
pub use decode::{DEFAULT_DATABASE_IMAGE, MAX_MANIFEST_NAME_LEN, MAX_SERVICE_NAME_LEN};
pub use dependencies::find_cycles;
pub use diagnostic::{InvalidManifest, Location, ManifestCode, Problem};
pub use egress_match::RuleMatch;
pub use egress_rule::{HostRule, parse_host_rule};
pub use environment_id::{EnvironmentId, MAX_ENVIRONMENT_ID_LEN, MAX_NAMESPACE_PREFIX_LEN};
pub use model::{
    CannedResponse, CaptureRule, Database, DatabaseEngine, DatabaseProvider, EgressPolicy,
    EnvValue, ImageSource, MailPolicy, Manifest, Provider, Resources, RuntimeSettings, Service,
};
pub use names::is_env_name;
pub use quantity::{Quantity, QuantityError, parse_quantity};

/// Parses and validates manifest text. `file` names the source in problems; nothing is read from
/// disk, so relative paths (build contexts) are not checked — [`load`] does that.
pub fn parse(source: &str, file: impl AsRef<Path>) -> Result<Manifest, InvalidManifest> {
    let file = file.as_ref();
    let invalid = |problems| InvalidManifest {
        file: file.to_path_buf(),
        source_text: source.to_string(),
        problems,
    };
    let root = tree::parse_tree(source).map_err(|problem| invalid(vec![problem]))?;
    let mut reader = reader::Reader::new(source);
    match decode::decode_manifest(&mut reader, &root) {
        Some(manifest) if reader.problems.is_empty() => Ok(manifest),
        _ => Err(invalid(reader.problems.into_sorted())),
    }
}

/// Reads, parses and validates a manifest file, and checks that the folders it names (build
/// contexts, relative to the manifest's folder) exist.
pub fn load(path: impl AsRef<Path>) -> Result<Manifest, InvalidManifest> {
    let path = path.as_ref();
    let source = std::fs::read_to_string(path).map_err(|err| InvalidManifest {
        file: path.to_path_buf(),
        source_text: String::new(),
        problems: vec![Problem {
            code: ManifestCode::Unreadable,
            message: format!("cannot read {}: {err}", path.display()),
            help: "check the path, or pass the manifest with --manifest FILE".to_string(),
            location: None,
        }],
    })?;
    let manifest = parse(&source, path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let missing: Vec<Problem> = manifest
        .services
        .values()
        .filter_map(|service| match &service.source {
            ImageSource::Build { context, .. } if !base.join(context).is_dir() => Some(Problem {
                code: ManifestCode::BuildContextMissing,
                message: format!(
                    "service {:?} builds from {}, which is not a folder",
                    service.name,
                    base.join(context).display()
                ),
                help: "build.context is relative to the manifest's folder; fix the path or create the folder".to_string(),
                location: locate_build(&source, &service.name),
            }),
            _ => None,
        })
        .collect();
    if missing.is_empty() {
        Ok(manifest)
    } else {
        Err(InvalidManifest {
            file: path.to_path_buf(),
            source_text: source,
            problems: missing,
        })
    }
}

/// Where a service's `build` key was written, found again in the text (the validated manifest no
/// longer carries places).
fn locate_build(source: &str, service: &str) -> Option<Location> {
    let root = tree::parse_tree(source).ok()?;
    let mut reader = reader::Reader::new(source);
    let top = reader.entries(&root, "");
    let services = top.iter().find(|e| e.key == "services")?;
    let entries = reader.entries(services.value, "");
    let service = entries.iter().find(|e| e.key == service)?;
    let fields = reader.entries(service.value, "");
    fields.iter().find(|e| e.key == "build").map(|e| e.key_at)
}
