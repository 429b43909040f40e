//! The run loop without a daemon: a real `RunActor`, a scripted model, the real tools and policy, and a fake
//! session actor behind the run's `SessionPort` (`harness.rs`) that records what the run sends and answers as a
//! session would. What these tests pin down is the run's side of the conversation with its session: which
//! messages, in which order, and how a run ends.

mod harness;

use std::collections::VecDeque;

use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;

use super::CancelRun;
use crate::ports::session::ApprovalOutcome;
use harness::{Seen, SessionScript, start_run, start_run_on};

fn deltas(seen: &[Seen]) -> String {
    seen.iter()
        .filter_map(|seen| match seen {
            Seen::Event(EventPayload::TextDelta { text, .. }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn outputs(seen: &[Seen]) -> String {
    seen.iter()
        .filter_map(|seen| match seen {
            Seen::Output(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_results(seen: &[Seen]) -> Vec<(ToolResultStatus, String)> {
    seen.iter()
        .filter_map(|seen| match seen {
            Seen::Event(EventPayload::ToolCallTerminated { result, .. }) => {
                Some((result.status, result.output.clone()))
            }
            _ => None,
        })
        .collect()
}

fn final_texts(seen: &[Seen]) -> Vec<&str> {
    seen.iter()
        .filter_map(|seen| match seen {
            Seen::ToolFreeTurn { final_text } => Some(final_text.as_str()),
            _ => None,
        })
        .collect()
}

#[actix::test]
async fn a_tool_free_turn_streams_its_text_then_ends_the_run_with_it_in_one_message() {
    let cwd = tempfile::tempdir().unwrap();
    let run = start_run(
        serde_json::json!([{ "text": "all done here" }]),
        PermissionMode::Ask,
        SessionScript::default(),
        cwd.path(),
    );
    let seen = run.ended().await;
    assert_eq!(deltas(&seen), "all done here");
    assert_eq!(final_texts(&seen), ["all done here"]);
    let end = seen.iter().position(|seen| matches!(seen, Seen::ToolFreeTurn { .. })).unwrap();
    let last_delta = seen.iter().rposition(|seen| matches!(seen, Seen::Event(EventPayload::TextDelta { .. }))).unwrap();
    assert!(last_delta < end, "every delta is sent before the turn's end");
    let committed = seen[..end].iter().any(|seen| {
        matches!(seen, Seen::Event(EventPayload::ModelTurnCommitted { text, tool_calls, .. })
            if text == "all done here" && tool_calls.is_empty())
    });
    assert!(committed, "the turn is committed with the end: {seen:#?}");
    assert!(
        matches!(seen.last(), Some(Seen::Event(EventPayload::RunCompleted { .. }))),
        "the turn's end was the run's last message (the session cancels its approvals with it): {seen:#?}"
    );
}

#[actix::test]
async fn a_file_tool_runs_without_asking_and_its_result_precedes_the_next_turn() {
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("notes.txt"), "the secret word is plover\n").unwrap();
    let turns = serde_json::json!([
        { "tool_calls": [{ "tool": "read_file", "arguments": { "path": "notes.txt" } }] },
        { "text": "read it" },
    ]);
    let seen = start_run(turns, PermissionMode::Ask, SessionScript::default(), cwd.path()).ended().await;
    assert!(!seen.iter().any(|seen| matches!(seen, Seen::Approval { .. })), "reading in the cwd needs no approval");
    let results = tool_results(&seen);
    assert_eq!(results.len(), 1, "{seen:#?}");
    assert_eq!(results[0].0, ToolResultStatus::Ok);
    assert!(results[0].1.contains("plover"), "{}", results[0].1);
    let started = seen.iter().position(|seen| matches!(seen, Seen::Event(EventPayload::ToolCallStarted { .. })));
    let terminated = seen.iter().position(|seen| matches!(seen, Seen::Event(EventPayload::ToolCallTerminated { .. })));
    let promoted = seen.iter().position(|seen| matches!(seen, Seen::PromotePending));
    let end = seen.iter().position(|seen| matches!(seen, Seen::ToolFreeTurn { .. }));
    assert!(
        started < terminated && terminated < promoted && promoted < end,
        "started, result, boundary, end: {seen:#?}"
    );
    assert_eq!(final_texts(&seen), ["read it"]);
}

/// A file tool allowed outright runs where it was judged; one that needs an answer goes back to the run, which
/// asks, and runs it only once approved: either way its start precedes its result, and its approval its start.
#[actix::test]
async fn a_file_write_that_needs_an_answer_starts_only_once_approved_and_a_rejected_one_never() {
    for (answer, written) in
        [(ApprovalOutcome::Approved { for_tree: false }, true), (ApprovalOutcome::Rejected { feedback: None }, false)]
    {
        let cwd = tempfile::tempdir().unwrap();
        let turns = serde_json::json!([
            { "tool_calls": [{ "tool": "write_file", "arguments": { "path": "plan.md", "content": "step one\n" } }] },
            { "text": "noted" },
        ]);
        let script = SessionScript { approvals: VecDeque::from([answer]), ..SessionScript::default() };
        let seen = start_run(turns, PermissionMode::Ask, script, cwd.path()).ended().await;
        let asked = seen.iter().position(|seen| matches!(seen, Seen::Approval { tool } if tool == "write_file"));
        let started = seen.iter().position(|seen| matches!(seen, Seen::Event(EventPayload::ToolCallStarted { .. })));
        let terminated =
            seen.iter().position(|seen| matches!(seen, Seen::Event(EventPayload::ToolCallTerminated { .. })));
        assert!(asked.is_some(), "a write in `ask` mode is asked about: {seen:#?}");
        assert_eq!(cwd.path().join("plan.md").exists(), written, "{seen:#?}");
        if written {
            assert!(asked < started && started < terminated, "asked, started, result: {seen:#?}");
            assert_eq!(tool_results(&seen)[0].0, ToolResultStatus::Ok);
        } else {
            assert_eq!(started, None, "a rejected call never starts: {seen:#?}");
            assert_eq!(tool_results(&seen)[0].0, ToolResultStatus::Denied);
        }
        assert_eq!(final_texts(&seen), ["noted"]);
    }
}

#[actix::test]
async fn a_rejected_approval_is_the_call_s_denied_result_and_the_run_goes_on() {
    let cwd = tempfile::tempdir().unwrap();
    let turns = serde_json::json!([
        { "tool_calls": [{ "tool": "shell", "arguments": { "command": "touch made-by-the-tool" } }] },
        { "text": "understood" },
    ]);
    let script = SessionScript {
        approvals: VecDeque::from([ApprovalOutcome::Rejected { feedback: Some("not today".into()) }]),
        ..SessionScript::default()
    };
    let seen = start_run(turns, PermissionMode::Ask, script, cwd.path()).ended().await;
    assert!(seen.iter().any(|seen| matches!(seen, Seen::Approval { tool } if tool == "shell")), "{seen:#?}");
    let results = tool_results(&seen);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, ToolResultStatus::Denied);
    assert!(results[0].1.contains("not today"), "the feedback reaches the model: {}", results[0].1);
    assert!(!cwd.path().join("made-by-the-tool").exists(), "a rejected command never runs");
    assert_eq!(outputs(&seen), "", "no output streamed");
    assert_eq!(final_texts(&seen), ["understood"]);
}

#[actix::test]
async fn steering_pending_at_a_tool_free_turn_continues_the_run() {
    let cwd = tempfile::tempdir().unwrap();
    let turns = serde_json::json!([{ "text": "first answer" }, { "text": "second answer" }]);
    let script =
        SessionScript { steering: VecDeque::from([vec!["and also this".to_owned()]]), ..SessionScript::default() };
    let seen = start_run(turns, PermissionMode::Ask, script, cwd.path()).ended().await;
    assert_eq!(final_texts(&seen), ["first answer", "second answer"], "the steered input got a second turn");
}

#[actix::test]
async fn a_cancelled_run_stops_its_model_request_and_records_its_cancellation() {
    let cwd = tempfile::tempdir().unwrap();
    let turns = serde_json::json!([{ "text": "too late", "delay_ms": 60000 }]);
    let run = start_run(turns, PermissionMode::Ask, SessionScript::default(), cwd.path());
    assert!(run.run.send(CancelRun).await.unwrap(), "the run was running");
    let seen = run.ended().await;
    let cancelled = seen.iter().position(|seen| matches!(seen, Seen::Event(EventPayload::RunCancelled { .. })));
    let approvals = seen.iter().position(|seen| matches!(seen, Seen::CancelApprovals));
    assert!(approvals.is_some() && approvals < cancelled, "approvals cancelled, then the run: {seen:#?}");
    assert!(final_texts(&seen).is_empty());
    assert_eq!(deltas(&seen), "");
}

#[actix::test]
async fn a_run_whose_session_stopped_ends_instead_of_waiting() {
    let cwd = tempfile::tempdir().unwrap();
    let turns = serde_json::json!([{ "text": "one two three four five six" }]);
    let script = SessionScript { stop_at_first_delta: true, ..SessionScript::default() };
    let run = start_run(turns, PermissionMode::Ask, script, cwd.path());
    let session = run.session.clone();
    let seen = run.ended().await;
    assert!(!session.connected());
    assert!(final_texts(&seen).is_empty(), "the turn never ended in a session that was gone: {seen:#?}");
}

#[actix::test]
async fn an_approved_command_runs_and_streams_its_output_to_the_session_before_its_result() {
    let cwd = tempfile::tempdir().unwrap();
    let turns = serde_json::json!([
        { "tool_calls": [{ "tool": "shell", "arguments": { "command": "echo streamed-line" } }] },
        { "text": "it ran" },
    ]);
    let script = SessionScript {
        approvals: VecDeque::from([ApprovalOutcome::Approved { for_tree: false }]),
        ..SessionScript::default()
    };
    let seen = start_run(turns, PermissionMode::Ask, script, cwd.path()).ended().await;
    assert!(outputs(&seen).contains("streamed-line"), "{seen:#?}");
    let results = tool_results(&seen);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].0, ToolResultStatus::Ok, "{}", results[0].1);
    assert!(results[0].1.contains("streamed-line"));
    let output = seen.iter().position(|seen| matches!(seen, Seen::Output(_)));
    let terminated = seen.iter().position(|seen| matches!(seen, Seen::Event(EventPayload::ToolCallTerminated { .. })));
    assert!(output < terminated, "output streams before the result: {seen:#?}");
    assert_eq!(final_texts(&seen), ["it ran"]);
}

#[actix::test]
async fn a_model_that_refuses_for_good_hands_the_turn_to_the_next_model_of_the_chain() {
    let cwd = tempfile::tempdir().unwrap();
    let turns = serde_json::json!([{ "error": { "kind": "auth", "message": "the key was revoked" } }]);
    let chain = ["local/scripted", "local/echo"];
    let seen = start_run_on(&chain, turns, PermissionMode::Ask, SessionScript::default(), cwd.path()).ended().await;
    let fallback = seen.iter().position(|seen| {
        matches!(seen, Seen::Event(EventPayload::ModelFallback { from, to, .. })
            if from == "local/scripted" && to == "local/echo")
    });
    let end = seen.iter().position(|seen| matches!(seen, Seen::ToolFreeTurn { .. }));
    assert!(fallback.is_some() && fallback < end, "the fallback is recorded before the turn ends: {seen:#?}");
    let committed_by_echo = seen.iter().any(|seen| {
        matches!(seen, Seen::Event(EventPayload::ModelTurnCommitted { model, fallback_index: 1, .. })
            if model == "local/echo")
    });
    assert!(committed_by_echo, "the turn is the second model's: {seen:#?}");
}
