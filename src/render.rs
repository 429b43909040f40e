//! Rendering a session's events for a person at a terminal.
//!
//! One line per event, `#seq  hh:mm:ss  what`, except model text, which streams inline as it arrives, and live
//! tool output, which is printed as it comes with a `│ ` margin. During a replay (history) the durable
//! `tool_call_progress` chunks stand in for the live output, which is gone by then.
//!
//! Child sessions (delegations) that a follower subscribed to alongside the session it follows are printed in the
//! same stream, each line after a margin naming the child (`  [6f7a8b92 helper] `, indented once more per level),
//! so the sub-agent's work reads live next to its parent's. Sessions interleave, so a streamed line of one is
//! closed before another's event is printed, and picked up again with its margin.

use std::collections::HashMap;
use std::io::Write;

use base64::Engine as _;
use serde_json::Value;
use troupe_protocol::types::events::{
    CompactionOutcome, CompactionTrigger, DelegateStatus, EventPayload, StoredEvent, TitleChangeKind,
};
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};
use troupe_protocol::types::run::ToolResultStatus;

use crate::output::{Output, checked, json_line};
use crate::style::clean;

/// Prints events and tool output, keeping track of an unfinished streamed line. Every write to stdout goes
/// through [`checked`], so a closed pipe ends the command quietly; untrusted text is [`clean`]ed first.
#[derive(Default)]
pub struct Printer {
    /// One JSON object per line (`--json`) instead of words.
    json: bool,
    /// The session whose streamed model text or live tool output ends the current line, unfinished.
    open: Option<(String, OpenLine)>,
    /// Followed child sessions by id.
    children: HashMap<String, Child>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpenLine {
    Text,
    Output,
}

/// A child session printed alongside its parent.
struct Child {
    /// Put before each of its lines.
    margin: String,
    /// 1 for a child of the followed session, 2 for a grandchild, ...
    depth: usize,
    /// A run of it has ended since it was adopted (its delegated run: a child has no other unless a client
    /// starts one).
    ended: bool,
}

/// A session id short enough for a margin: its last 8 characters. Ids are UUIDv7, whose first characters are
/// the creation time and so shared by sessions created together; the end is random.
pub fn short_id(session_id: &str) -> &str {
    let start = session_id.len().saturating_sub(8);
    session_id.get(start..).unwrap_or(session_id)
}

impl Printer {
    /// A printer for `out`.
    pub fn new(out: Output) -> Self {
        Printer { json: out == Output::Json, ..Printer::default() }
    }

    /// Starts printing the events of `child_session_id`, delegated from `parent_session_id` to `agent`, with a
    /// margin. False when it is printed already.
    pub fn adopt_child(&mut self, parent_session_id: &str, child_session_id: &str, agent: &str) -> bool {
        if self.children.contains_key(child_session_id) {
            return false;
        }
        let depth = self.children.get(parent_session_id).map_or(0, |parent| parent.depth) + 1;
        let margin = format!("{}[{} {agent}] ", "  ".repeat(depth), short_id(child_session_id));
        self.children.insert(child_session_id.to_owned(), Child { margin, depth, ended: false });
        true
    }

    /// Whether an adopted child has not yet shown the end of its run.
    pub fn children_running(&self) -> bool {
        self.children.values().any(|child| !child.ended)
    }

    fn margin(&self, session_id: &str) -> &str {
        self.children.get(session_id).map_or("", |child| child.margin.as_str())
    }

    /// Prints one stored event. `live` is false for replayed history.
    pub fn event(&mut self, event: &StoredEvent, live: bool) {
        if self.json {
            if let Ok(value) = serde_json::to_value(event) {
                json_line(&value);
            }
            return;
        }
        let mut out = std::io::stdout().lock();
        let margin = self.margin(&event.session_id).to_owned();
        if let EventPayload::TextDelta { text, .. } = &event.payload {
            if !self.is_open(&event.session_id, OpenLine::Text) {
                self.end_line(&mut out);
                checked(write!(out, "{margin}{}  assistant: ", prefix(event)));
                self.open = Some((event.session_id.clone(), OpenLine::Text));
            }
            checked(write!(out, "{}", indent_lines(&clean(text), &margin)));
            checked(out.flush());
            return;
        }
        if let EventPayload::ToolCallProgress { text, .. } = &event.payload {
            if !live {
                self.end_line(&mut out);
                for line in clean(text).lines() {
                    checked(writeln!(out, "{margin}  │ {line}"));
                }
            }
            return;
        }
        self.end_line(&mut out);
        if is_run_end(&event.payload)
            && let Some(child) = self.children.get_mut(&event.session_id)
        {
            child.ended = true;
        }
        if let Some(what) = describe_event(event) {
            checked(writeln!(out, "{margin}{}  {}", prefix(event), indent_lines(&clean(&what), &margin)));
        }
        checked(out.flush());
    }

    /// Prints a live `events.tool_output_delta` or `events.tool_output_snapshot` notification's bytes.
    pub fn tool_output(&mut self, params: &Value) {
        if self.json {
            let mut value = serde_json::json!({"kind": "tool_output"});
            if let (Some(object), Some(params)) = (value.as_object_mut(), params.as_object()) {
                object.extend(params.clone());
            }
            json_line(&value);
            return;
        }
        let Some(data) = params.get("data").and_then(Value::as_str) else {
            return;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
            return;
        };
        let session_id = params.get("session_id").and_then(Value::as_str).unwrap_or_default().to_owned();
        let margin = self.margin(&session_id).to_owned();
        let mut out = std::io::stdout().lock();
        if !self.is_open(&session_id, OpenLine::Output) {
            self.end_line(&mut out);
        }
        let text = clean(&String::from_utf8_lossy(&bytes));
        for piece in text.split_inclusive('\n') {
            if self.open.is_none() {
                checked(write!(out, "{margin}  │ "));
            }
            checked(write!(out, "{piece}"));
            self.open = (!piece.ends_with('\n')).then(|| (session_id.clone(), OpenLine::Output));
        }
        checked(out.flush());
    }

    /// Live output was skipped (this terminal fell behind, or the daemon dropped bytes for it).
    pub fn output_gap(&mut self) {
        if self.json {
            json_line(&serde_json::json!({"kind": "tool_output_gap"}));
            return;
        }
        let mut out = std::io::stdout().lock();
        self.end_line(&mut out);
        checked(writeln!(out, "  │ … (some output was skipped)"));
        checked(out.flush());
    }

    fn is_open(&self, session_id: &str, kind: OpenLine) -> bool {
        self.open.as_ref().is_some_and(|(open_session, open_kind)| open_session == session_id && *open_kind == kind)
    }

    fn end_line(&mut self, out: &mut impl Write) {
        if self.open.take().is_some() {
            checked(writeln!(out));
        }
    }
}

/// Whether the event ends a run.
pub fn is_run_end(payload: &EventPayload) -> bool {
    matches!(
        payload,
        EventPayload::RunCompleted { .. }
            | EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. }
    )
}

/// `text` with `margin` after each of its line breaks, so that a child's lines keep their margin.
fn indent_lines(text: &str, margin: &str) -> String {
    if margin.is_empty() { text.to_owned() } else { text.replace('\n', &format!("\n{margin}")) }
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
            Some("engine:delegate") => "task from the parent",
            Some(other) => other,
        };
        let run_id = event.run_id.as_deref().unwrap_or("?");
        return Some(format!("run {run_id} started ({}, {model})\n        {author}: {input}", selection.agent));
    }
    if let EventPayload::SessionReverted { through_seq } = &event.payload {
        return Some(reverted(*through_seq, event.seq));
    }
    describe(&event.payload)
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
        EventPayload::SessionArchived { archived: true } => "session archived".to_owned(),
        EventPayload::SessionArchived { archived: false } => "session unarchived".to_owned(),
        EventPayload::SessionForked { source_session_id, through_seq } => {
            format!("forked from {source_session_id} at #{through_seq}; the events above are its copy")
        }
        EventPayload::UserInputAdmitted { input, .. } => format!("steer queued: {input}"),
        EventPayload::UserInputSubmitted { input, .. } => format!("user: {input}"),
        EventPayload::UserInputRecalled { input, .. } => format!("steer recalled: {input}"),
        EventPayload::RunStarted { input, model_chain, selection, .. } => {
            let model = model_chain.first().map_or(&selection.model.model, |model| &model.model);
            format!("run started on {model}\n        user: {input}")
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
                requested_model: None,
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
    fn children_get_a_margin_one_level_deeper_than_their_parent() {
        let mut printer = Printer::default();
        assert!(printer.adopt_child("root", "01957a1d-0a00-7b11-9c21-4d5e6f7a8b92", "helper"));
        assert!(!printer.adopt_child("root", "01957a1d-0a00-7b11-9c21-4d5e6f7a8b92", "helper"));
        assert!(printer.adopt_child(
            "01957a1d-0a00-7b11-9c21-4d5e6f7a8b92",
            "01957a1d-0a00-7b11-9c21-000000000001",
            "x"
        ));
        assert_eq!(printer.margin("root"), "");
        assert_eq!(printer.margin("01957a1d-0a00-7b11-9c21-4d5e6f7a8b92"), "  [6f7a8b92 helper] ");
        assert_eq!(printer.margin("01957a1d-0a00-7b11-9c21-000000000001"), "    [00000001 x] ");
        assert_eq!(indent_lines("a\nb", "  [1 x] "), "a\n  [1 x] b");
    }
}
