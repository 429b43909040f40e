//! The model history of a session, rebuilt from its log.
//!
//! Each run's input and each promoted steer become user turns; each committed model turn becomes an assistant
//! turn; each tool termination becomes a tool result followed by the messages it emitted, as the reference's
//! "Tool-emitted messages" section says: user-role messages keep their role; system-role messages become user
//! turns whose first text part is [`SYSTEM_MESSAGE_MARKER`], so the system prefix (and its cache breakpoint) never
//! changes mid-history.
//!
//! When one model turn made several tool calls, all of its tool results come first, in call order, and the
//! messages the tools emitted follow them, each tool's in array order: OpenAI and Anthropic both reject a user
//! turn between the tool results of one turn. A second termination of the same call replaces the first one's
//! unit instead of adding its messages again. A call of a committed turn that never terminated (its run was
//! cancelled or interrupted first) gets a synthesized error result, since the vendors reject a call left
//! unanswered. Because the history is derived from the persisted events alone, replay and restart produce the
//! same history.
//!
//! Tool-emitted messages are validated here, on load, as well as when a tool emits them: a result whose
//! `additional_messages` break the reference's bounds (at most four, each with a part) enters the history
//! without them and with a note saying so, and the damage is logged; the event itself is kept.
//!
//! A `context_checkpoint_committed` replaces every entry that came from an event at or before its `through_seq`
//! with one user message carrying the summary ([`crate::compaction::checkpoint_message`]); later events add after
//! it. A tool call whose turn was compacted is gone with it: a termination of it arriving later is not history.
//! Each entry remembers the seq of the event that made it, for this; [`Transcript::messages`] stays one pass.

use std::borrow::Cow;
use std::collections::HashMap;

use troupe_protocol::types::attachment::AttachedFile;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{MessagePart, MessageRole, PersistedToolResult, ToolResultStatus};

use crate::model::{ChatMessage, FileContent, ToolCallRequest, UserPart};

/// The first text part of a system-role tool-emitted message, materialized as a user turn.
pub const SYSTEM_MESSAGE_MARKER: &str = "[tool-emitted system message; materialized as user history]";

/// The result given to a call that never terminated.
pub const UNFINISHED_CALL_RESULT: &str = "the call did not finish: its run ended before it returned a result";

/// A terminated tool call in history form: its result and the messages it emitted.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolUnit {
    pub result: ChatMessage,
    pub emitted: Vec<ChatMessage>,
}

/// One entry of the history: a plain message, or a model turn with its tool calls' units.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
enum Entry {
    Message(ChatMessage),
    Turn(ToolTurn),
    /// A checkpoint's summary, standing for everything before it.
    Checkpoint(ChatMessage),
}

/// An entry and the seq of the event that made it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Placed {
    seq: u64,
    entry: Entry,
}

/// The result of a tool unit left out of a summary request, standing for it and for the `lost` messages its tool
/// emitted (left out with it, as one unit). The count is given so the summarizing model knows how much it did not
/// see, as the reference's "Tool-emitted messages" section asks.
pub fn elided_result(lost: usize) -> String {
    match lost {
        0 => "[tool result elided: left out to fit the request]".to_owned(),
        1 => "[tool result elided: left out, with the 1 message the tool emitted, to fit the request]".to_owned(),
        lost => {
            format!("[tool result elided: left out, with the {lost} messages the tool emitted, to fit the request]")
        }
    }
}

/// A committed model turn that asked for tools, and the units of the calls that terminated so far.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct ToolTurn {
    /// The assistant message; `None` for terminations whose turn is not in the log (kept, in log order).
    assistant: Option<ChatMessage>,
    /// Units by call id, in termination order.
    units: Vec<(String, ToolUnit)>,
}

impl ToolTurn {
    /// How many tool units the turn has when flattened (calls that never terminated included).
    fn unit_count(&self) -> usize {
        let calls: &[ToolCallRequest] = match &self.assistant {
            Some(ChatMessage::Assistant { tool_calls, .. }) => tool_calls,
            _ => &[],
        };
        let unlisted = self.units.iter().filter(|(id, _)| !calls.iter().any(|call| call.tool_call_id == *id)).count();
        calls.len() + unlisted
    }

    /// The turn's messages: the assistant turn, every result in call order, then every emitted message. While
    /// `elide` is positive, each unit is elided as a whole (its result replaced by [`elided_result`], which counts
    /// the emitted messages left out with it) and `elide` counts down.
    fn flatten_into(&self, messages: &mut Vec<ChatMessage>, elide: &mut usize) {
        let calls: &[ToolCallRequest] = match &self.assistant {
            Some(ChatMessage::Assistant { tool_calls, .. }) => tool_calls,
            _ => &[],
        };
        messages.extend(self.assistant.iter().cloned());
        let mut units: Vec<Cow<'_, ToolUnit>> = Vec::with_capacity(calls.len().max(self.units.len()));
        for call in calls {
            units.push(match self.units.iter().find(|(id, _)| *id == call.tool_call_id) {
                Some((_, unit)) => Cow::Borrowed(unit),
                None => Cow::Owned(ToolUnit {
                    result: ChatMessage::ToolResult {
                        tool_call_id: call.tool_call_id.clone(),
                        tool: call.tool.clone(),
                        content: UNFINISHED_CALL_RESULT.to_owned(),
                        is_error: true,
                    },
                    emitted: Vec::new(),
                }),
            });
        }
        // Units of calls the turn does not list (a log written otherwise) still count, after the listed ones.
        let unlisted = self.units.iter().filter(|(id, _)| !calls.iter().any(|call| call.tool_call_id == *id));
        units.extend(unlisted.map(|(_, unit)| Cow::Borrowed(unit)));
        for unit in &mut units {
            if *elide == 0 {
                break;
            }
            *elide -= 1;
            let ChatMessage::ToolResult { tool_call_id, tool, .. } = &unit.result else { continue };
            let result = ChatMessage::ToolResult {
                tool_call_id: tool_call_id.clone(),
                tool: tool.clone(),
                content: elided_result(unit.emitted.len()),
                is_error: false,
            };
            *unit = Cow::Owned(ToolUnit { result, emitted: Vec::new() });
        }
        messages.extend(units.iter().map(|unit| unit.result.clone()));
        for unit in &units {
            messages.extend(unit.emitted.iter().cloned());
        }
    }
}

/// What a checkpoint made now would replace: the counts its event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionCounts {
    /// History messages (a previous checkpoint's summary included).
    pub messages: u64,
    /// Tool units: a result with the messages its tool emitted.
    pub tool_units: u64,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Transcript {
    entries: Vec<Placed>,
    /// The entry of each call's turn, by call id.
    turn_of_call: HashMap<String, usize>,
    /// Tool names by call id, from the committed turns that asked for them.
    tool_names: HashMap<String, String>,
}

impl Transcript {
    /// The history, oldest first, as it is sent to a model.
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.messages_eliding(0)
    }

    /// The history with its first `elide` tool units elided, each as one unit (see [`elided_result`]): what a
    /// summary request sends when the whole history does not fit.
    pub fn messages_eliding(&self, mut elide: usize) -> Vec<ChatMessage> {
        let mut messages = Vec::with_capacity(self.entries.len());
        for placed in &self.entries {
            match &placed.entry {
                Entry::Message(message) | Entry::Checkpoint(message) => messages.push(message.clone()),
                Entry::Turn(turn) => turn.flatten_into(&mut messages, &mut elide),
            }
        }
        messages
    }

    /// What a checkpoint of the whole history would replace; `None` when nothing happened since the last
    /// checkpoint (or at all), so there is nothing to compact.
    pub fn compaction_counts(&self) -> Option<CompactionCounts> {
        if !self.entries.iter().any(|placed| !matches!(placed.entry, Entry::Checkpoint(_))) {
            return None;
        }
        let mut counts = CompactionCounts { messages: 0, tool_units: 0 };
        for placed in &self.entries {
            match &placed.entry {
                Entry::Message(_) | Entry::Checkpoint(_) => counts.messages += 1,
                Entry::Turn(turn) => {
                    let units = turn.unit_count() as u64;
                    let emitted: usize = turn.units.iter().map(|(_, unit)| unit.emitted.len()).sum();
                    counts.tool_units += units;
                    counts.messages += u64::from(turn.assistant.is_some()) + units + emitted as u64;
                }
            }
        }
        Some(counts)
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        match &event.payload {
            EventPayload::RunStarted { input, skill, attachments, .. } => {
                // A skill invocation reaches the model as the skill's rendered text.
                let text = skill.as_ref().map_or(input, |skill| &skill.rendered);
                self.push_user(event.seq, text, attachments);
            }
            EventPayload::UserInputSubmitted { input, attachments, .. } => {
                self.push_user(event.seq, input, attachments)
            }
            EventPayload::ModelTurnCommitted { text, tool_calls, .. } => {
                let assistant = ChatMessage::Assistant {
                    text: text.clone(),
                    tool_calls: tool_calls
                        .iter()
                        .map(|call| ToolCallRequest {
                            tool_call_id: call.tool_call_id.clone(),
                            tool: call.tool.clone(),
                            arguments: call.arguments.clone(),
                        })
                        .collect(),
                };
                if tool_calls.is_empty() {
                    self.entries.push(Placed { seq: event.seq, entry: Entry::Message(assistant) });
                    return;
                }
                let index = self.entries.len();
                for call in tool_calls {
                    self.tool_names.insert(call.tool_call_id.clone(), call.tool.clone());
                    self.turn_of_call.insert(call.tool_call_id.clone(), index);
                }
                let turn = ToolTurn { assistant: Some(assistant), units: Vec::new() };
                self.entries.push(Placed { seq: event.seq, entry: Entry::Turn(turn) });
            }
            EventPayload::ToolCallTerminated { tool_call_id, result } => {
                self.terminate(event.seq, tool_call_id, result)
            }
            EventPayload::ContextCheckpointCommitted {
                summary,
                through_seq,
                compacted_messages,
                elided_tool_results,
                ..
            } => {
                // A newer summary covers the older ones (it was made from a history that started with them).
                self.entries
                    .retain(|placed| placed.seq > *through_seq && !matches!(placed.entry, Entry::Checkpoint(_)));
                let message = crate::compaction::checkpoint_message(summary, *compacted_messages, *elided_tool_results);
                self.entries.insert(0, Placed { seq: event.seq, entry: Entry::Checkpoint(message) });
                self.reindex();
            }
            _ => {}
        }
    }

    /// Rebuilds the entry of each call's turn after entries were removed.
    fn reindex(&mut self) {
        self.turn_of_call.clear();
        for (index, placed) in self.entries.iter().enumerate() {
            let Entry::Turn(turn) = &placed.entry else { continue };
            if let Some(ChatMessage::Assistant { tool_calls, .. }) = &turn.assistant {
                for call in tool_calls {
                    self.turn_of_call.insert(call.tool_call_id.clone(), index);
                }
            }
            for (id, _) in &turn.units {
                self.turn_of_call.insert(id.clone(), index);
            }
        }
    }

    fn push_user(&mut self, seq: u64, text: &str, attachments: &[AttachedFile]) {
        let message = user_message(text, attachments);
        self.entries.push(Placed { seq, entry: Entry::Message(message) });
    }

    fn terminate(&mut self, seq: u64, tool_call_id: &str, result: &PersistedToolResult) {
        if self.tool_names.contains_key(tool_call_id) && !self.turn_of_call.contains_key(tool_call_id) {
            // Its turn was compacted into a checkpoint: the call is part of the summary, not of the history.
            return;
        }
        let tool = self.tool_names.get(tool_call_id).cloned().unwrap_or_default();
        let unit = tool_unit(tool_call_id, tool, result);
        if let Err(reason) = result.validate() {
            tracing::warn!(seq, tool_call_id, %reason, "a tool result's additional messages were left out of history");
        }
        let index = match self.turn_of_call.get(tool_call_id) {
            Some(index) => *index,
            None => {
                // A termination whose turn is not in the log: kept where it comes, as a turn of its own.
                self.turn_of_call.insert(tool_call_id.to_owned(), self.entries.len());
                let turn = ToolTurn { assistant: None, units: Vec::new() };
                self.entries.push(Placed { seq, entry: Entry::Turn(turn) });
                self.entries.len() - 1
            }
        };
        let Some(Placed { entry: Entry::Turn(turn), .. }) = self.entries.get_mut(index) else { return };
        match turn.units.iter_mut().find(|(id, _)| id == tool_call_id) {
            Some((_, existing)) => *existing = unit,
            None => turn.units.push((tool_call_id.to_owned(), unit)),
        }
    }
}

/// A user's input as a history message: its text, then each file it attached as a file part (read by the run when
/// it builds its request, like a tool's attachments).
pub fn user_message(text: &str, attachments: &[AttachedFile]) -> ChatMessage {
    let mut parts = Vec::with_capacity(1 + attachments.len());
    parts.push(UserPart::Text(text.to_owned()));
    parts.extend(attachments.iter().map(|file| UserPart::File {
        path: file.path.clone(),
        mime_type: file.mime_type.clone(),
        name: Some(file.name.clone()),
        content: FileContent::NotLoaded,
    }));
    ChatMessage::User { parts }
}

/// A tool result and the messages it emitted, in history form. Messages that break the reference's bounds are
/// left out, and the result says so, so the model is not left guessing.
pub fn tool_unit(tool_call_id: &str, tool: String, result: &PersistedToolResult) -> ToolUnit {
    let mut content = result.output.clone();
    let mut emitted = Vec::with_capacity(result.additional_messages.len());
    match result.validate() {
        Err(reason) => {
            content.push_str(&format!("\n\n[the tool's additional messages were left out: {reason}]"));
        }
        Ok(()) => {
            for message in &result.additional_messages {
                let mut parts: Vec<UserPart> = Vec::with_capacity(message.parts.len() + 1);
                if message.role == MessageRole::System {
                    parts.push(UserPart::Text(SYSTEM_MESSAGE_MARKER.to_owned()));
                }
                parts.extend(message.parts.iter().map(|part| match part {
                    MessagePart::Text { text } => UserPart::Text(text.clone()),
                    MessagePart::File { path, mime_type, name } => UserPart::File {
                        path: path.clone(),
                        mime_type: mime_type.clone(),
                        name: name.clone(),
                        content: FileContent::NotLoaded,
                    },
                }));
                emitted.push(ChatMessage::User { parts });
            }
        }
    }
    let result = ChatMessage::ToolResult {
        tool_call_id: tool_call_id.to_owned(),
        tool,
        content,
        is_error: result.status != ToolResultStatus::Ok,
    };
    ToolUnit { result, emitted }
}

#[cfg(test)]
mod tests;
