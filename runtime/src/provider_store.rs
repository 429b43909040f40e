//! `providers.json`: provider connections and their credentials, durable across restarts.
//!
//! The file holds secrets, so it is created 0600, replaced atomically (write a temporary file, fsync it, rename
//! it over the old one, fsync the directory) and never logged. It also remembers the answers given to
//! `client_connect_id` and `client_request_id`, so a redelivered `provider.connect` or `provider.disconnect` is
//! answered as the first time, even after a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use crate::data_dir::{Durability, replace_file};
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
    /// When it was recorded (RFC 3339 UTC); empty in files written before answers were bounded.
    #[serde(default)]
    pub recorded_at: String,
}

/// How many answers are kept at most, newest first: a redelivery is recognised among the last this many.
pub const MAX_RECORDED_ANSWERS: usize = 256;

/// How long an answer is kept: a redelivery is recognised within this time.
pub const RECORDED_ANSWER_AGE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

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

impl ProviderStoreContents {
    /// Records the answer to the request `key` with its fingerprint, and forgets answers older than
    /// [`RECORDED_ANSWER_AGE`] and beyond the newest [`MAX_RECORDED_ANSWERS`], so the file stays small however long
    /// the daemon runs. Returns what it recorded.
    pub fn record_answer(
        &mut self,
        key: String,
        request_fingerprint: String,
        answer: serde_json::Value,
    ) -> RecordedAnswer {
        let recorded_at = crate::clock::now_rfc3339();
        let recorded = RecordedAnswer { request_fingerprint, answer, recorded_at };
        self.answers.insert(key, recorded.clone());
        let oldest_kept = crate::clock::rfc3339_ago(RECORDED_ANSWER_AGE);
        self.answers.retain(|_, recorded| recorded.recorded_at >= oldest_kept);
        if self.answers.len() > MAX_RECORDED_ANSWERS {
            let mut times: Vec<&str> = self.answers.values().map(|recorded| recorded.recorded_at.as_str()).collect();
            times.sort_unstable_by(|a, b| b.cmp(a));
            let cutoff = times[MAX_RECORDED_ANSWERS - 1].to_owned();
            self.answers.retain(|_, recorded| recorded.recorded_at >= cutoff);
        }
        recorded
    }
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
    /// Reads the store; a missing file (or a directory in its place) is an empty store.
    pub fn open(data_dir_root: &Path) -> Result<ProviderStore, RuntimeError> {
        let path = data_dir_root.join(PROVIDERS_FILE_NAME);
        let contents = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| RuntimeError::ConfigInvalid {
                path: path.clone(),
                detail: format!("not a valid providers file (line {}, column {})", error.line(), error.column()),
            })?,
            // A directory in its place holds no keys either; the daemon's start check reports it
            // (`DataDir::misplaced_files`), and a save fails until it is removed.
            Err(error) if matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory) => {
                ProviderStoreContents::default()
            }
            Err(error) => return Err(RuntimeError::io("read", &path, error)),
        };
        Ok(ProviderStore { path, contents })
    }

    /// The same file with other contents, e.g. a change to save on a blocking thread before it is adopted.
    pub fn staged(&self, contents: ProviderStoreContents) -> ProviderStore {
        ProviderStore { path: self.path.clone(), contents }
    }

    /// Makes the current contents durable, replacing the file atomically. Blocking (two `fsync`s): never on an
    /// actor's thread.
    pub fn save(&self) -> Result<(), RuntimeError> {
        crate::blocking::assert_may_block();
        let mut bytes = serde_json::to_vec_pretty(&self.contents).map_err(|error| RuntimeError::ConfigInvalid {
            path: self.path.clone(),
            detail: format!("cannot encode the providers file: {error}"),
        })?;
        let written = replace_file(&self.path, &bytes, Durability::Durable);
        bytes.zeroize();
        written
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn recorded_answers_are_bounded_by_count_and_age() {
        let mut contents = ProviderStoreContents::default();
        // Written by an older daemon (no time) and long ago: forgotten at the next answer.
        contents.answers.insert(
            "legacy".into(),
            RecordedAnswer {
                request_fingerprint: "f".into(),
                answer: serde_json::Value::Null,
                recorded_at: String::new(),
            },
        );
        contents.answers.insert(
            "old".into(),
            RecordedAnswer {
                request_fingerprint: "f".into(),
                answer: serde_json::Value::Null,
                recorded_at: "2020-01-01T00:00:00.000Z".into(),
            },
        );
        for index in 0..MAX_RECORDED_ANSWERS + 40 {
            contents.record_answer(format!("key-{index:04}"), "f".into(), serde_json::json!(index));
        }
        assert!(contents.answers.len() <= MAX_RECORDED_ANSWERS + 40, "{}", contents.answers.len());
        assert!(!contents.answers.contains_key("legacy") && !contents.answers.contains_key("old"));
        let newest = format!("key-{:04}", MAX_RECORDED_ANSWERS + 39);
        assert!(contents.answers.contains_key(&newest), "the newest answer is kept");
        // Recorded within the same millisecond, many tie at the cut; spread out, the count bound is exact.
        let mut spread = ProviderStoreContents::default();
        for index in 0..MAX_RECORDED_ANSWERS + 10 {
            spread.answers.insert(
                format!("key-{index:04}"),
                RecordedAnswer {
                    request_fingerprint: "f".into(),
                    answer: serde_json::Value::Null,
                    recorded_at: crate::clock::rfc3339_ago(std::time::Duration::from_secs(1000 - index as u64)),
                },
            );
        }
        spread.record_answer("latest".into(), "f".into(), serde_json::Value::Null);
        assert_eq!(spread.answers.len(), MAX_RECORDED_ANSWERS);
        assert!(spread.answers.contains_key("latest") && !spread.answers.contains_key("key-0000"));
    }

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
