//! `session.fork`: a new session whose log starts as a copy of another session's visible prefix.
//!
//! The copy is written into `sessions/.<new id>.fork` and renamed into place only when it is complete and
//! durable, so a crash never leaves half a fork behind as a session (the supervisor's scan removes leftovers).
//! Each copied event keeps its content and run id under the new session id, renumbered from 1 without gaps (the
//! events a revert hid are not copied, and the loader treats gaps as damage). Then come `session_forked
//! {source_session_id, through_seq}` and the title with " (fork)" appended; a run the prefix leaves in flight is
//! closed by the new session when it loads, like any run without an actor, so it ends in the fork only.
//!
//! Not copied, because they are not the conversation and belong to the source: revert markers (the copy already
//! is the visible branch), `model_usage_recorded` (the prefix's requests were spent once, by the source; copying
//! them would count them twice in `usage.global`), tree approval grants (a grant is given to one tree; the fork
//! is a new one), the goal's events and producer messages (a fork must not start the source's automatic runs or
//! deliver its messages twice). A checkpoint's `through_seq` is renumbered, and a copied approval record names
//! the fork as its session. The fork is a root session, whatever the source was.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use troupe_protocol::types::events::EventJson;

use crate::branch::{SeqRanges, read_ranges};
use crate::clock::now_rfc3339;
use crate::error::RuntimeError;
use crate::event_log::{EventReader, LogWriter};
use crate::session_state::MAX_TITLE_BYTES;

/// The suffix of a fork's directory while it is being copied.
pub const FORK_DIR_SUFFIX: &str = ".fork";

/// Bytes of copied lines written per batch (one `fdatasync` each).
const BATCH_BYTES: usize = 1024 * 1024;

/// Kinds left out of a fork (see the module docs).
const NOT_COPIED: &[&str] = &[
    "session_reverted",
    // A fork starts listed, whatever its source's archive state.
    "session_archived",
    "model_usage_recorded",
    "tree_approval_grant_committed",
    "goal_activated",
    "goal_checklist_revised",
    "goal_lifecycle_changed",
    "producer_message_accepted",
    "producer_messages_claimed",
    "producer_messages_released",
    "producer_message_consumed",
    "producer_message_discarded",
];

/// What to copy: the source's durable events in `ranges` (its visible events through `through_seq`).
#[derive(Clone)]
pub struct ForkSource {
    pub source_session_id: String,
    pub through_seq: u64,
    pub ranges: SeqRanges,
    pub reader: Arc<dyn EventReader>,
}

impl std::fmt::Debug for ForkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkSource")
            .field("source_session_id", &self.source_session_id)
            .field("through_seq", &self.through_seq)
            .field("ranges", &self.ranges)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    #[error("the events through seq {through_seq} contain no user message: a fork must start from a conversation")]
    NoUserMessage { through_seq: u64 },
    #[error("the source's first event, `session_created`, is damaged: it cannot be forked")]
    CreationLost,
    #[error("a stored event of the source could not be copied: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Copies `source` into a new session directory `session_dir` (which must not exist) and makes it durable.
pub fn copy_prefix(session_dir: &Path, source: &ForkSource) -> Result<(), ForkError> {
    crate::blocking::assert_may_block();
    let new_session_id = session_dir.file_name().and_then(|name| name.to_str()).unwrap_or_default().to_owned();
    let parent = session_dir.parent().unwrap_or(Path::new("."));
    let staging = parent.join(format!(".{new_session_id}{FORK_DIR_SUFFIX}"));
    let copied = copy_into(&staging, &new_session_id, source).and_then(|()| {
        std::fs::rename(&staging, session_dir)
            .map_err(|error| RuntimeError::io("move the fork into place", session_dir, error))?;
        crate::data_dir::sync_dir(parent)?;
        Ok(())
    });
    if copied.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    copied
}

/// The copy, into `staging`.
fn copy_into(staging: &Path, new_session_id: &str, source: &ForkSource) -> Result<(), ForkError> {
    let mut copy = ForkCopy { new_session_id, writer: None, staging: staging.to_path_buf(), ..ForkCopy::default() };
    let mut failure: Option<ForkError> = None;
    read_ranges(&*source.reader, &source.ranges, |entry| {
        match copy.push(entry.json.as_str()) {
            Ok(()) => Ok(()),
            Err(ForkError::Runtime(error)) => Err(error),
            Err(other) => {
                failure = Some(other);
                // Stops the reading; the error above is the one reported.
                Err(RuntimeError::io("copy", staging, std::io::Error::other("the fork stopped")))
            }
        }
    })
    .map_err(|error| failure.take().unwrap_or(ForkError::Runtime(error)))?;
    if copy.writer.is_none() && copy.batch.is_empty() {
        return Err(ForkError::CreationLost);
    }
    if !copy.has_user_message {
        return Err(ForkError::NoUserMessage { through_seq: source.through_seq });
    }
    let timestamp = now_rfc3339();
    let forked = serde_json::json!({"type": "session_forked", "source_session_id": source.source_session_id,
        "through_seq": source.through_seq});
    copy.push_new(&timestamp, forked)?;
    let title = fork_title(copy.title.as_deref());
    let titled = serde_json::json!({"type": "session_title_committed", "title": title, "change": "set",
        "client_rename_id": format!("fork:{new_session_id}")});
    copy.push_new(&timestamp, titled)?;
    copy.flush()
}

/// The source's title with " (fork)" appended, within the title bound.
fn fork_title(title: Option<&str>) -> String {
    const SUFFIX: &str = " (fork)";
    let Some(title) = title else { return SUFFIX.trim_start().to_owned() };
    let mut end = title.len().min(MAX_TITLE_BYTES - SUFFIX.len());
    while !title.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", title[..end].trim_end())
}

#[derive(Default)]
struct ForkCopy<'a> {
    new_session_id: &'a str,
    staging: PathBuf,
    writer: Option<LogWriter>,
    batch: Vec<EventJson>,
    batch_bytes: usize,
    next_seq: u64,
    /// `(source seq, new seq)` of every copied event, for renumbering checkpoints.
    renumbered: Vec<(u64, u64)>,
    has_user_message: bool,
    /// The title as of the copied events.
    title: Option<String>,
}

impl ForkCopy<'_> {
    fn push(&mut self, line: &str) -> Result<(), ForkError> {
        let mut event: Value = serde_json::from_str(line).map_err(|error| ForkError::Unreadable(error.to_string()))?;
        let source_seq = event["seq"].as_u64().unwrap_or_default();
        let kind = event["payload"]["type"].as_str().unwrap_or_default().to_owned();
        if self.next_seq == 0 && kind != "session_created" {
            return Err(ForkError::CreationLost);
        }
        if NOT_COPIED.contains(&kind.as_str()) {
            return Ok(());
        }
        match kind.as_str() {
            "session_created" => event["payload"]["origin"] = serde_json::json!({"type": "root"}),
            "run_started" | "user_input_submitted" => self.has_user_message = true,
            "session_title_committed" => self.title = event["payload"]["title"].as_str().map(str::to_owned),
            // The record names its session; in the fork it is the fork's (answered and listed there).
            "approval_requested" => event["payload"]["approval"]["session_id"] = Value::from(self.new_session_id),
            "context_checkpoint_committed" => {
                let through = event["payload"]["through_seq"].as_u64().unwrap_or_default();
                let renumbered =
                    self.renumbered.iter().rev().find(|(old, _)| *old <= through).map_or(0, |(_, new)| *new);
                event["payload"]["through_seq"] = Value::from(renumbered);
            }
            _ => {}
        }
        let seq = self.next_seq.max(1);
        self.renumbered.push((source_seq, seq));
        event["session_id"] = Value::from(self.new_session_id);
        event["seq"] = Value::from(seq);
        self.next_seq = seq + 1;
        self.write(event)
    }

    /// Appends an event of the fork's own.
    fn push_new(&mut self, timestamp: &str, payload: Value) -> Result<(), ForkError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let event = serde_json::json!({"session_id": self.new_session_id, "run_id": null, "seq": seq,
            "timestamp": timestamp, "origin": "user", "payload": payload});
        self.write(event)
    }

    fn write(&mut self, event: Value) -> Result<(), ForkError> {
        let json = EventJson::from_json(event.to_string()).map_err(|error| ForkError::Unreadable(error.to_string()))?;
        if self.writer.is_none() {
            self.writer = Some(LogWriter::create(&self.staging, &json)?);
            return Ok(());
        }
        self.batch_bytes += json.as_str().len();
        self.batch.push(json);
        if self.batch_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ForkError> {
        if let Some(writer) = self.writer.as_mut()
            && !self.batch.is_empty()
        {
            writer.append_batch(&self.batch)?;
        }
        self.batch.clear();
        self.batch_bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_titles_append_the_suffix_within_the_bound() {
        assert_eq!(fork_title(Some("Fix the parser")), "Fix the parser (fork)");
        assert_eq!(fork_title(None), "(fork)");
        let long = "é".repeat(300);
        let title = fork_title(Some(&long));
        assert!(title.len() <= MAX_TITLE_BYTES && title.ends_with(" (fork)"), "{}", title.len());
    }
}
