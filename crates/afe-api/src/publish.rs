//! Publishing a config folder as the current revision: validated with the same code as
//! `afe validate`, stored once, made current. Tickets already started keep theirs.

use std::path::Path;

use afe_config::{InvalidConfig, Revision};
use afe_store::{Admin, StoreError};

/// What publishing a folder did.
#[derive(Debug)]
pub enum Published {
    /// A new current revision.
    New(Revision),
    /// The folder's revision was already the current one.
    Unchanged(String),
    /// The folder is not a valid config: nothing changed, the current revision stays.
    Invalid(InvalidConfig),
}

pub async fn publish_folder(store: &dyn Admin, dir: &Path) -> Result<Published, StoreError> {
    let config = match afe_config::load_folder(dir) {
        Ok(config) => config,
        Err(invalid) => return Ok(Published::Invalid(invalid)),
    };
    let revision = Revision::of(&config);
    let pins = revision.pin_problems(&config);
    if !pins.is_empty() {
        return Ok(Published::Invalid(InvalidConfig { diagnostics: pins }));
    }
    store
        .put_revision(&revision.hash, &revision.normalized)
        .await?;
    if store.publish_revision(&revision.hash).await? {
        Ok(Published::New(revision))
    } else {
        Ok(Published::Unchanged(revision.hash))
    }
}
