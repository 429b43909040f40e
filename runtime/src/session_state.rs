//! The projection of a session's log into its metadata.
//!
//! A [`SessionState`] is rebuilt by applying stored events in order. What is persisted of it is checked against
//! the log before it is believed: the `meta.json` cache by the log's length, the projection snapshot
//! (`event_log::snapshot`) by the log's last covered line. Keeping the transitions here, free of actors
//! and I/O, lets them be tested directly and keeps the session actor a thin owner of state, log and subscribers.

use troupe_protocol::types::common::{RunSelection, SessionMeta, SessionOrigin, SessionStatus, SkippedEvent};
use troupe_protocol::types::events::{EventPayload, StoredEvent, TitleChangeKind};
use troupe_protocol::types::session::TitleChange;

use crate::approval_book::ApprovalBook;
use crate::artifact_names::NamedArtifacts;
use crate::branch::Visibility;
use crate::goal_state::GoalBook;
use crate::producer_book::ProducerBook;
use crate::recent::RecentRecords;
use crate::run_ledger::RunLedger;
use crate::transcript::Transcript;
use crate::usage_book::UsageBook;

/// Maximum length of a session title, in UTF-8 bytes.
pub const MAX_TITLE_BYTES: usize = 512;

/// What a rename under one `client_rename_id` did, so a redelivery can be answered without a second event.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordedRename {
    pub change: TitleChange,
    /// The sequence of the `session_title_committed` event it produced.
    pub seq: u64,
}

/// A session's metadata, runs and model history as derived from its log.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SessionState {
    pub session_id: String,
    pub origin: SessionOrigin,
    pub cwd: String,
    pub creation_selection: RunSelection,
    pub title: Option<String>,
    pub title_updated_seq: Option<u64>,
    /// The branch's last automatic title (`auto`), which a `reset` returns to.
    pub auto_title: Option<String>,
    /// Whether a client chose the title (`set` or `clear`, a fork's title too): no automatic title replaces it
    /// until a `reset`.
    pub title_by_client: bool,
    pub status: SessionStatus,
    pub last_event_seq: u64,
    pub created_at: String,
    pub last_activity_at: String,
    pub skipped_events: Vec<SkippedEvent>,
    /// Archived by `session.archive` (the last `session_archived` of the whole log; a revert does not undo it).
    pub archived: bool,
    /// Set when the log's `session_created` is damaged or missing: the session is listed and readable, but its
    /// cwd and creation selection are unknown (empty), so it cannot run.
    pub creation_lost: bool,
    /// The newest renames by `client_rename_id`, for redeliveries.
    renames: RecentRecords<RecordedRename>,
    /// The active run, its steering lane, and past runs by `client_run_id`.
    pub runs: RunLedger,
    /// The model history.
    pub transcript: Transcript,
    /// Approval records, answers by client id, and (in a root session) the tree grants.
    pub approvals: ApprovalBook,
    /// The goal of a root session.
    pub goals: GoalBook,
    /// Producer messages pending or claimed, and recent send receipts.
    pub producers: ProducerBook,
    /// The reverts of the log: which events are visible (`branch`).
    pub visibility: Visibility,
    /// Model usage, spent (the whole log) and visible (the branch).
    pub usage: UsageBook,
    /// The runs whose file changes `session.undo` took back (`run_changes_undone` of the whole log: a revert does
    /// not make them undoable again). Absent from a projection snapshot taken before undo existed, which then
    /// covers no such event.
    #[serde(default)]
    pub undone_runs: std::collections::BTreeSet<String>,
    /// The artifacts the whole log names (`artifact_names`): a revert does not un-name them.
    pub artifacts: NamedArtifacts,
}

/// Why a log cannot be projected into a session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProjectionError {
    #[error("the log has no readable `session_created` event at seq 1")]
    MissingSessionCreated,
}

impl SessionState {
    /// The state right after `session_created`.
    pub fn created(first: &StoredEvent) -> Result<SessionState, ProjectionError> {
        let EventPayload::SessionCreated { origin, cwd, selection } = &first.payload else {
            return Err(ProjectionError::MissingSessionCreated);
        };
        if first.seq != 1 {
            return Err(ProjectionError::MissingSessionCreated);
        }
        Ok(SessionState {
            origin: origin.clone(),
            cwd: cwd.clone(),
            creation_selection: selection.clone(),
            last_event_seq: first.seq,
            creation_lost: false,
            ..SessionState::creation_lost(&first.session_id, &first.timestamp)
        })
    }

    /// The state of a session whose log lost its `session_created`, before its first readable event: what the
    /// creation said (cwd, origin, selection) is unknown and left empty; `time` stands in for the creation time.
    /// (Also the base of [`SessionState::created`], which fills in what the creation says.)
    pub fn creation_lost(session_id: &str, time: &str) -> SessionState {
        SessionState {
            session_id: session_id.to_owned(),
            origin: SessionOrigin::Root,
            cwd: String::new(),
            creation_selection: RunSelection {
                agent: String::new(),
                model: troupe_protocol::types::common::ModelSelection { model: String::new(), variant: None },
                preset: None,
            },
            title: None,
            title_updated_seq: None,
            auto_title: None,
            title_by_client: false,
            status: SessionStatus::Idle,
            last_event_seq: 0,
            created_at: time.to_owned(),
            last_activity_at: time.to_owned(),
            skipped_events: Vec::new(),
            archived: false,
            creation_lost: true,
            renames: RecentRecords::default(),
            runs: RunLedger::default(),
            transcript: Transcript::default(),
            approvals: ApprovalBook::default(),
            goals: GoalBook::default(),
            producers: ProducerBook::default(),
            visibility: Visibility::default(),
            usage: UsageBook::default(),
            undone_runs: Default::default(),
            artifacts: NamedArtifacts::default(),
        }
    }

    /// A projector, to build a state while a log streams in.
    pub fn projector() -> Projector {
        Projector::default()
    }

    /// Rebuilds the state from a whole log. `skipped` is what the loader could not read.
    pub fn from_events<'a>(
        mut events: impl Iterator<Item = &'a StoredEvent>,
        skipped: Vec<SkippedEvent>,
    ) -> Result<SessionState, ProjectionError> {
        let first = events.next().ok_or(ProjectionError::MissingSessionCreated)?;
        let mut state = SessionState::created(first)?;
        for event in events {
            state.apply(event);
        }
        state.skipped_events = skipped;
        Ok(state)
    }

    /// Takes the branch-derived parts from `branch`, the projection of just the visible events (see
    /// `crate::branch`): model history, title, status, approval records and tree grants, the active run with its
    /// steering lane, fallback stickiness, the visible usage. What is not part of the conversation stays as the
    /// whole log made it: idempotency records (a redelivered request is still recognized), the goal, producer
    /// messages, the usage spent, the log's length and activity time, and what a revert cannot undo.
    pub fn adopt_branch(&mut self, branch: SessionState) {
        self.title = branch.title;
        self.title_updated_seq = branch.title_updated_seq;
        self.auto_title = branch.auto_title;
        self.title_by_client = branch.title_by_client;
        self.status = branch.status;
        self.transcript = branch.transcript;
        self.runs.adopt_branch(branch.runs);
        self.approvals.adopt_branch(branch.approvals);
        self.usage.adopt_branch(branch.usage);
    }

    /// Applies one event that follows the current state.
    pub fn apply(&mut self, event: &StoredEvent) {
        if let EventPayload::SessionReverted { through_seq } = &event.payload {
            self.visibility.apply_revert(event.seq, *through_seq);
        }
        self.runs.apply(event);
        self.transcript.apply(event);
        self.approvals.apply(event);
        self.goals.apply(event);
        self.producers.apply(event);
        self.usage.apply(event);
        self.artifacts.apply(event);
        self.last_event_seq = event.seq;
        if let EventPayload::SessionArchived { archived } = &event.payload {
            // Filing a session away is not activity: the list's order stays as it was.
            self.archived = *archived;
        } else {
            self.last_activity_at.clone_from(&event.timestamp);
        }
        match &event.payload {
            EventPayload::SessionTitleCommitted { title, change, client_rename_id } => {
                self.title_updated_seq = Some(event.seq);
                let change = match (change, title) {
                    (TitleChangeKind::Set, Some(title)) => TitleChange::Set { title: title.clone() },
                    (TitleChangeKind::Set, None) | (TitleChangeKind::Clear, _) => TitleChange::Clear,
                    (TitleChangeKind::Reset, _) => TitleChange::Reset,
                    (TitleChangeKind::Auto, _) => {
                        // The engine's own title: no client's rename to remember for redeliveries.
                        self.title.clone_from(title);
                        self.auto_title.clone_from(title);
                        self.title_by_client = false;
                        return;
                    }
                };
                self.title_by_client = change != TitleChange::Reset;
                self.title = match &change {
                    TitleChange::Reset => self.auto_title.clone(),
                    _ => title.clone(),
                };
                self.renames.insert(client_rename_id, RecordedRename { change, seq: event.seq });
            }
            // The fork's own event ends what its copied prefix says of the source's place (`crate::fork`): the
            // fork is a root session, listed, whatever the source was.
            EventPayload::SessionForked { .. } => {
                self.origin = SessionOrigin::Root;
                self.archived = false;
            }
            EventPayload::RunChangesUndone { undone_run_id, .. } => {
                self.undone_runs.insert(undone_run_id.clone());
            }
            EventPayload::RunStarted { .. } => self.status = SessionStatus::Running,
            EventPayload::RunCompleted { .. } => self.status = SessionStatus::Completed,
            EventPayload::RunFailed { .. } => self.status = SessionStatus::Failed,
            EventPayload::RunCancelled { .. } => self.status = SessionStatus::Cancelled,
            EventPayload::RunInterrupted { .. } => self.status = SessionStatus::Interrupted,
            _ => {}
        }
    }

    /// Whether the session waits for an automatic title: untitled, and no client chose that (a `clear` keeps a
    /// session untitled; a `reset` without an earlier automatic title leaves it waiting again).
    pub fn awaits_auto_title(&self) -> bool {
        self.title.is_none() && !self.title_by_client && !self.creation_lost
    }

    /// The rename recorded under `client_rename_id`, if any.
    pub fn recorded_rename(&self, client_rename_id: &str) -> Option<&RecordedRename> {
        self.renames.get(client_rename_id)
    }

    pub fn meta(&self) -> SessionMeta {
        SessionMeta {
            session_id: self.session_id.clone(),
            origin: self.origin.clone(),
            cwd: self.cwd.clone(),
            title: self.title.clone(),
            title_updated_seq: self.title_updated_seq,
            creation_selection: self.creation_selection.clone(),
            status: self.status,
            last_event_seq: self.last_event_seq,
            created_at: self.created_at.clone(),
            last_activity_at: self.last_activity_at.clone(),
            skipped_events: self.skipped_events.clone(),
            archived: self.archived,
            node: None,
            may_be_stale: false,
        }
    }
}

/// Builds a session's state event by event while its log streams in.
#[derive(Default)]
pub struct Projector {
    state: Option<SessionState>,
}

impl Projector {
    /// A projector that goes on from `state`, the projection of a log's first events (a projection snapshot's).
    pub fn resumed(state: SessionState) -> Projector {
        Projector { state: Some(state) }
    }

    /// Applies the next accepted event of the log.
    pub fn apply(&mut self, event: &StoredEvent) {
        match &mut self.state {
            Some(state) => state.apply(event),
            None => {
                let state = SessionState::created(event).unwrap_or_else(|_| {
                    // The loader accepts a first event other than the creation only when the creation is damaged.
                    let mut state = SessionState::creation_lost(&event.session_id, &event.timestamp);
                    state.apply(event);
                    state
                });
                self.state = Some(state);
            }
        }
    }

    /// The state. A log that lost its creation still gives one (`creation_lost`), so the session stays listed
    /// with its damage reported; `fallback_time` is its creation time when no event at all was readable.
    pub fn finish(self, session_id: &str, skipped: Vec<SkippedEvent>, fallback_time: &str) -> SessionState {
        let mut state = self.state.unwrap_or_else(|| SessionState::creation_lost(session_id, fallback_time));
        state.skipped_events = skipped;
        state
    }
}

/// Normalizes a requested title: surrounding whitespace is trimmed; the rest must be 1..=512 bytes with no
/// control characters or invisible format characters (Unicode category Cf, line and paragraph separators).
pub fn normalize_title(title: &str) -> Result<String, String> {
    let title = title.trim();
    if title.is_empty() {
        return Err("the title is empty; use `clear` to remove a title".to_owned());
    }
    if title.len() > MAX_TITLE_BYTES {
        return Err(format!("the title is {} bytes; at most {MAX_TITLE_BYTES} are allowed", title.len()));
    }
    if title.chars().any(|c| c.is_control() || troupe_protocol::diagnostic::is_format_control(c)) {
        return Err("the title contains control or invisible format characters (such as U+202E or U+200B)".to_owned());
    }
    Ok(title.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::types::common::ModelSelection;

    fn event(seq: u64, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: None,
            seq,
            timestamp: format!("2026-01-01T00:00:{seq:02}Z"),
            origin: None,
            payload,
        }
    }

    fn created() -> StoredEvent {
        event(
            1,
            EventPayload::SessionCreated {
                origin: SessionOrigin::Root,
                cwd: "/tmp".into(),
                selection: RunSelection {
                    agent: "default".into(),
                    model: ModelSelection { model: "local/echo".into(), variant: None },
                    preset: None,
                },
            },
        )
    }

    #[test]
    fn only_the_newest_renames_are_remembered_for_redeliveries() {
        let mut state = SessionState::created(&created()).unwrap();
        let total = crate::recent::MAX_RECENT_RECORDS as u64 + 10;
        for seq in 2..2 + total {
            state.apply(&event(
                seq,
                EventPayload::SessionTitleCommitted {
                    title: Some(format!("t{seq}")),
                    change: TitleChangeKind::Set,
                    client_rename_id: format!("r{seq}"),
                },
            ));
        }
        assert!(state.recorded_rename("r2").is_none(), "the oldest is forgotten");
        assert!(state.recorded_rename("r11").is_none());
        assert_eq!(state.recorded_rename("r12").map(|rename| rename.seq), Some(12));
        let last = 1 + total;
        assert_eq!(state.recorded_rename(&format!("r{last}")).map(|rename| rename.seq), Some(last));
        assert_eq!(state.renames.len(), crate::recent::MAX_RECENT_RECORDS);
    }

    fn titled(seq: u64, title: Option<&str>, change: TitleChangeKind) -> StoredEvent {
        let payload = EventPayload::SessionTitleCommitted {
            title: title.map(str::to_owned),
            change,
            client_rename_id: format!("r{seq}"),
        };
        event(seq, payload)
    }

    #[test]
    fn reset_returns_to_the_last_automatic_title_and_clients_win() {
        let created = created();
        let mut state = SessionState::created(&created).unwrap();
        assert!(state.awaits_auto_title());
        state.apply(&titled(2, Some("Auto one"), TitleChangeKind::Auto));
        assert_eq!(state.title.as_deref(), Some("Auto one"));
        assert!(!state.awaits_auto_title());
        assert!(state.recorded_rename("r2").is_none(), "the engine's title is no client's rename");
        state.apply(&titled(3, Some("Mine"), TitleChangeKind::Set));
        assert_eq!((state.title.as_deref(), state.title_by_client), (Some("Mine"), true));
        state.apply(&titled(4, None, TitleChangeKind::Reset));
        assert_eq!(state.title.as_deref(), Some("Auto one"), "reset restores the automatic title");
        state.apply(&titled(5, None, TitleChangeKind::Clear));
        assert_eq!(state.title, None);
        assert!(!state.awaits_auto_title(), "a cleared title stays cleared");

        let mut fresh = SessionState::created(&created).unwrap();
        fresh.apply(&titled(2, Some("Mine"), TitleChangeKind::Set));
        fresh.apply(&titled(3, None, TitleChangeKind::Reset));
        assert_eq!(fresh.title, None);
        assert!(fresh.awaits_auto_title(), "reset without an automatic title waits for one");
    }

    #[test]
    fn archiving_follows_the_last_session_archived_and_is_not_activity() {
        let mut state = SessionState::created(&created()).unwrap();
        state.apply(&event(2, EventPayload::SessionArchived { archived: true }));
        assert!(state.meta().archived);
        assert_eq!((state.last_event_seq, state.last_activity_at.as_str()), (2, "2026-01-01T00:00:01Z"));
        // A revert's rebuilt branch does not bring the session back.
        state.adopt_branch(SessionState::created(&created()).unwrap());
        assert!(state.meta().archived);
        state.apply(&event(3, EventPayload::SessionArchived { archived: false }));
        assert!(!state.meta().archived);
    }

    #[test]
    fn undone_runs_follow_the_whole_log_not_the_branch() {
        let mut state = SessionState::created(&created()).unwrap();
        let undone = EventPayload::RunChangesUndone { undone_run_id: "r1".into(), files: Vec::new(), forced: false };
        state.apply(&event(2, undone));
        state.adopt_branch(SessionState::created(&created()).unwrap());
        assert!(state.undone_runs.contains("r1"), "a revert does not make the run undoable again");
    }

    #[test]
    fn named_artifacts_follow_the_whole_log_not_the_branch() {
        let mut state = SessionState::created(&created()).unwrap();
        let file = troupe_protocol::types::attachment::AttachedFile {
            path: "artifacts/a.png".into(),
            mime_type: "image/png".into(),
            name: "a.png".into(),
            size: 3,
        };
        let steered =
            EventPayload::UserInputAdmitted { input_id: "i".into(), input: "x".into(), attachments: vec![file] };
        state.apply(&event(2, steered));
        state.apply(&event(3, EventPayload::SessionReverted { through_seq: 1 }));
        state.adopt_branch(SessionState::created(&created()).unwrap());
        assert!(state.artifacts.contains("artifacts/a.png"), "a reverted input's file is still named by the log");
    }

    #[test]
    fn a_projector_gives_a_listable_state_when_the_creation_is_lost() {
        let skipped = vec![SkippedEvent { seq: None, line: Some(1), reason: "invalid JSON".into() }];
        let mut projector = SessionState::projector();
        projector.apply(&event(
            2,
            EventPayload::SessionTitleCommitted {
                title: Some("Kept".into()),
                change: TitleChangeKind::Set,
                client_rename_id: "r1".into(),
            },
        ));
        let state = projector.finish("s", skipped.clone(), "2026-02-02T00:00:00.000Z");
        assert!(state.creation_lost);
        assert_eq!(state.title.as_deref(), Some("Kept"));
        assert_eq!(state.last_event_seq, 2);
        assert_eq!(state.meta().skipped_events, skipped);
        assert_eq!(state.cwd, "");

        let nothing = SessionState::projector().finish("s", skipped, "2026-02-02T00:00:00.000Z");
        assert!(nothing.creation_lost);
        assert_eq!(nothing.created_at, "2026-02-02T00:00:00.000Z");
        assert_eq!(nothing.last_event_seq, 0);

        let mut whole = SessionState::projector();
        whole.apply(&created());
        let whole = whole.finish("s", Vec::new(), "unused");
        assert!(!whole.creation_lost);
        assert_eq!(whole.cwd, "/tmp");
    }

    #[test]
    fn title_changes_and_status_follow_the_log() {
        let events = [
            created(),
            event(
                2,
                EventPayload::SessionTitleCommitted {
                    title: Some("Fix tests".into()),
                    change: TitleChangeKind::Set,
                    client_rename_id: "r1".into(),
                },
            ),
            event(
                3,
                EventPayload::RunStarted {
                    client_run_id: "c".into(),
                    selection: created_selection(),
                    input: "hi".into(),
                    fallback_index: 0,
                    model_chain: Vec::new(),
                    reset_fallback: false,
                    skill: None,
                    requested_model: None,
                    attachments: Vec::new(),
                },
            ),
            event(4, EventPayload::RunCancelled { reason: None }),
            event(
                5,
                EventPayload::SessionTitleCommitted {
                    title: None,
                    change: TitleChangeKind::Clear,
                    client_rename_id: "r2".into(),
                },
            ),
        ];
        let state = SessionState::from_events(events.iter(), Vec::new()).unwrap();
        assert_eq!(state.title, None);
        assert_eq!(state.title_updated_seq, Some(5));
        assert_eq!(state.status, SessionStatus::Cancelled);
        assert_eq!(state.last_event_seq, 5);
        assert_eq!(state.last_activity_at, "2026-01-01T00:00:05Z");
        assert_eq!(
            state.recorded_rename("r1"),
            Some(&RecordedRename { change: TitleChange::Set { title: "Fix tests".into() }, seq: 2 })
        );
        assert_eq!(state.recorded_rename("r2").map(|rename| rename.seq), Some(5));
    }

    fn created_selection() -> RunSelection {
        match created().payload {
            EventPayload::SessionCreated { selection, .. } => selection,
            _ => unreachable!(),
        }
    }

    #[test]
    fn adopting_a_branch_takes_the_conversation_and_keeps_idempotency_records() {
        let rename = |seq: u64, title: &str| {
            event(
                seq,
                EventPayload::SessionTitleCommitted {
                    title: Some(title.into()),
                    change: TitleChangeKind::Set,
                    client_rename_id: format!("r{seq}"),
                },
            )
        };
        let started = |seq: u64, client_run_id: &str| StoredEvent {
            run_id: Some(format!("run-{seq}")),
            ..event(
                seq,
                EventPayload::RunStarted {
                    client_run_id: client_run_id.into(),
                    selection: created_selection(),
                    input: format!("input {seq}"),
                    fallback_index: 0,
                    model_chain: Vec::new(),
                    reset_fallback: false,
                    skill: None,
                    requested_model: None,
                    attachments: Vec::new(),
                },
            )
        };
        let visible = [created(), rename(2, "kept")];
        let all = [created(), rename(2, "kept"), rename(3, "hidden"), started(4, "c4")];
        let mut state = SessionState::from_events(all.iter(), Vec::new()).unwrap();
        state.apply(&event(5, EventPayload::SessionReverted { through_seq: 2 }));
        let branch = SessionState::from_events(visible.iter(), Vec::new()).unwrap();
        state.adopt_branch(branch);
        assert_eq!(state.title.as_deref(), Some("kept"));
        assert_eq!(state.status, SessionStatus::Idle);
        assert!(state.runs.active.is_none(), "the hidden run is not active");
        assert_eq!(state.transcript.messages().len(), 0, "the hidden run's input is not history");
        assert_eq!(state.recorded_rename("r3").map(|rename| rename.seq), Some(3), "idempotency records stay");
        assert_eq!(state.runs.recorded("c4").map(|run| run.run_id.as_str()), Some("run-4"));
        assert_eq!(state.last_event_seq, 5);
        assert_eq!(state.visibility.visible_after(5), vec![1..=2, 5..=5]);
    }

    #[test]
    fn a_log_must_start_with_session_created() {
        let events = [event(1, EventPayload::RunCompleted { final_text: None })];
        assert!(matches!(
            SessionState::from_events(events.iter(), Vec::new()),
            Err(ProjectionError::MissingSessionCreated)
        ));
    }

    #[test]
    fn titles_are_trimmed_and_bounded() {
        assert_eq!(normalize_title("  hello  ").unwrap(), "hello");
        assert!(normalize_title("   ").is_err());
        assert!(normalize_title(&"x".repeat(513)).is_err());
        assert!(normalize_title("a\u{7}b").is_err());
        // Invisible format characters would let a title read differently than it is (bidi override, zero width).
        assert!(normalize_title("invoice\u{202e}fdp.exe").is_err());
        assert!(normalize_title("a\u{200b}b").is_err());
        assert_eq!(normalize_title("Fix the parser — ünïcode ✓").unwrap(), "Fix the parser — ünïcode ✓");
    }
}
