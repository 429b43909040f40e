//! Rendering a session's events for a person at a terminal.
//!
//! One line per event, `#seq  hh:mm:ss  what`, except model text, which streams inline as it arrives (its
//! reasoning first, as `thinking: …`, dimmed on a terminal), and live tool output, which is printed as it comes
//! with a `│ ` margin. During a replay (history) the durable `tool_call_progress` chunks stand in for the live
//! output, which is gone by then.
//!
//! Child sessions (delegations) that a follower subscribed to alongside the session it follows are printed in the
//! same stream, each line after a margin naming the child (`  [6f7a8b92 helper] `, indented once more per level),
//! so the sub-agent's work reads live next to its parent's. Sessions interleave, so a streamed line of one is
//! closed before another's event is printed, and picked up again with its margin.

use std::collections::HashMap;
use std::io::Write;

use base64::Engine as _;
use serde_json::Value;
use troupe_protocol::types::events::{EventPayload, StoredEvent};

pub use crate::event_words::{describe, describe_event};
use crate::output::{Output, checked, json_line};
use crate::style::{Style, clean};

/// Prints events and tool output, keeping track of an unfinished streamed line. Every write to stdout goes
/// through [`checked`], so a closed pipe ends the command quietly; untrusted text is [`clean`]ed first.
#[derive(Default)]
pub struct Printer {
    /// One JSON object per line (`--json`) instead of words.
    json: bool,
    /// Event prefixes dimmed and run ends coloured (stdout is a terminal and `NO_COLOR` is unset).
    color: bool,
    /// The session whose streamed model text or live tool output ends the current line, unfinished.
    open: Option<(String, OpenLine)>,
    /// Followed child sessions by id.
    children: HashMap<String, Child>,
    /// The tool of each call seen asked for, by call id: a call's end names its tool, which its event does not.
    tools: HashMap<String, String>,
    /// Running calls, to say when one has gone quiet (it may wait for input).
    quiet: crate::quiet_tools::QuietTools,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpenLine {
    Text,
    /// The model's reasoning (`reasoning_delta`), marked `thinking:` and dimmed apart from its answer.
    Reasoning,
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
pub fn tail_id(session_id: &str) -> &str {
    let start = session_id.len().saturating_sub(8);
    session_id.get(start..).unwrap_or(session_id)
}

impl Printer {
    /// A printer for `out`.
    pub fn new(out: Output) -> Self {
        let color = out == Output::Human && Style::stdout().is_colored();
        Printer { json: out == Output::Json, color, ..Printer::default() }
    }

    /// Starts printing the events of `child_session_id`, delegated from `parent_session_id` to `agent`, with a
    /// margin. False when it is printed already.
    pub fn adopt_child(&mut self, parent_session_id: &str, child_session_id: &str, agent: &str) -> bool {
        if self.children.contains_key(child_session_id) {
            return false;
        }
        let depth = self.children.get(parent_session_id).map_or(0, |parent| parent.depth) + 1;
        let margin = format!("{}[{} {agent}] ", "  ".repeat(depth), tail_id(child_session_id));
        self.children.insert(child_session_id.to_owned(), Child { margin, depth, ended: false });
        true
    }

    /// Whether an adopted child has not yet shown the end of its run.
    pub fn children_running(&self) -> bool {
        self.children.values().any(|child| !child.ended)
    }

    /// Remembers the tools of the calls a model turn asked for (a rejected call never starts) and of started
    /// calls (a history read from the middle may begin after the turn).
    fn note_tools(&mut self, payload: &EventPayload) {
        match payload {
            EventPayload::ModelTurnCommitted { tool_calls, .. } => {
                for call in tool_calls {
                    self.tools.insert(call.tool_call_id.clone(), call.tool.clone());
                }
            }
            EventPayload::ToolCallStarted { tool_call_id, tool, .. } => {
                self.tools.insert(tool_call_id.clone(), tool.clone());
            }
            _ => {}
        }
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
        // Replayed history counts too: a call started in it and not ended runs still.
        self.quiet.event(event, std::time::Instant::now());
        let mut out = std::io::stdout().lock();
        let margin = self.margin(&event.session_id).to_owned();
        let streamed = match &event.payload {
            EventPayload::TextDelta { text, .. } => Some((OpenLine::Text, "assistant: ", text)),
            EventPayload::ReasoningDelta { text, .. } => Some((OpenLine::Reasoning, "thinking: ", text)),
            _ => None,
        };
        if let Some((kind, label, text)) = streamed {
            if !self.is_open(&event.session_id, kind) {
                self.end_line(&mut out);
                let label = if kind == OpenLine::Reasoning { self.dim(label) } else { label.to_owned() };
                checked(write!(out, "{margin}{}  {label}", self.prefix(event)));
                self.open = Some((event.session_id.clone(), kind));
            }
            let text = indent_lines(&clean(text), &margin);
            // Dimmed piece by piece: each chunk carries its own reset, so an interrupted stream leaves no style on.
            let text = if kind == OpenLine::Reasoning { self.dim(&text) } else { text };
            checked(write!(out, "{text}"));
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
        self.note_tools(&event.payload);
        let tool = match &event.payload {
            EventPayload::ToolCallTerminated { tool_call_id, .. } => self.tools.remove(tool_call_id),
            _ => None,
        };
        if let Some(what) = crate::event_words::describe_event_named(event, tool.as_deref()) {
            let what = self.paint(&event.payload, indent_lines(&clean(&what), &margin));
            checked(writeln!(out, "{margin}{}  {what}", self.prefix(event)));
        }
        checked(out.flush());
    }

    /// Prints a live `events.tool_output_delta` or `events.tool_output_snapshot` notification's bytes.
    pub fn tool_output(&mut self, params: &Value) {
        if self.json {
            // Shaped as an event's line (`.payload.type`), with the notification's fields in the payload.
            let mut payload = serde_json::json!({"type": "tool_output"});
            if let (Some(object), Some(params)) = (payload.as_object_mut(), params.as_object()) {
                object.extend(params.clone());
            }
            let ids = |name: &str| params.get(name).cloned().unwrap_or(Value::Null);
            json_line(
                &serde_json::json!({"session_id": ids("session_id"), "run_id": ids("run_id"), "payload": payload}),
            );
            return;
        }
        if let Some(tool_call_id) = params.get("tool_call_id").and_then(Value::as_str) {
            self.quiet.heard(tool_call_id, std::time::Instant::now());
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

    /// When a running call goes quiet next ([`Printer::say_quiet`] then has a line to print); never in JSON.
    pub fn quiet_due(&self) -> Option<std::time::Instant> {
        if self.json { None } else { self.quiet.next_due() }
    }

    /// Says of each call quiet now that it still runs and how to send it input.
    pub fn say_quiet(&mut self) {
        let said = self.quiet.due(std::time::Instant::now());
        if said.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        self.end_line(&mut out);
        for (session_id, line) in said {
            let margin = self.margin(&session_id).to_owned();
            checked(writeln!(out, "{margin}{}", self.dim(&format!("        … {}", clean(&line)))));
        }
        checked(out.flush());
    }

    /// Live output was skipped (this terminal fell behind, or the daemon dropped bytes for it).
    pub fn output_gap(&mut self) {
        if self.json {
            json_line(&serde_json::json!({"payload": {"type": "tool_output_gap"}}));
            return;
        }
        let mut out = std::io::stdout().lock();
        self.end_line(&mut out);
        checked(writeln!(out, "  │ … (some output was skipped)"));
        checked(out.flush());
    }

    /// `#seq  hh:mm:ss`, dimmed on a terminal.
    fn prefix(&self, event: &StoredEvent) -> String {
        self.dim(&prefix(event))
    }

    /// `text` dimmed on a terminal, else as it is.
    fn dim(&self, text: &str) -> String {
        if self.color { Style::stdout().dim(text) } else { text.to_owned() }
    }

    /// The end of a run in green (completed) or red (failed, cancelled, interrupted), on a terminal.
    fn paint(&self, payload: &EventPayload, what: String) -> String {
        if !self.color || !is_run_end(payload) {
            return what;
        }
        match payload {
            EventPayload::RunCompleted { .. } => Style::stdout().green(&what),
            _ => Style::stdout().red(&what),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
