//! `meta.json`: a cache of a session's metadata, spent usage and named artifacts, so that listing 10,000 sessions,
//! answering `usage.global` or collecting unnamed artifacts does not read 10,000 logs.
//!
//! The log is the truth; this file is only a shortcut. It records the log's length when it was written, and a
//! reader trusts it only while `events.jsonl` still has exactly that length: any append since makes the cache
//! stale, and the caller rebuilds the metadata from the log. Because a wrong cache is detected rather than
//! believed, it is written without fsync; a temporary file and a rename still guarantee that a reader never
//! sees half a cache.

use std::path::Path;

use serde::{Deserialize, Serialize};
use troupe_protocol::types::common::SessionMeta;

use crate::artifact_names::NamedArtifacts;
use crate::data_dir::{Durability, replace_file};
use crate::error::RuntimeError;
use crate::event_log::log_path;
use crate::usage_book::UsageSummary;

/// The cache's file name inside a session directory.
pub const META_FILE_NAME: &str = "meta.json";

/// Bumped whenever the stored shape changes, so an old cache is ignored instead of misread.
/// 2: the session's spent usage (`usage`) was added. 3: the artifacts its log names (`artifacts`).
const META_FORMAT: u32 = 3;

/// What `meta.json` holds.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CachedMeta {
    format: u32,
    /// The length of `events.jsonl` that `meta` describes.
    log_len_bytes: u64,
    meta: SessionMeta,
    /// Everything the log's `model_usage_recorded` events spent, per (agent, model).
    usage: UsageSummary,
    /// Every artifact the log names (`artifact_names`).
    artifacts: NamedArtifacts,
}

/// A cache that was read: what it says and the log length it describes.
#[derive(Debug, PartialEq)]
pub struct Cached {
    pub meta: SessionMeta,
    pub usage: UsageSummary,
    pub artifacts: NamedArtifacts,
    pub log_len_bytes: u64,
}

/// What a session's cache records, borrowed from its projection.
#[derive(Clone, Copy)]
pub struct Described<'a> {
    pub meta: &'a SessionMeta,
    pub usage: &'a UsageSummary,
    pub artifacts: &'a NamedArtifacts,
}

/// Writes the cache for what `described` says of the log when it was `log_len_bytes` long.
pub fn write(session_dir: &Path, described: Described<'_>, log_len_bytes: u64) -> Result<(), RuntimeError> {
    crate::blocking::assert_may_block();
    #[derive(Serialize)]
    struct CachedMetaRef<'a> {
        format: u32,
        log_len_bytes: u64,
        meta: &'a SessionMeta,
        usage: &'a UsageSummary,
        artifacts: &'a NamedArtifacts,
    }
    let Described { meta, usage, artifacts } = described;
    let path = session_dir.join(META_FILE_NAME);
    let json = serde_json::to_vec(&CachedMetaRef { format: META_FORMAT, log_len_bytes, meta, usage, artifacts })
        .map_err(|error| RuntimeError::io("encode", &path, error.into()))?;
    replace_file(&path, &json, Durability::Cache)
}

/// Reads the cache: the metadata, usage, named artifacts and the log length they describe. `None` when it is missing, unreadable
/// or of another format; the caller then rebuilds from the log.
pub fn read(session_dir: &Path) -> Option<Cached> {
    crate::blocking::assert_may_block();
    parse(&std::fs::read(session_dir.join(META_FILE_NAME)).ok()?)
}

/// A cache's contents as `meta.json` holds them (also a line of the session index, `session_index`); `None` when
/// they are not a cache of this format.
pub fn parse(bytes: &[u8]) -> Option<Cached> {
    let cached: CachedMeta = serde_json::from_slice(bytes).ok()?;
    (cached.format == META_FORMAT).then_some(Cached {
        meta: cached.meta,
        usage: cached.usage,
        artifacts: cached.artifacts,
        log_len_bytes: cached.log_len_bytes,
    })
}

/// The session's cache when it may be believed: of this format, about the session of that folder's name, and
/// describing the log at its present length; with the bytes it was read from. `None` otherwise (the caller reads
/// the log).
pub fn read_current(session_dir: &Path, session_id: &str) -> Option<(Cached, Vec<u8>)> {
    crate::blocking::assert_may_block();
    let log_len = log_len(session_dir);
    let bytes = std::fs::read(session_dir.join(META_FILE_NAME)).ok()?;
    let cached = parse(&bytes)?;
    (cached.meta.session_id == session_id && Some(cached.log_len_bytes) == log_len).then_some((cached, bytes))
}

/// The current size of the session's `events.jsonl`, to compare with the cached length.
pub fn log_len(session_dir: &Path) -> Option<u64> {
    crate::blocking::assert_may_block();
    std::fs::metadata(log_path(session_dir)).ok().map(|metadata| metadata.len())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::os::unix::fs::PermissionsExt;

    use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin, SessionStatus, SkippedEvent};

    use super::*;

    pub(crate) fn sample_meta() -> SessionMeta {
        SessionMeta {
            session_id: "s1".to_owned(),
            origin: SessionOrigin::Root,
            cwd: "/work".to_owned(),
            title: Some("A title".to_owned()),
            title_updated_seq: Some(3),
            creation_selection: RunSelection {
                agent: "default".to_owned(),
                model: ModelSelection { model: "local/echo".to_owned(), variant: None },
                preset: None,
            },
            status: SessionStatus::Idle,
            last_event_seq: 9,
            created_at: "2026-01-01T00:00:00.000Z".to_owned(),
            last_activity_at: "2026-01-01T00:01:00.000Z".to_owned(),
            skipped_events: vec![SkippedEvent {
                seq: None,
                line: Some(4),
                reason: "invalid JSON (syntax error at column 1)".to_owned(),
            }],
            archived: true,
            node: None,
            may_be_stale: false,
        }
    }

    fn sample_usage() -> UsageSummary {
        let mut book = crate::usage_book::UsageBook::default();
        book.apply(&troupe_protocol::types::events::StoredEvent {
            session_id: "s1".to_owned(),
            run_id: Some("r".to_owned()),
            seq: 4,
            timestamp: "2026-01-01T00:00:30.000Z".to_owned(),
            origin: None,
            payload: troupe_protocol::types::events::EventPayload::ModelUsageRecorded {
                attempt_id: "a".to_owned(),
                model: "openai/gpt-4o-mini".to_owned(),
                agent: "default".to_owned(),
                input_tokens: 1000,
                output_tokens: 200,
                reasoning_tokens: 0,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
                estimated_cost_usd: Some(0.000_27),
                purpose: Default::default(),
            },
        });
        book.summary().clone()
    }

    fn sample_artifacts() -> NamedArtifacts {
        serde_json::from_value(serde_json::json!(["artifacts/a.png", "artifacts/b.pdf"])).unwrap()
    }

    fn described<'a>(meta: &'a SessionMeta, usage: &'a UsageSummary, artifacts: &'a NamedArtifacts) -> Described<'a> {
        Described { meta, usage, artifacts }
    }

    #[test]
    fn round_trips_and_is_private() {
        let temp = tempfile::tempdir().unwrap();
        let (meta, usage, artifacts) = (sample_meta(), sample_usage(), sample_artifacts());
        write(temp.path(), described(&meta, &usage, &artifacts), 1234).unwrap();
        assert_eq!(read(temp.path()), Some(Cached { meta, usage, artifacts, log_len_bytes: 1234 }));
        let mode = std::fs::metadata(temp.path().join(META_FILE_NAME)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Rewriting replaces it and leaves no temporary file.
        let (meta, none) = (sample_meta(), NamedArtifacts::default());
        write(temp.path(), described(&meta, &UsageSummary::default(), &none), 99).unwrap();
        assert_eq!(read(temp.path()).map(|cached| cached.log_len_bytes), Some(99));
        assert_eq!(std::fs::read_dir(temp.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_missing_damaged_or_older_cache_reads_as_none() {
        let temp = tempfile::tempdir().unwrap();
        assert_eq!(read(temp.path()), None);
        std::fs::write(temp.path().join(META_FILE_NAME), b"{\"format\": 1, \"log_len").unwrap();
        assert_eq!(read(temp.path()), None);
        std::fs::write(temp.path().join(META_FILE_NAME), b"{\"format\": 0, \"log_len_bytes\": 1}").unwrap();
        assert_eq!(read(temp.path()), None);
        // A cache of format 2 (before the named artifacts were kept) is ignored, so the log is read for them; so is
        // one of format 1 (before usage).
        let (meta, artifacts) = (sample_meta(), sample_artifacts());
        write(temp.path(), described(&meta, &UsageSummary::default(), &artifacts), 5).unwrap();
        let mut old: serde_json::Value =
            serde_json::from_slice(&std::fs::read(temp.path().join(META_FILE_NAME)).unwrap()).unwrap();
        old["format"] = 2.into();
        old.as_object_mut().unwrap().remove("artifacts");
        std::fs::write(temp.path().join(META_FILE_NAME), serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(read(temp.path()), None);
        old["format"] = 1.into();
        old.as_object_mut().unwrap().remove("usage");
        std::fs::write(temp.path().join(META_FILE_NAME), serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(read(temp.path()), None);
    }

    #[test]
    fn log_len_is_the_size_of_the_log() {
        let temp = tempfile::tempdir().unwrap();
        assert_eq!(log_len(temp.path()), None);
        std::fs::write(log_path(temp.path()), b"0123456789\n").unwrap();
        assert_eq!(log_len(temp.path()), Some(11));
    }
}
