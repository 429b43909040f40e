//! The copy against a real log: the prefix byte for byte but the envelope's session id, and the fork's own events
//! that end what must not carry over, as the loaded projection sees them.

use serde_json::Value;
use troupe_protocol::types::approval::{PermissionAction, TreeGrant};
use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin};
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent, TitleChangeKind};
use troupe_protocol::types::goal::GoalStatus;
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};

use super::*;
use crate::event_log::{EventStore, open_projected};

#[test]
fn fork_titles_append_the_suffix_within_the_bound() {
    assert_eq!(fork_title(Some("Fix the parser")), "Fix the parser (fork)");
    assert_eq!(fork_title(None), "(fork)");
    let long = "é".repeat(300);
    let title = fork_title(Some(&long));
    assert!(title.len() <= MAX_TITLE_BYTES && title.ends_with(" (fork)"), "{}", title.len());
}

fn selection() -> RunSelection {
    RunSelection {
        agent: "default".into(),
        model: ModelSelection { model: "local/echo".into(), variant: None },
        preset: None,
    }
}

fn event(seq: u64, run_id: Option<&str>, payload: EventPayload) -> EventJson {
    let event = StoredEvent {
        session_id: "source".into(),
        run_id: run_id.map(str::to_owned),
        seq,
        timestamp: format!("2026-01-01T00:00:{seq:02}Z"),
        origin: Some("user".into()),
        payload,
    };
    EventJson::from_json(serde_json::to_string(&event).unwrap()).unwrap()
}

/// A delegated, archived source with every kind of state a fork must not take over, and a revert that hides a
/// rename: `(its events, the seq to fork through)`.
fn source_events() -> (Vec<EventJson>, u64) {
    let origin = SessionOrigin::Delegated {
        root_session_id: "root".into(),
        parent_session_id: "root".into(),
        parent_run_id: "parent-run".into(),
        parent_tool_call_id: "call".into(),
        depth: 1,
    };
    let title = |title: &str| EventPayload::SessionTitleCommitted {
        title: Some(title.into()),
        change: TitleChangeKind::Set,
        client_rename_id: format!("r-{title}"),
    };
    let events = vec![
        event(1, None, EventPayload::SessionCreated { origin, cwd: "/tmp".into(), selection: selection() }),
        event(2, None, title("Visible")),
        event(
            3,
            Some("r1"),
            EventPayload::RunStarted {
                client_run_id: "c1".into(),
                selection: selection(),
                input: "one".into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        ),
        event(
            4,
            Some("r1"),
            EventPayload::ModelUsageRecorded {
                attempt_id: "a1".into(),
                model: "local/echo".into(),
                agent: "default".into(),
                input_tokens: 10,
                output_tokens: 5,
                reasoning_tokens: 0,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
                estimated_cost_usd: None,
                purpose: Default::default(),
            },
        ),
        event(5, Some("r1"), EventPayload::RunCompleted { final_text: Some("one".into()) }),
        event(
            6,
            None,
            EventPayload::TreeApprovalGrantCommitted {
                grant: TreeGrant {
                    action: PermissionAction::Execute,
                    resource: "make".into(),
                    granted_at: "2026-01-01T00:00:06Z".into(),
                    granted_by: "client".into(),
                },
            },
        ),
        event(
            7,
            None,
            EventPayload::GoalActivated {
                goal_id: "g1".into(),
                objective: "ship".into(),
                revision: 1,
                selection: None,
            },
        ),
        event(
            8,
            None,
            EventPayload::ProducerMessageAccepted {
                message_id: "m1".into(),
                producer_owner: ProducerOwner::Plugin { plugin: "p".into() },
                mode: ProducerMessageMode::Queue,
                idempotency_key: "k1".into(),
                body: "wake up".into(),
            },
        ),
        event(9, None, EventPayload::SessionArchived { archived: true }),
        event(10, None, title("Hidden")),
        event(11, None, EventPayload::SessionReverted { through_seq: 9 }),
    ];
    (events, 11)
}

#[test]
fn a_fork_copies_the_physical_prefix_and_its_own_events_end_what_must_not_carry_over() {
    let dir = tempfile::tempdir().unwrap();
    let (events, through_seq) = source_events();
    let source_dir = dir.path().join("source");
    let mut writer = LogWriter::create(&source_dir, &events[0]).unwrap();
    writer.append_batch(&events[1..]).unwrap();
    // One writer at a time: the creator lets go of the log before the session's own open takes it.
    drop(writer);
    let source = open_projected(&source_dir, 1 << 20).unwrap();
    let mut visibility = crate::branch::Visibility::default();
    visibility.apply_revert(11, 9);
    let fork = ForkSource {
        source_session_id: "source".into(),
        through_seq,
        visible: visibility.visible_after(through_seq),
        reader: source.opened.store.reader(),
    };

    let fork_dir = dir.path().join("fork");
    copy_prefix(&fork_dir, &fork).unwrap();
    assert!(!dir.path().join(".fork.fork").exists(), "the staging directory was renamed into place");
    let loaded = open_projected(&fork_dir, 1 << 20).unwrap();
    let reader = loaded.opened.store.reader();
    let copied = reader.read_range(0, u64::MAX, usize::MAX).unwrap();
    let lines: Vec<Value> = copied.iter().map(|entry| serde_json::from_str(entry.json.as_str()).unwrap()).collect();
    for (original, copy) in events.iter().zip(&lines) {
        let mut original: Value = serde_json::from_str(original.as_str()).unwrap();
        original["session_id"] = Value::from("fork");
        assert_eq!(&original, copy, "copied exactly but the envelope's session id");
    }
    let own: Vec<StoredEvent> = copied[events.len()..].iter().map(|entry| entry.json.decode().unwrap()).collect();
    assert_eq!(own.iter().map(|event| event.seq).collect::<Vec<_>>(), [12, 13, 14, 15], "new physical sequences");
    assert_eq!(own[0].payload, EventPayload::SessionForked { source_session_id: "source".into(), through_seq });
    assert!(matches!(&own[1].payload,
        EventPayload::SessionTitleCommitted { title: Some(title), .. } if title == "Visible (fork)"));
    assert!(matches!(&own[2].payload,
        EventPayload::GoalLifecycleChanged { goal_id, revision: 2, status: GoalStatus::Cancelled, reason: Some(_), .. }
            if goal_id == "g1"));
    assert_eq!(own[3].payload, EventPayload::ProducerMessageDiscarded { message_id: "m1".into() });

    let mut state = loaded.state;
    crate::branch::settle_loaded(&mut state, &*reader).unwrap();
    assert_eq!(state.visibility.visible_after(state.last_event_seq), vec![1..=9, 11..=15], "the source's branch");
    assert_eq!(state.origin, SessionOrigin::Root, "a fork is a root session");
    assert!(!state.archived, "a fork is listed");
    assert_eq!(state.title.as_deref(), Some("Visible (fork)"));
    assert!(state.approvals.grants().is_empty(), "the source tree's grants do not apply to the fork's");
    assert_eq!(state.goals.current().map(|goal| goal.status), Some(GoalStatus::Cancelled));
    assert!(state.producers.is_empty(), "no message of the source is delivered by the fork");
    assert_eq!(state.usage.spent_rollup().totals.request_count, 0, "the prefix's requests were the source's");
    assert_eq!(state.usage.visible_rollup().totals.request_count, 1, "the conversation's requests");
}

#[test]
fn a_prefix_whose_visible_part_has_no_user_message_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (events, _) = source_events();
    let source_dir = dir.path().join("source");
    let mut writer = LogWriter::create(&source_dir, &events[0]).unwrap();
    writer.append_batch(&events[1..]).unwrap();
    // One writer at a time: the creator lets go of the log before the session's own open takes it.
    drop(writer);
    let source = open_projected(&source_dir, 1 << 20).unwrap();
    let fork = ForkSource {
        source_session_id: "source".into(),
        through_seq: 2,
        visible: vec![1..=2],
        reader: source.opened.store.reader(),
    };
    let fork_dir = dir.path().join("fork");
    assert!(matches!(copy_prefix(&fork_dir, &fork), Err(ForkError::NoUserMessage { through_seq: 2 })));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "neither the fork nor its staging is left");
}
