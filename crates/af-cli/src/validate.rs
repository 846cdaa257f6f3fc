//! `af validate`: check a manifest, report every problem, print the derived environment id.

use std::path::Path;

use af_manifest::{EnvironmentId, Manifest};
use serde::Serialize;

use crate::cli::ValidateArgs;
use crate::environment_name::environment_name;
use crate::exit::Exit;
use crate::problem_report;

#[derive(Serialize)]
struct ValidateOutput<'a> {
    valid: bool,
    file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    environment_id: Option<EnvironmentId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    environment_id_unavailable: Option<String>,
    problems: &'a [af_manifest::Problem],
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest: Option<&'a Manifest>,
}

pub fn run(args: &ValidateArgs, default_file: &Path, json: bool) -> anyhow::Result<Exit> {
    let file = args.file.as_deref().unwrap_or(default_file);
    tracing::debug!(file = %file.display(), "validating manifest");
    let manifest = match af_manifest::load(file) {
        Ok(manifest) => manifest,
        Err(invalid) => {
            if json {
                print_json(&ValidateOutput {
                    valid: false,
                    file: file.display().to_string(),
                    environment_id: None,
                    environment_id_unavailable: None,
                    problems: &invalid.problems,
                    manifest: None,
                })?;
            } else {
                eprint!("{}", problem_report::render(&invalid));
            }
            return Ok(Exit::InvalidManifest);
        }
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let id = environment_name(args.env.as_deref(), dir)
        .map(|env| EnvironmentId::derive(&manifest.name, &env));
    if json {
        let (environment_id, environment_id_unavailable) = match id {
            Ok(id) => (Some(id), None),
            Err(why) => (None, Some(why)),
        };
        print_json(&ValidateOutput {
            valid: true,
            file: file.display().to_string(),
            environment_id,
            environment_id_unavailable,
            problems: &[],
            manifest: Some(&manifest),
        })?;
    } else {
        println!("{} is valid: {}", file.display(), summary(&manifest));
        match id {
            Ok(id) => println!("environment id: {id}"),
            Err(why) => println!("environment id: unknown: {why}"),
        }
    }
    Ok(Exit::Success)
}

/// One line saying what the manifest describes.
fn summary(manifest: &Manifest) -> String {
    let names: Vec<&str> = manifest.services.keys().map(String::as_str).collect();
    let egress = &manifest.egress;
    format!(
        "{} service{} ({}), runtime {}, egress: {} allowed, {} captured, mail {}",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        names.join(", "),
        manifest.runtime.provider.as_str(),
        egress.allow.len(),
        egress.capture.len(),
        match egress.mail {
            af_manifest::MailPolicy::Capture => "captured",
            af_manifest::MailPolicy::Deny => "denied",
        }
    )
}

fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
