//! `providers.json`: provider connections and their credentials, durable across restarts.
//!
//! The file holds secrets, so it is created 0600, replaced atomically (write a temporary file, fsync it, rename
//! it over the old one, fsync the directory) and never logged. It also remembers the answers given to
//! `client_connect_id` and `client_request_id`, so a redelivered `provider.connect` or `provider.disconnect` is
//! answered as the first time, even after a restart.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use crate::data_dir::sync_dir;
use crate::error::RuntimeError;

pub const PROVIDERS_FILE_NAME: &str = "providers.json";

/// One connected provider.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredConnection {
    pub generation: u64,
    pub connected_at: String,
    /// Non-secret settings, such as `base_url` or the local provider's `script`.
    pub setup_values: BTreeMap<String, String>,
    /// `api_key` or `none`.
    pub auth_method: String,
    /// Secrets. Never logged; wiped from memory on drop.
    pub auth_values: BTreeMap<String, String>,
    /// The models the provider listed when it was connected (ids without the provider prefix).
    #[serde(default)]
    pub models: Vec<String>,
}

impl std::fmt::Debug for StoredConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredConnection")
            .field("generation", &self.generation)
            .field("connected_at", &self.connected_at)
            .field("setup_values", &self.setup_values)
            .field("auth_method", &self.auth_method)
            .field("auth_values", &self.auth_values.keys().collect::<Vec<_>>())
            .field("models", &self.models.len())
            .finish()
    }
}

impl Drop for StoredConnection {
    fn drop(&mut self) {
        for value in self.auth_values.values_mut() {
            value.zeroize();
        }
    }
}

/// The answer recorded for an idempotency key, as JSON, with a fingerprint of the request it answered.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordedAnswer {
    /// A hash of the request's content (secrets included, so a different key is a different request).
    pub request_fingerprint: String,
    pub answer: serde_json::Value,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProviderStoreContents {
    /// Connected providers by id.
    #[serde(default)]
    pub connections: BTreeMap<String, StoredConnection>,
    /// The last generation used per provider, so generations keep increasing across disconnects.
    #[serde(default)]
    pub generations: BTreeMap<String, u64>,
    /// Answers by `client_connect_id` / `client_request_id`.
    #[serde(default)]
    pub answers: BTreeMap<String, RecordedAnswer>,
}

/// A stable fingerprint of a request's content: the SHA-256 of its JSON, in hex. Stable across restarts and
/// builds, so a redelivery after a restart is still recognized.
pub fn request_fingerprint(request: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let mut encoded = serde_json::to_vec(request).unwrap_or_default();
    let digest = Sha256::digest(&encoded);
    encoded.zeroize();
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The file and its contents.
pub struct ProviderStore {
    path: PathBuf,
    pub contents: ProviderStoreContents,
}

impl ProviderStore {
    /// Reads the store; a missing file is an empty store.
    pub fn open(data_dir_root: &Path) -> Result<ProviderStore, RuntimeError> {
        let path = data_dir_root.join(PROVIDERS_FILE_NAME);
        let contents = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| RuntimeError::ConfigInvalid {
                path: path.clone(),
                detail: format!("not a valid providers file (line {}, column {})", error.line(), error.column()),
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => ProviderStoreContents::default(),
            Err(error) => return Err(RuntimeError::io("read", &path, error)),
        };
        Ok(ProviderStore { path, contents })
    }

    /// Makes the current contents durable, replacing the file atomically.
    pub fn save(&self) -> Result<(), RuntimeError> {
        let mut bytes = serde_json::to_vec_pretty(&self.contents).map_err(|error| RuntimeError::ConfigInvalid {
            path: self.path.clone(),
            detail: format!("cannot encode the providers file: {error}"),
        })?;
        let temporary = self.path.with_extension("json.tmp");
        let written = (|| {
            let mut file =
                std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()
        })();
        bytes.zeroize();
        written.map_err(|error| RuntimeError::io("write", &temporary, error))?;
        std::fs::rename(&temporary, &self.path).map_err(|error| RuntimeError::io("replace", &self.path, error))?;
        if let Some(parent) = self.path.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn round_trips_privately_and_never_debug_prints_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = ProviderStore::open(dir.path()).unwrap();
        assert!(store.contents.connections.is_empty());
        store.contents.connections.insert(
            "openai".into(),
            StoredConnection {
                generation: 1,
                connected_at: "t".into(),
                setup_values: BTreeMap::from([("base_url".into(), "http://127.0.0.1:1/v1".into())]),
                auth_method: "api_key".into(),
                auth_values: BTreeMap::from([("api_key".into(), "sk-very-secret".into())]),
                models: vec!["gpt-test".into()],
            },
        );
        store.save().unwrap();
        let mode = std::fs::metadata(dir.path().join(PROVIDERS_FILE_NAME)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let reopened = ProviderStore::open(dir.path()).unwrap();
        assert_eq!(reopened.contents, store.contents);
        assert!(!format!("{:?}", reopened.contents).contains("sk-very-secret"));
    }
}
