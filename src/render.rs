//! Rendering a session's events for a person at a terminal.
//!
//! One line per event, `#seq  hh:mm:ss  what`, except model text, which streams inline as it arrives, and live
//! tool output, which is printed as it comes with a `│ ` margin. During a replay (history) the durable
//! `tool_call_progress` chunks stand in for the live output, which is gone by then.

use std::io::Write;

use base64::Engine as _;
use serde_json::Value;
use troupe_protocol::types::events::{
    CompactionOutcome, CompactionTrigger, DelegateStatus, EventPayload, StoredEvent, TitleChangeKind,
};
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};
use troupe_protocol::types::run::ToolResultStatus;

/// Prints events and tool output, keeping track of an unfinished streamed line.
#[derive(Default)]
pub struct Printer {
    /// A model's text is being streamed on the current line.
    streaming: bool,
    /// Live tool output ended without a newline.
    output_open: bool,
}

impl Printer {
    /// Prints one stored event. `live` is false for replayed history.
    pub fn event(&mut self, event: &StoredEvent, live: bool) {
        let mut out = std::io::stdout().lock();
        if let EventPayload::TextDelta { text, .. } = &event.payload {
            if !self.streaming {
                self.end_output(&mut out);
                let _ = write!(out, "{}  assistant: ", prefix(event));
                self.streaming = true;
            }
            let _ = write!(out, "{text}");
            let _ = out.flush();
            return;
        }
        if let EventPayload::ToolCallProgress { text, .. } = &event.payload {
            if !live {
                self.end_stream(&mut out);
                for line in text.lines() {
                    let _ = writeln!(out, "  │ {line}");
                }
            }
            return;
        }
        self.end_stream(&mut out);
        self.end_output(&mut out);
        if let Some(what) = describe_event(event) {
            let _ = writeln!(out, "{}  {what}", prefix(event));
        }
        let _ = out.flush();
    }

    /// Prints a live `events.tool_output_delta` or `events.tool_output_snapshot` notification's bytes.
    pub fn tool_output(&mut self, params: &Value) {
        let Some(data) = params.get("data").and_then(Value::as_str) else {
            return;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
            return;
        };
        let mut out = std::io::stdout().lock();
        self.end_stream(&mut out);
        let text = String::from_utf8_lossy(&bytes);
        for piece in text.split_inclusive('\n') {
            if !self.output_open {
                let _ = write!(out, "  │ ");
            }
            let _ = write!(out, "{piece}");
            self.output_open = !piece.ends_with('\n');
        }
        let _ = out.flush();
    }

    /// Live output was skipped (this terminal fell behind, or the daemon dropped bytes for it).
    pub fn output_gap(&mut self) {
        let mut out = std::io::stdout().lock();
        self.end_stream(&mut out);
        self.end_output(&mut out);
        let _ = writeln!(out, "  │ … (some output was skipped)");
        let _ = out.flush();
    }

    fn end_stream(&mut self, out: &mut impl Write) {
        if self.streaming {
            let _ = writeln!(out);
            self.streaming = false;
        }
    }

    fn end_output(&mut self, out: &mut impl Write) {
        if self.output_open {
            let _ = writeln!(out);
            self.output_open = false;
        }
    }
}

fn prefix(event: &StoredEvent) -> String {
    let time = event.timestamp.get(11..19).unwrap_or(&event.timestamp);
    format!("#{:<5} {time}", event.seq)
}

/// One line for a stored event: [`describe`], with the author of a run's input named by the event's origin (a
/// goal's or a producer's automatic run is not the user's).
pub fn describe_event(event: &StoredEvent) -> Option<String> {
    if let EventPayload::RunStarted { input, model_chain, selection, .. } = &event.payload {
        let model = model_chain.first().map_or(&selection.model.model, |model| &model.model);
        let author = match event.origin.as_deref() {
            None | Some("user") => "user",
            Some("engine:goal") => "goal",
            Some("engine:producer") => "producer messages",
            Some(other) => other,
        };
        return Some(format!("run started on {model}\n        {author}: {input}"));
    }
    describe(&event.payload)
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

/// One line for an event, or `None` for events that are not worth a line of their own.
pub fn describe(payload: &EventPayload) -> Option<String> {
    Some(match payload {
        EventPayload::SessionCreated { cwd, selection, .. } => {
            format!("session created in {cwd} ({} with {})", selection.agent, selection.model.model)
        }
        EventPayload::SessionTitleCommitted { title, change, .. } => match (change, title) {
            (TitleChangeKind::Set, Some(title)) => format!("title set to {title:?}"),
            (TitleChangeKind::Reset, _) => "title reset".to_owned(),
            _ => "title cleared".to_owned(),
        },
        EventPayload::SessionReverted { through_seq } => format!("reverted to #{through_seq}"),
        EventPayload::SessionForked { source_session_id, through_seq } => {
            format!("forked from {source_session_id} at #{through_seq}")
        }
        EventPayload::UserInputAdmitted { input, .. } => format!("steer queued: {input}"),
        EventPayload::UserInputSubmitted { input, .. } => format!("user: {input}"),
        EventPayload::UserInputRecalled { input, .. } => format!("steer recalled: {input}"),
        EventPayload::RunStarted { input, model_chain, selection, .. } => {
            let model = model_chain.first().map_or(&selection.model.model, |model| &model.model);
            format!("run started on {model}\n        user: {input}")
        }
        EventPayload::RunCompleted { .. } => "run completed".to_owned(),
        EventPayload::RunFailed { error, .. } => format!("run failed: {error}"),
        EventPayload::RunCancelled { .. } => "run cancelled".to_owned(),
        EventPayload::RunInterrupted { .. } => "run interrupted".to_owned(),
        EventPayload::ModelAttemptStarted { .. } | EventPayload::ModelUsageRecorded { .. } => {
            return None;
        }
        EventPayload::TextDelta { .. } | EventPayload::ToolCallProgress { .. } => return None,
        EventPayload::ReasoningDelta { .. } => return None,
        EventPayload::AttemptAbandoned { model, error, will_retry, .. } => {
            let next = if *will_retry { "retrying" } else { "giving up on it" };
            format!("{model} failed ({}): {}; {next}", error.kind, error.message)
        }
        EventPayload::ModelFallback { from, to, .. } => format!("falling back from {from} to {to}"),
        EventPayload::ModelTurnCommitted { model, tool_calls, text, .. } => {
            if tool_calls.is_empty() && !text.is_empty() {
                return None;
            }
            let calls: Vec<String> = tool_calls.iter().map(|call| call.tool.clone()).collect();
            format!("{model} asks for: {}", calls.join(", "))
        }
        EventPayload::ToolCallStarted { tool_call_id, tool, resource, .. } => {
            format!("tool {tool} ({tool_call_id}): {resource}")
        }
        EventPayload::ToolStdinSubmitted { bytes, eof, .. } => {
            format!("stdin: {bytes} bytes{}", if *eof { ", then end of input" } else { "" })
        }
        EventPayload::ToolCallTerminated { tool_call_id, result } => {
            let status = match result.status {
                ToolResultStatus::Ok => "ok",
                ToolResultStatus::Error => "error",
                ToolResultStatus::Denied => "denied",
                ToolResultStatus::Cancelled => "cancelled",
            };
            let first_line = result.output.lines().next().unwrap_or("");
            format!("tool {tool_call_id} ended: {status}: {first_line}")
        }
        EventPayload::ToolOutputElided { elided_bytes, .. } => {
            format!("({elided_bytes} bytes of output not recorded)")
        }
        EventPayload::ApprovalRequested { approval } => format!(
            "approval needed: {} ({} {})\n        answer: troupe approve {} {} [--tree | --reject [--feedback TEXT] | --cancel]",
            approval.operation.summary,
            approval.operation.tool,
            approval.operation.resource,
            approval.session_id,
            approval.approval_id
        ),
        EventPayload::ApprovalUserDecisionRecorded { decision, answered_by, feedback, .. } => {
            let decision =
                serde_json::to_value(decision).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            match feedback {
                Some(feedback) => format!("approval answered by {answered_by}: {decision} ({feedback})"),
                None => format!("approval answered by {answered_by}: {decision}"),
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
        EventPayload::ContextCheckpointCommitted { through_seq, compacted_messages, elided_tool_results, .. } => {
            format!(
                "checkpoint: history through #{through_seq} summarized ({compacted_messages} messages, \
                 {elided_tool_results} tool results; attachments before it are no longer sent)"
            )
        }
        EventPayload::CompactionEnded { outcome, reason, .. } => match (outcome, reason) {
            (CompactionOutcome::Committed, _) => return None,
            (outcome, Some(reason)) => format!("compaction {}: {reason}", compaction_outcome(*outcome)),
            (outcome, None) => format!("compaction {}", compaction_outcome(*outcome)),
        },
        EventPayload::DelegateStarted { child_session_id, agent, task, .. } => {
            format!("delegated to {agent} in child session {child_session_id}: {task}")
        }
        EventPayload::DelegateFinished { child_session_id, status, summary, .. } => {
            let first_line = summary.lines().next().unwrap_or("");
            format!("child session {child_session_id} {}: {first_line}", delegate_status(*status))
        }
        EventPayload::ApprovalCancelled { reason, .. } => format!("approval cancelled: {reason}"),
        EventPayload::TreeApprovalGrantCommitted { grant } => {
            format!("granted for the whole session tree: {}", grant.resource)
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
            },
        }
    }

    #[test]
    fn a_run_names_who_wrote_its_input() {
        let line = |origin| describe_event(&run_started(origin)).unwrap();
        assert_eq!(line(Some("user")), "run started on local/echo\n        user: do it");
        assert_eq!(line(None), "run started on local/echo\n        user: do it");
        assert_eq!(line(Some("engine:goal")), "run started on local/echo\n        goal: do it");
        assert_eq!(line(Some("engine:producer")), "run started on local/echo\n        producer messages: do it");
    }
}
