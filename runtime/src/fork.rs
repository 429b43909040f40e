//! `session.fork`: a new session whose log starts as an exact copy of another session's physical prefix.
//!
//! The copy is written into `sessions/.<new id>.fork` and renamed into place only when it is complete and
//! durable, so a crash never leaves half a fork behind as a session (the supervisor's scan removes leftovers).
//! Events `1..=through_seq` are copied physically: every kind, the same `seq`, the same payload and run id; only
//! the envelope's `session_id` becomes the fork's. So a client that holds the source's events through
//! `through_seq` follows the fork from `cursor = through_seq`, and the source's revert markers travel with the
//! prefix: the fork's visible branch is the source's.
//!
//! Then come the fork's own events, with new sequences: `session_forked {source_session_id, through_seq}`, the
//! title (the visible branch's title with " (fork)" appended), and what makes the source's automatic work inert in
//! the fork: an open goal is cancelled (`goal_lifecycle_changed`, with the reason), and every producer message
//! still pending or claimed is discarded (a fork must not start the source's automatic runs or deliver its
//! messages a second time). What has no event of its own is ended by `session_forked` itself, in the projection
//! (`SessionState::apply`): the fork is a listed root session whatever its source was, the source's tree grants do
//! not apply to the fork's tree, and the copied `model_usage_recorded` stay the source's spending (the fork's
//! `spent` starts at zero, its visible usage includes the prefix). A run the prefix leaves in flight is closed by
//! the new session when it loads, like any run without an actor, so it ends in the fork only. The stored whole
//! outputs the copied results name (`output_ref`) are hard-linked into the fork, so they read through it and
//! outlive the source.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent, TitleChangeKind};
use troupe_protocol::types::goal::GoalStatus;
use troupe_protocol::types::origin::Origin;

use crate::branch::{SeqRanges, read_ranges};
use crate::clock::now_rfc3339;
use crate::error::RuntimeError;
use crate::event_log::{EventReader, LogWriter};
use crate::goal_state::GoalBook;
use crate::producer_book::ProducerBook;
use crate::session_state::MAX_TITLE_BYTES;

/// The suffix of a fork's directory while it is being copied.
pub const FORK_DIR_SUFFIX: &str = ".fork";

/// Bytes of copied lines written per batch (one `fdatasync` each).
const BATCH_BYTES: usize = 1024 * 1024;

/// The origin of the events the fork appends after the copy: the user asked for the fork.
const FORK_ORIGIN: Origin = Origin::User;

/// What to copy: the source's durable events `1..=through_seq`.
#[derive(Clone)]
pub struct ForkSource {
    pub source_session_id: String,
    pub through_seq: u64,
    /// The events of the prefix that are visible (`visible_after(through_seq)`): the conversation the fork goes
    /// on from, which must hold a user message and gives the fork its title.
    pub visible: SeqRanges,
    pub reader: Arc<dyn EventReader>,
}

impl std::fmt::Debug for ForkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkSource")
            .field("source_session_id", &self.source_session_id)
            .field("through_seq", &self.through_seq)
            .field("visible", &self.visible)
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
    let mut copy = ForkCopy {
        new_session_id,
        staging: staging.to_path_buf(),
        visible: &source.visible,
        writer: None,
        batch: Vec::new(),
        batch_bytes: 0,
        last_seq: 0,
        has_user_message: false,
        title: TitleFold::default(),
        goals: GoalBook::default(),
        producers: ProducerBook::default(),
        output_refs: Vec::new(),
    };
    let mut failure: Option<ForkError> = None;
    let prefix = vec![1..=source.through_seq];
    read_ranges(&*source.reader, &prefix, |entry| {
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
    if copy.writer.is_none() {
        return Err(ForkError::CreationLost);
    }
    if !copy.has_user_message {
        return Err(ForkError::NoUserMessage { through_seq: source.through_seq });
    }
    copy.append_own(source)?;
    copy.flush()?;
    let source_dir = staging.parent().unwrap_or(Path::new(".")).join(&source.source_session_id);
    crate::stored_output::link_stored_outputs(&source_dir, staging, &copy.output_refs)
        .map_err(|error| RuntimeError::io("link the source's stored outputs", staging, error))?;
    Ok(())
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

/// The title the visible events give, folded as `SessionState::apply` does (without its rename records).
#[derive(Default)]
struct TitleFold {
    title: Option<String>,
    /// The last automatic title, which a `reset` returns to.
    auto_title: Option<String>,
}

impl TitleFold {
    fn apply(&mut self, change: TitleChangeKind, title: Option<String>) {
        match change {
            TitleChangeKind::Auto => {
                self.auto_title.clone_from(&title);
                self.title = title;
            }
            TitleChangeKind::Set => self.title = title,
            TitleChangeKind::Clear => self.title = None,
            TitleChangeKind::Reset => self.title.clone_from(&self.auto_title),
        }
    }
}

struct ForkCopy<'a> {
    new_session_id: &'a str,
    staging: PathBuf,
    visible: &'a SeqRanges,
    writer: Option<LogWriter>,
    batch: Vec<EventJson>,
    batch_bytes: usize,
    /// The seq of the last event written.
    last_seq: u64,
    /// Whether a visible event of the prefix is a user message.
    has_user_message: bool,
    title: TitleFold,
    /// The goal and the producer messages as the whole prefix left them, which the fork's own events end.
    goals: GoalBook,
    producers: ProducerBook,
    /// The `output_ref`s of the copied results, whose stored outputs the fork gets (`stored_output`).
    output_refs: Vec<String>,
}

impl ForkCopy<'_> {
    /// Copies one event of the prefix: only the envelope's session id changes.
    fn push(&mut self, line: &str) -> Result<(), ForkError> {
        let unreadable = |error: serde_json::Error| ForkError::Unreadable(error.to_string());
        let mut event: Value = serde_json::from_str(line).map_err(unreadable)?;
        let seq = event["seq"].as_u64().unwrap_or_default();
        let kind = event["payload"]["type"].as_str().unwrap_or_default();
        if self.writer.is_none() && (seq != 1 || kind != "session_created") {
            return Err(ForkError::CreationLost);
        }
        let visible = self.visible.iter().any(|range| range.contains(&seq));
        let folded = kind.starts_with("goal_")
            || kind.starts_with("producer_")
            || (visible && matches!(kind, "run_started" | "user_input_submitted" | "session_title_committed"));
        if folded {
            let decoded: StoredEvent = serde_json::from_value(event.clone()).map_err(unreadable)?;
            self.goals.apply(&decoded);
            self.producers.apply(&decoded);
            match decoded.payload {
                EventPayload::RunStarted { .. } | EventPayload::UserInputSubmitted { .. } if visible => {
                    self.has_user_message = true;
                }
                EventPayload::SessionTitleCommitted { title, change, .. } if visible => self.title.apply(change, title),
                _ => {}
            }
        }
        if kind == "tool_call_terminated"
            && let Some(output_ref) = event["payload"]["result"]["output_ref"].as_str()
        {
            self.output_refs.push(output_ref.to_owned());
        }
        event["session_id"] = Value::from(self.new_session_id);
        self.last_seq = seq;
        self.write(event)
    }

    /// The fork's own events after the copy (see the module docs).
    fn append_own(&mut self, source: &ForkSource) -> Result<(), ForkError> {
        let timestamp = now_rfc3339();
        let forked = EventPayload::SessionForked {
            source_session_id: source.source_session_id.clone(),
            through_seq: source.through_seq,
        };
        self.push_new(&timestamp, forked)?;
        let titled = EventPayload::SessionTitleCommitted {
            title: Some(fork_title(self.title.title.as_deref())),
            change: TitleChangeKind::Set,
            client_rename_id: format!("fork:{}", self.new_session_id),
        };
        self.push_new(&timestamp, titled)?;
        if let Some(goal) = self.goals.open() {
            let cancelled = EventPayload::GoalLifecycleChanged {
                goal_id: goal.goal_id.clone(),
                revision: goal.revision + 1,
                status: GoalStatus::Cancelled,
                reason: Some(format!(
                    "the goal belongs to session {}; a fork does not pursue it (activate a goal in the fork)",
                    source.source_session_id
                )),
                selection: None,
            };
            self.push_new(&timestamp, cancelled)?;
        }
        // Pending and claimed alike: a claim's run is in flight only in the source.
        let mut held: Vec<(u64, String)> = (self.producers.pending().chain(self.producers.claimed()))
            .map(|message| (message.accepted_seq, message.message_id.clone()))
            .collect();
        held.sort_unstable();
        for (_, message_id) in held {
            self.push_new(&timestamp, EventPayload::ProducerMessageDiscarded { message_id })?;
        }
        Ok(())
    }

    /// Appends an event of the fork's own.
    fn push_new(&mut self, timestamp: &str, payload: EventPayload) -> Result<(), ForkError> {
        let seq = self.last_seq + 1;
        self.last_seq = seq;
        let event = StoredEvent {
            session_id: self.new_session_id.to_owned(),
            run_id: None,
            seq,
            timestamp: timestamp.to_owned(),
            origin: Some(FORK_ORIGIN.to_string()),
            payload,
        };
        let event = serde_json::to_value(&event).map_err(|error| ForkError::Unreadable(error.to_string()))?;
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
mod tests;
