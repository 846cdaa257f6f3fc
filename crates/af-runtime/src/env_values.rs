//! The values a manifest takes from af's own environment (`from_env`), checked before anything is
//! created: a missing one found while a service is started stops `up` half-way, after the
//! namespace, the sidecar and the probe.

use af_manifest::{DatabaseProvider, EnvValue, Manifest};

use crate::{RuntimeError, RuntimeErrorKind};

/// Each value of `manifest` taken from the environment that `lookup` does not have, as
/// `web's STRIPE_KEY from STRIPE_SECRET`, in the services' name order, then an external
/// database's URL (`the database's URL from STAGING_DATABASE_URL`).
pub fn missing_env_values(
    manifest: &Manifest,
    lookup: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let services = manifest.services.values().flat_map(|service| {
        service.env.iter().filter_map(|(name, value)| match value {
            EnvValue::FromEnv(source) if lookup(source).is_none() => {
                Some(format!("{}'s {name} from {source}", service.name))
            }
            _ => None,
        })
    });
    let database = manifest
        .database
        .iter()
        .filter_map(|database| match &database.provider {
            DatabaseProvider::External { url_from_env, .. } if lookup(url_from_env).is_none() => {
                Some(format!("the database's URL from {url_from_env}"))
            }
            _ => None,
        });
    services.chain(database).collect()
}

/// AF-RUN-060 unless every value `manifest` takes from af's environment is set there.
pub fn require_env_values(manifest: &Manifest) -> Result<(), RuntimeError> {
    require_env_values_in(manifest, |name| std::env::var(name).ok())
}

/// [`require_env_values`] with af's environment read through `lookup`.
pub fn require_env_values_in(
    manifest: &Manifest,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(), RuntimeError> {
    let missing = missing_env_values(manifest, lookup);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(RuntimeErrorKind::EnvValueMissing { missing }.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_missing_value_is_named_with_its_service_and_source() {
        let manifest = af_manifest::parse(
            "name: shop\nruntime: {provider: local}\nservices:\n  web:\n    image: w\n    env: {KEY: {from_env: STRIPE_SECRET}, MODE: test, TOKEN: {from_env: SET_ONE}}\n  worker:\n    image: x\n    env: {DB: {from_env: DB_URL}}\ndatabase: {provider: external, url_from_env: STAGING_DB}\n",
            "af.yaml",
        )
        .unwrap();
        let missing = missing_env_values(&manifest, |name| {
            (name == "SET_ONE").then(|| "value".to_string())
        });
        assert_eq!(
            missing,
            [
                "web's KEY from STRIPE_SECRET",
                "worker's DB from DB_URL",
                "the database's URL from STAGING_DB"
            ]
        );
    }
}
