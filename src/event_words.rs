//! One line of words for each kind of event: what `troupe run`, `watch` and the history commands print. Pure
//! functions of the event, so every command says the same thing about it.

use troupe_protocol::diagnostic::{ShowLimits, visible_line};
use troupe_protocol::types::approval::ApprovalDecision;
use troupe_protocol::types::events::{
    CompactionOutcome, CompactionTrigger, DelegateStatus, EventPayload, InternalAgent, StoredEvent, TitleChangeKind,
};
use troupe_protocol::types::origin::{EngineOrigin, Origin};
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};

use crate::approvals_cmd::{action_name, quoting, shown_resource};

/// How far the lines under an event's first line are indented.
const INDENT: &str = "        ";

/// One line for a stored event: [`describe`], with the author of a run's input named by the event's origin (a
/// goal's or a producer's automatic run is not the user's).
pub fn describe_event(event: &StoredEvent) -> Option<String> {
    describe_event_named(event, None)
}

/// [`describe_event`], with the tool of a `tool_call_terminated` named (`tool`: the caller saw the call start;
/// the event itself carries only the call's id).
pub fn describe_event_named(event: &StoredEvent, tool: Option<&str>) -> Option<String> {
    if let EventPayload::RunStarted { input, model_chain, selection, attachments, .. } = &event.payload {
        let model = model_chain.first().map_or(&selection.model.model, |model| &model.model);
        let origin = event.origin_of();
        let author = match &origin {
            None | Some(Origin::User) => "user".into(),
            Some(Origin::Engine(EngineOrigin::Goal)) => "goal".into(),
            Some(Origin::Engine(EngineOrigin::Producer)) => "producer messages".into(),
            Some(Origin::Engine(EngineOrigin::Delegate)) => "task from the parent".into(),
            Some(other) => other.word(),
        };
        let run_id = event.run_id.as_deref().unwrap_or("?");
        let note = sticky_note(&event.payload);
        let files = attached(attachments);
        return Some(format!(
            "run {run_id} started ({}, {model}){note}\n        {author}: {input}{files}",
            selection.agent
        ));
    }
    if let EventPayload::SessionReverted { through_seq } = &event.payload {
        return Some(reverted(*through_seq, event.seq));
    }
    if let EventPayload::ToolCallTerminated { result, .. } = &event.payload
        && let Some(output_ref) = &result.output_ref
        && troupe_protocol::types::tool_output::is_output_ref(output_ref)
    {
        let hint = crate::tool_output_cmd::whole_output_hint(&event.session_id, output_ref);
        return describe_named(&event.payload, tool).map(|line| format!("{line}\n{INDENT}{hint}"));
    }
    describe_named(&event.payload, tool)
}

/// [`describe`], with the tool of a `tool_call_terminated` named when known.
fn describe_named(payload: &EventPayload, tool: Option<&str>) -> Option<String> {
    match payload {
        EventPayload::ToolCallTerminated { tool_call_id, result } => Some(tool_ended(tool, tool_call_id, result)),
        _ => describe(payload),
    }
}

/// What a `run_started` says when the run does not start on the model it was asked for: the session's runs of
/// that agent (and preset) stay on the fallback an earlier run committed on (fallback stickiness). `None` otherwise.
pub fn sticky_start(payload: &EventPayload) -> Option<String> {
    let EventPayload::RunStarted { selection, requested_model: Some(requested), .. } = payload else {
        return None;
    };
    (*requested != selection.model).then(|| {
        format!(
            "{} was asked for: the run starts on {}, the fallback an earlier run of agent {} in this session moved \
             to (its runs stay there until one resets the fallback: `troupe run --reset-fallback`)",
            requested.model, selection.model.model, selection.agent
        )
    })
}

/// [`sticky_start`] as an indented line under the event's first line, or nothing.
fn sticky_note(payload: &EventPayload) -> String {
    sticky_start(payload).map(|note| format!("\n{INDENT}note: {note}")).unwrap_or_default()
}

/// The words of an event that puts a run on another model than the one asked for (a fallback, or a start on a
/// sticky fallback): `troupe exec` prints them on stderr even when it prints nothing else.
pub fn model_switch(payload: &EventPayload) -> Option<String> {
    match payload {
        EventPayload::ModelFallback { .. } => describe(payload),
        EventPayload::RunStarted { .. } => sticky_start(payload),
        _ => None,
    }
}

/// The line of a `session_reverted` marker at `marker_seq`: which earlier events left the conversation (they stay
/// in the log, and a watcher has printed them above).
fn reverted(through_seq: u64, marker_seq: u64) -> String {
    let (first, last) = (through_seq + 1, marker_seq.saturating_sub(1));
    match first.cmp(&last) {
        std::cmp::Ordering::Less => format!(
            "reverted to #{through_seq}: events #{first} to #{last} above are no longer part of the conversation"
        ),
        std::cmp::Ordering::Equal => {
            format!("reverted to #{through_seq}: event #{first} above is no longer part of the conversation")
        }
        std::cmp::Ordering::Greater => format!("reverted to #{through_seq} (nothing after it to take back)"),
    }
}

/// How many lines of a checkpoint's summary a watcher sees, and how long each may be.
const SUMMARY_EXCERPT_LINES: usize = 3;
const SUMMARY_EXCERPT_CHARS: usize = 100;

/// The first lines of a checkpoint's summary, each cut to a readable length, indented under the event's line.
fn summary_excerpt(summary: &str) -> String {
    let lines: Vec<&str> = summary.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    let mut text = String::new();
    for line in lines.iter().take(SUMMARY_EXCERPT_LINES) {
        let cut: String = line.chars().take(SUMMARY_EXCERPT_CHARS).collect();
        let ellipsis = if cut.len() < line.len() { "…" } else { "" };
        text.push_str(&format!("\n        │ {cut}{ellipsis}"));
    }
    if lines.len() > SUMMARY_EXCERPT_LINES {
        text.push_str(&format!("\n        │ … ({} more lines)", lines.len() - SUMMARY_EXCERPT_LINES));
    }
    text
}

fn compaction_outcome(outcome: CompactionOutcome) -> &'static str {
    match outcome {
        CompactionOutcome::Committed => "committed",
        CompactionOutcome::Skipped => "skipped",
        CompactionOutcome::Failed => "failed",
        CompactionOutcome::Cancelled => "cancelled",
    }
}

fn delegate_status(status: DelegateStatus) -> &'static str {
    match status {
        DelegateStatus::Completed => "completed",
        DelegateStatus::Failed => "failed",
        DelegateStatus::Cancelled => "was cancelled",
        DelegateStatus::Interrupted => "was interrupted",
    }
}

/// How a tool call ended, named by its tool when the caller knows it (a `tool_call_terminated` carries only the
/// call's id): `shell (call-1-1) ended: ok: exit code 0`.
pub fn tool_ended(tool: Option<&str>, tool_call_id: &str, result: &PersistedToolResult) -> String {
    let status = match result.status {
        ToolResultStatus::Ok => "ok",
        ToolResultStatus::Error => "error",
        ToolResultStatus::Denied => "denied",
        ToolResultStatus::Cancelled => "cancelled",
    };
    let mut lines = result.output.lines().map(str::trim_end).filter(|line| !line.is_empty());
    let first_line = lines.next().unwrap_or("");
    // What went wrong is often said last (a traceback's error, a command's last stderr line): a failure shows both
    // ends of its output.
    let last_line = match result.status {
        ToolResultStatus::Ok => None,
        _ => lines.next_back().filter(|last| *last != first_line),
    };
    let call = match tool {
        Some(tool) => format!("{} ({tool_call_id})", visible_line(tool, 40)),
        None => format!("a tool call ({tool_call_id})"),
    };
    match last_line {
        Some(last) => {
            format!("{call} ended: {status}: {} … {}", visible_line(first_line, 120), visible_line(last, 160))
        }
        None => format!("{call} ended: {status}: {}", visible_line(first_line, 200)),
    }
}

/// What an approval asks, once: its summary (`run ls -la`, `write 3 bytes to /p/a.txt`) and its tool, the
/// resource shown whole (every line, every control seen) where the summary quotes it, instead of the summary and
/// then the resource again; a summary that does not quote its resource is followed by `ACTION on RESOURCE`.
pub fn approval_what(operation: &troupe_protocol::types::approval::ApprovalOperation, whole: &str) -> String {
    let tool = visible_line(&operation.tool, 40);
    let resource = &operation.resource;
    if let Some((before, after)) = quoting(&operation.summary, resource) {
        let shown = shown_resource(resource, ShowLimits::APPROVAL, " ", INDENT, whole);
        let before = visible_line(before.trim_end(), 60);
        let after = if after.is_empty() { String::new() } else { visible_line(after, 60) };
        return format!("{tool}: {before}{shown}{after}");
    }
    format!(
        "{} ({tool})\n{INDENT}{} on{}",
        visible_line(&operation.summary, 100),
        action_name(operation.action),
        shown_resource(resource, ShowLimits::APPROVAL, " ", INDENT, whole)
    )
}

/// One line for an event, or `None` for events that are not worth a line of their own.
pub fn describe(payload: &EventPayload) -> Option<String> {
    Some(match payload {
        EventPayload::SessionCreated { cwd, selection, .. } => {
            let cwd = crate::commands::home_shortened(cwd);
            format!("session created in {cwd} ({} with {})", selection.agent, selection.model.model)
        }
        EventPayload::SessionTitleCommitted { title, change, .. } => match (change, title) {
            (TitleChangeKind::Set, Some(title)) => format!("title set to {title:?}"),
            (TitleChangeKind::Reset, _) => "title reset".to_owned(),
            (TitleChangeKind::Auto, Some(title)) => format!("titled {title:?}"),
            _ => "title cleared".to_owned(),
        },
        EventPayload::SessionReverted { through_seq } => format!("reverted to #{through_seq}"),
        EventPayload::SessionArchived { archived: true } => "session archived".to_owned(),
        EventPayload::SessionArchived { archived: false } => "session unarchived".to_owned(),
        EventPayload::SessionForked { source_session_id, through_seq } => {
            format!("forked from {source_session_id} at #{through_seq}; the events above are its copy")
        }
        EventPayload::UserInputAdmitted { input, attachments, .. } => {
            format!("steer queued: {input}{}", attached(attachments))
        }
        EventPayload::UserInputSubmitted { input, attachments, .. } => {
            format!("user: {input}{}", attached(attachments))
        }
        EventPayload::UserInputRecalled { input, .. } => format!("steer recalled: {input}"),
        EventPayload::RunStarted { input, model_chain, selection, attachments, .. } => {
            let model = model_chain.first().map_or(&selection.model.model, |model| &model.model);
            format!("run started on {model}{}\n        user: {input}{}", sticky_note(payload), attached(attachments))
        }
        EventPayload::RunCompleted { .. } => "run completed".to_owned(),
        EventPayload::RunFailed { error, .. } => format!("run failed: {}", crate::cli_errors::speak_cli(error)),
        EventPayload::RunCancelled { .. } => "run cancelled".to_owned(),
        EventPayload::RunInterrupted { .. } => "run interrupted".to_owned(),
        EventPayload::ModelAttemptStarted { .. } | EventPayload::ModelUsageRecorded { .. } => {
            return None;
        }
        EventPayload::TextDelta { .. } | EventPayload::ToolCallProgress { .. } => return None,
        EventPayload::ReasoningDelta { .. } => return None,
        EventPayload::AttemptAbandoned { model, error, will_retry, .. } => {
            let next = if *will_retry { "retrying" } else { "giving up on it" };
            let said = crate::cli_errors::speak_cli(&error.message);
            format!("{model} failed ({}): {said}; {next}", error.kind)
        }
        EventPayload::ModelFallback { from, to, .. } => {
            format!("falling back from {from} to {to} (the next model of the agent's chain)")
        }
        EventPayload::ModelTurnCommitted { model, tool_calls, text, .. } => {
            if tool_calls.is_empty() && !text.is_empty() {
                return None;
            }
            let calls: Vec<String> = tool_calls.iter().map(|call| call.tool.clone()).collect();
            format!("{model} asks for: {}", calls.join(", "))
        }
        EventPayload::ToolCallStarted { tool_call_id, tool, resource, .. } => {
            // The command that runs, as an approval showed it: each line, every control seen.
            let whole = "`troupe watch --json` has it whole";
            let resource = shown_resource(resource, ShowLimits::APPROVAL, ": ", INDENT, whole);
            format!("tool {} ({tool_call_id}){resource}", visible_line(tool, 40))
        }
        EventPayload::ToolStdinSubmitted { bytes, eof, .. } => {
            format!("stdin: {bytes} bytes{}", if *eof { ", then end of input" } else { "" })
        }
        EventPayload::ToolCallTerminated { tool_call_id, result } => {
            return Some(tool_ended(None, tool_call_id, result));
        }
        EventPayload::ToolOutputElided { elided_bytes, .. } => {
            format!("({elided_bytes} bytes of output not recorded)")
        }
        EventPayload::ApprovalRequested { approval } => {
            let operation = &approval.operation;
            let whole = format!("`troupe approvals {} --full` shows it whole", approval.session_id);
            let diff = operation.diff.as_ref().map_or_else(String::new, |diff| {
                let limits = crate::diff_words::APPROVAL_DIFF;
                crate::diff_words::diff_block(diff, INDENT, limits, &whole, crate::style::Style::plain())
            });
            format!(
                "approval needed: {}\n{diff}{INDENT}answer: troupe approve {} {} [--tree | --reject [--feedback \
                 TEXT] | --cancel]",
                approval_what(operation, &whole),
                approval.session_id,
                approval.approval_id
            )
        }
        EventPayload::ApprovalUserDecisionRecorded { decision, answered_by, feedback, .. } => {
            let decision = match decision {
                ApprovalDecision::ApproveOnce => "approved once",
                ApprovalDecision::ApproveTree => "approved for the whole session tree",
                ApprovalDecision::Reject => "rejected",
                ApprovalDecision::Cancel => "withdrawn",
            };
            // `client:<connection>` is a person at some client: the connection's id means nothing to a reader.
            // Anything else (an engine component) is named.
            let by = if answered_by.starts_with("client:") { String::new() } else { format!(" by {answered_by}") };
            match feedback {
                Some(feedback) => format!("approval {decision}{by}: {feedback}"),
                None => format!("approval {decision}{by}"),
            }
        }
        EventPayload::ApprovalFinalized { .. } => return None,
        EventPayload::CompactionStarted { trigger, focus, model, .. } => {
            let why = match trigger {
                CompactionTrigger::Manual => "compacting the history",
                CompactionTrigger::Auto => "the history is near the context window: compacting it",
                CompactionTrigger::Overflow => "the model's context window overflowed: compacting the history",
            };
            match focus {
                Some(focus) => format!("{why} with {model} (focus: {focus})"),
                None => format!("{why} with {model}"),
            }
        }
        EventPayload::ContextCheckpointCommitted {
            through_seq,
            compacted_messages,
            elided_tool_results,
            summary,
            ..
        } => {
            format!(
                "checkpoint: history through #{through_seq} summarized ({compacted_messages} messages, \
                 {elided_tool_results} tool results; attachments before it are no longer sent){}",
                summary_excerpt(summary)
            )
        }
        EventPayload::CompactionEnded { outcome, reason, .. } => match (outcome, reason) {
            (CompactionOutcome::Committed, _) => return None,
            (outcome, Some(reason)) => format!("compaction {}: {reason}", compaction_outcome(*outcome)),
            (outcome, None) => format!("compaction {}", compaction_outcome(*outcome)),
        },
        EventPayload::InternalAgentFailed { agent, model, error, .. } => {
            let what = match agent {
                InternalAgent::ContextCompaction => "a compaction's summary",
                InternalAgent::SessionTitle => "the session's title",
            };
            let said = crate::cli_errors::speak_cli(&error.message);
            format!("{model} failed to write {what} ({}): {said}", error.kind)
        }
        EventPayload::DelegateStarted { child_session_id, agent, task, .. } => {
            format!("delegated to {agent} in child session {child_session_id}: {task}")
        }
        EventPayload::DelegateFinished { child_session_id, status, summary, .. } => {
            let first_line = summary.lines().next().unwrap_or("");
            format!("child session {child_session_id} {}: {first_line}", delegate_status(*status))
        }
        EventPayload::RunChangesUndone { undone_run_id, files, forced } => {
            let files = if files.len() == 1 { "1 file".to_owned() } else { format!("{} files", files.len()) };
            let forced = if *forced { ", forced" } else { "" };
            format!("undid run {undone_run_id}: {files} put back as before it{forced}")
        }
        EventPayload::ApprovalCancelled { reason, .. } => format!("approval cancelled: {reason}"),
        EventPayload::TreeApprovalGrantCommitted { grant } => {
            format!("granted for the whole session tree: {}", visible_line(&grant.resource, 200))
        }
        EventPayload::PluginEventAdded { plugin, name, .. } => format!("plugin {plugin}: {name}"),
        EventPayload::GoalActivated { .. }
        | EventPayload::GoalChecklistRevised { .. }
        | EventPayload::GoalLifecycleChanged { .. } => return crate::goal_cli::describe_event(payload),
        // --- producers (issue 10) ---
        EventPayload::ProducerMessageAccepted { producer_owner, mode, body, .. } => {
            let mode = match mode {
                ProducerMessageMode::Steer => "steer",
                ProducerMessageMode::Queue => "queue",
            };
            format!("message from {} ({mode}): {body}", describe_owner(producer_owner))
        }
        EventPayload::ProducerMessagesClaimed { message_ids } => match message_ids.len() {
            1 => "producer message delivered to the run".to_owned(),
            n => format!("{n} producer messages delivered to the run"),
        },
        EventPayload::ProducerMessagesReleased { message_ids, reason } => {
            format!("{} producer message(s) pending again: {reason}", message_ids.len())
        }
        // The message was announced when it was accepted and delivered; its consumption adds nothing to read.
        EventPayload::ProducerMessageConsumed { .. } => return None,
        EventPayload::ProducerMessageDiscarded { message_id } => format!("producer message {message_id} withdrawn"),
        // --- end producers ---
        EventPayload::Unknown => "(an event kind this client does not know)".to_owned(),
    })
}

/// Who sent a producer message, for `describe`.
fn describe_owner(owner: &ProducerOwner) -> String {
    match owner {
        ProducerOwner::Plugin { plugin } => format!("plugin {plugin}"),
        ProducerOwner::Delegation { child_session_id, .. } => format!("delegated session {child_session_id}"),
        ProducerOwner::Goal { .. } => "the goal".to_owned(),
        ProducerOwner::GoalControl { .. } => "the goal's controls".to_owned(),
    }
}

/// ` [attached: shot.png (image/png, 12 KB), spec.pdf (application/pdf, 2 MB)]`, or nothing.
pub fn attached(files: &[troupe_protocol::types::attachment::AttachedFile]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = files
        .iter()
        .map(|file| format!("{} ({}, {})", crate::style::clean(&file.name), file.mime_type, size_words(file.size)))
        .collect();
    format!(" [attached: {}]", listed.join(", "))
}

fn size_words(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{} KB", bytes.div_ceil(1024)),
        _ => format!("{:.1} MB", bytes as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::common::{ModelSelection, RunSelection};

    use super::*;

    fn run_started(origin: Option<&str>) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: Some("r".into()),
            seq: 2,
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            origin: origin.map(str::to_owned),
            payload: EventPayload::RunStarted {
                client_run_id: "c".into(),
                selection: RunSelection {
                    agent: "default".into(),
                    model: ModelSelection { model: "local/echo".into(), variant: None },
                    preset: None,
                },
                input: "do it".into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        }
    }

    #[test]
    fn a_run_names_who_wrote_its_input() {
        let line = |origin| describe_event(&run_started(origin)).unwrap();
        let started = "run r started (default, local/echo)";
        assert_eq!(line(Some("user")), format!("{started}\n        user: do it"));
        assert_eq!(line(None), format!("{started}\n        user: do it"));
        assert_eq!(line(Some("engine:goal")), format!("{started}\n        goal: do it"));
        assert_eq!(line(Some("engine:producer")), format!("{started}\n        producer messages: do it"));
        assert_eq!(line(Some("engine:delegate")), format!("{started}\n        task from the parent: do it"));
    }

    #[test]
    fn a_failed_tool_shows_both_ends_of_its_output() {
        let result = |status, output: &str| PersistedToolResult {
            status,
            output: output.into(),
            display: None,
            output_ref: None,
            additional_messages: Vec::new(),
        };
        let failed =
            result(ToolResultStatus::Error, "TMPDIR=/tmp/x\nTraceback\n\nPermissionError: Permission denied\n");
        assert_eq!(
            tool_ended(Some("mcp__docs__read"), "call-0-0", &failed),
            "mcp__docs__read (call-0-0) ended: error: TMPDIR=/tmp/x … PermissionError: Permission denied"
        );
        let ok = result(ToolResultStatus::Ok, "wrote 3 bytes\n--- a/x\n");
        assert_eq!(tool_ended(Some("write_file"), "call-0-1", &ok), "write_file (call-0-1) ended: ok: wrote 3 bytes");
        let one = result(ToolResultStatus::Error, "exit code 1\n");
        assert_eq!(tool_ended(None, "c", &one), "a tool call (c) ended: error: exit code 1");
    }

    #[test]
    fn a_run_lists_the_files_attached_to_its_input() {
        let mut event = run_started(Some("user"));
        let EventPayload::RunStarted { attachments, .. } = &mut event.payload else { unreachable!() };
        attachments.push(troupe_protocol::types::attachment::AttachedFile {
            path: "artifacts/x.png".into(),
            mime_type: "image/png".into(),
            name: "screen.png".into(),
            size: 70,
        });
        let line = describe_event(&event).unwrap();
        assert!(line.ends_with("user: do it [attached: screen.png (image/png, 70 bytes)]"), "{line}");
    }

    #[test]
    fn an_approval_quotes_its_resource_only_where_the_summary_shows_it_as_a_word() {
        use troupe_protocol::types::approval::{ApprovalOperation, PermissionAction};
        let operation = |tool: &str, action, resource: &str, summary: &str| ApprovalOperation {
            tool: tool.into(),
            action,
            resource: resource.into(),
            summary: summary.into(),
            diff: None,
        };
        let fetch = operation("web_fetch", PermissionAction::Network, "docs.rs", "fetch https://docs.rs/serde");
        let shown = approval_what(&fetch, "");
        assert!(shown.starts_with("fetch https://docs.rs/serde (web_fetch)"), "{shown}");
        assert!(!shown.contains("https:// "), "{shown}");
        let shell = operation("shell", PermissionAction::Execute, "ls -la", "run ls -la");
        assert_eq!(approval_what(&shell, ""), "shell: run ls -la");
    }

    #[test]
    fn a_run_on_a_sticky_fallback_says_which_model_was_asked_for() {
        let mut event = run_started(Some("user"));
        let EventPayload::RunStarted { requested_model, .. } = &mut event.payload else { unreachable!() };
        *requested_model = Some(ModelSelection { model: "local/echo".into(), variant: None });
        assert_eq!(sticky_start(&event.payload), None, "the model asked for");
        assert_eq!(model_switch(&event.payload), None);
        let EventPayload::RunStarted { requested_model, .. } = &mut event.payload else { unreachable!() };
        *requested_model = Some(ModelSelection { model: "openai/gpt-4o".into(), variant: None });
        let line = describe_event(&event).unwrap();
        assert!(
            line.starts_with(
                "run r started (default, local/echo)\n        note: openai/gpt-4o was asked for: the run \
                              starts on local/echo"
            ),
            "{line}"
        );
        assert!(model_switch(&event.payload).unwrap().starts_with("openai/gpt-4o was asked for"));
    }

    #[test]
    fn an_automatic_title_is_not_a_cleared_one() {
        let titled = |title: Option<&str>, change| {
            let payload = EventPayload::SessionTitleCommitted {
                title: title.map(str::to_owned),
                change,
                client_rename_id: "auto-1".into(),
            };
            describe(&payload).unwrap()
        };
        assert_eq!(titled(Some("Fix the parser"), TitleChangeKind::Auto), "titled \"Fix the parser\"");
        assert_eq!(titled(None, TitleChangeKind::Clear), "title cleared");
    }

    #[test]
    fn a_revert_marker_names_the_events_that_left_the_conversation() {
        let marker = |through_seq, seq| StoredEvent {
            seq,
            payload: EventPayload::SessionReverted { through_seq },
            ..run_started(None)
        };
        assert_eq!(
            describe_event(&marker(4, 9)).unwrap(),
            "reverted to #4: events #5 to #8 above are no longer part of the conversation"
        );
        assert_eq!(
            describe_event(&marker(4, 6)).unwrap(),
            "reverted to #4: event #5 above is no longer part of the conversation"
        );
        assert_eq!(describe_event(&marker(4, 5)).unwrap(), "reverted to #4 (nothing after it to take back)");
    }

    #[test]
    fn a_checkpoint_shows_the_first_lines_of_its_summary() {
        let long = "x".repeat(150);
        let summary = format!("The user asked for a parser.\n\n{long}\nTests pass.\nDocs remain.\nOne more.");
        let line = describe(&EventPayload::ContextCheckpointCommitted {
            compaction_id: "c".into(),
            summary,
            through_seq: 12,
            trigger: CompactionTrigger::Manual,
            compacted_messages: 7,
            elided_tool_results: 2,
        })
        .unwrap();
        let lines: Vec<&str> = line.lines().collect();
        assert!(lines[0].starts_with("checkpoint: history through #12 summarized (7 messages, 2 tool results"));
        assert_eq!(lines[1], "        │ The user asked for a parser.");
        assert_eq!(lines[2], format!("        │ {}…", "x".repeat(100)));
        assert_eq!(lines[3], "        │ Tests pass.");
        assert_eq!(lines[4], "        │ … (2 more lines)");
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn an_approval_shows_each_line_of_its_command_with_every_control_seen() {
        let command = "ls\r\nrm -rf ~ #\u{202e}\u{1b}[2J";
        let approval: troupe_protocol::types::approval::ApprovalRecord = serde_json::from_value(serde_json::json!({
            "session_id": "s1", "run_id": "r", "tool_call_id": "t1", "approval_id": "ap1", "revision": 1,
            "status": "pending",
            "operation": {"tool": "shell", "action": "execute", "resource": command, "summary": format!("run {command}")},
            "operation_fingerprint": "f", "decision": null, "feedback": null, "answered_by": null,
            "constraints": {"allow_once": true, "allow_tree_grant": true, "cancellable": true, "expires_at": null},
            "created_at": "2026-01-01T00:00:00Z", "decided_at": null
        }))
        .unwrap();
        let said = describe(&EventPayload::ApprovalRequested { approval: Box::new(approval) }).unwrap();
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(
            lines[..3],
            ["approval needed: shell: run:", "        │ ls⟨CR⟩", "        │ rm -rf ~ #⟨U+202E⟩⟨ESC⟩[2J",],
            "{said}"
        );
        assert!(lines[3].starts_with("        answer: troupe approve s1 ap1"), "{said}");

        // The call's start shows the command the same way; a one-line command stays on its line.
        let started = |resource: &str| {
            describe(&EventPayload::ToolCallStarted {
                tool_call_id: "t1".into(),
                tool: "shell".into(),
                arguments: serde_json::json!({"command": resource}),
                action: troupe_protocol::types::approval::PermissionAction::Execute,
                resource: resource.into(),
            })
            .unwrap()
        };
        assert_eq!(started(command), "tool shell (t1):\n        │ ls⟨CR⟩\n        │ rm -rf ~ #⟨U+202E⟩⟨ESC⟩[2J");
        assert_eq!(started("ls -la"), "tool shell (t1): ls -la");
    }

    fn approval(tool: &str, action: &str, resource: &str, summary: &str) -> EventPayload {
        let approval = serde_json::from_value(serde_json::json!({
            "session_id": "s1", "run_id": "r", "tool_call_id": "t1", "approval_id": "ap1", "revision": 1,
            "status": "pending",
            "operation": {"tool": tool, "action": action, "resource": resource, "summary": summary},
            "operation_fingerprint": "f", "decision": null, "feedback": null, "answered_by": null,
            "constraints": {"allow_once": true, "allow_tree_grant": true, "cancellable": true, "expires_at": null},
            "created_at": "2026-01-01T00:00:00Z", "decided_at": null
        }))
        .unwrap();
        EventPayload::ApprovalRequested { approval }
    }

    #[test]
    fn an_approval_says_its_command_once_and_its_answer_in_words() {
        let said = describe(&approval("shell", "execute", "ls -la", "run ls -la")).unwrap();
        assert_eq!(said.lines().next(), Some("approval needed: shell: run ls -la"), "{said}");
        assert_eq!(said.matches("ls -la").count(), 1, "{said}");
        let said = describe(&approval("write_file", "write", "/p/a.txt", "write 3 bytes to /p/a.txt")).unwrap();
        assert_eq!(said.lines().next(), Some("approval needed: write_file: write 3 bytes to /p/a.txt"), "{said}");
        // A summary quoting only the beginning of a long command: the command once, whole.
        let said = describe(&approval("shell", "execute", "echo one\necho two", "run echo one…")).unwrap();
        assert!(said.starts_with("approval needed: shell: run:\n        │ echo one\n        │ echo two\n"), "{said}");
        // A summary that does not quote its resource keeps the resource's own line.
        let said = describe(&approval("fetch", "network", "example.com", "fetch a page")).unwrap();
        assert!(said.starts_with("approval needed: fetch a page (fetch)\n        network on example.com"), "{said}");

        let answered = |decision: &str, by: &str, feedback: Option<&str>| {
            let payload = serde_json::from_value(serde_json::json!({
                "type": "approval_user_decision_recorded", "approval_id": "ap1", "revision": 2,
                "decision": decision, "answered_by": by, "feedback": feedback, "client_response_id": "r"
            }))
            .unwrap();
            describe(&payload).unwrap()
        };
        assert_eq!(answered("approve_once", "client:connection-14", None), "approval approved once");
        assert_eq!(answered("reject", "client:connection-3", Some("not now")), "approval rejected: not now");
        assert_eq!(answered("approve_tree", "user", None), "approval approved for the whole session tree by user");
    }

    #[test]
    fn a_tool_calls_end_is_named_by_its_tool_when_known() {
        let result: PersistedToolResult =
            serde_json::from_value(serde_json::json!({"status": "ok", "output": "exit code 0\nmore"})).unwrap();
        assert_eq!(tool_ended(Some("shell"), "call-1-1", &result), "shell (call-1-1) ended: ok: exit code 0");
        assert_eq!(tool_ended(None, "call-1-1", &result), "a tool call (call-1-1) ended: ok: exit code 0");
    }

    #[test]
    fn attached_files_are_listed_with_their_type_and_size() {
        let file = |name: &str, mime_type: &str, size: u64| troupe_protocol::types::attachment::AttachedFile {
            path: "artifacts/x".into(),
            mime_type: mime_type.into(),
            name: name.into(),
            size,
        };
        assert_eq!(attached(&[]), "");
        assert_eq!(
            attached(&[file("shot.png", "image/png", 12_000), file("s\u{1b}[31m.pdf", "application/pdf", 3 << 20)]),
            " [attached: shot.png (image/png, 12 KB), s.pdf (application/pdf, 3.0 MB)]"
        );
    }
}
