//! The model history of a session, rebuilt from its log.
//!
//! Each run's input and each promoted steer become user turns; each committed model turn becomes an assistant
//! turn; each tool termination becomes a tool result followed by the messages it emitted, exactly as the
//! reference's "Tool-emitted messages" section says: the result first, then the messages in array order;
//! user-role messages keep their role; system-role messages become user turns whose first text part is
//! [`SYSTEM_MESSAGE_MARKER`], so the system prefix (and its cache breakpoint) never changes mid-history. A second
//! termination of the same call replaces the first one's unit instead of adding its messages again. Because the
//! history is derived from the persisted terminal result, replay and restart produce the same history.

use std::collections::HashMap;

use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{MessagePart, MessageRole, PersistedToolResult, ToolResultStatus};

use crate::model::{ChatMessage, ToolCallRequest, UserPart};

/// The first text part of a system-role tool-emitted message, materialized as a user turn.
pub const SYSTEM_MESSAGE_MARKER: &str = "[tool-emitted system message; materialized as user history]";

#[derive(Clone, Debug, Default)]
pub struct Transcript {
    messages: Vec<ChatMessage>,
    /// Where each terminated tool call's unit (result plus emitted messages) sits: start index and length.
    tool_units: HashMap<String, (usize, usize)>,
    /// Tool names by call id, from the committed turns that asked for them.
    tool_names: HashMap<String, String>,
}

impl Transcript {
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        match &event.payload {
            EventPayload::RunStarted { input, .. } | EventPayload::UserInputSubmitted { input, .. } => {
                self.messages.push(ChatMessage::User { parts: vec![UserPart::Text(input.clone())] });
            }
            EventPayload::ModelTurnCommitted { text, tool_calls, .. } => {
                for call in tool_calls {
                    self.tool_names.insert(call.tool_call_id.clone(), call.tool.clone());
                }
                self.messages.push(ChatMessage::Assistant {
                    text: text.clone(),
                    tool_calls: tool_calls
                        .iter()
                        .map(|call| ToolCallRequest {
                            tool_call_id: call.tool_call_id.clone(),
                            tool: call.tool.clone(),
                            arguments: call.arguments.clone(),
                        })
                        .collect(),
                });
            }
            EventPayload::ToolCallTerminated { tool_call_id, result } => self.terminate(tool_call_id, result),
            _ => {}
        }
    }

    fn terminate(&mut self, tool_call_id: &str, result: &PersistedToolResult) {
        let tool = self.tool_names.get(tool_call_id).cloned().unwrap_or_default();
        let unit = tool_unit(tool_call_id, tool, result);
        match self.tool_units.get(tool_call_id).copied() {
            Some((start, length)) => {
                let new_length = unit.len();
                self.messages.splice(start..start + length, unit);
                // Units after the replaced one moved by the difference.
                for (other_start, _) in self.tool_units.values_mut() {
                    if *other_start > start {
                        *other_start = *other_start + new_length - length;
                    }
                }
                self.tool_units.insert(tool_call_id.to_owned(), (start, new_length));
            }
            None => {
                let start = self.messages.len();
                self.tool_units.insert(tool_call_id.to_owned(), (start, unit.len()));
                self.messages.extend(unit);
            }
        }
    }
}

/// A tool result followed by the messages it emitted.
pub fn tool_unit(tool_call_id: &str, tool: String, result: &PersistedToolResult) -> Vec<ChatMessage> {
    let mut unit = vec![ChatMessage::ToolResult {
        tool_call_id: tool_call_id.to_owned(),
        tool,
        content: result.output.clone(),
        is_error: result.status != ToolResultStatus::Ok,
    }];
    for message in &result.additional_messages {
        let mut parts: Vec<UserPart> = Vec::with_capacity(message.parts.len() + 1);
        if message.role == MessageRole::System {
            parts.push(UserPart::Text(SYSTEM_MESSAGE_MARKER.to_owned()));
        }
        parts.extend(message.parts.iter().map(|part| match part {
            MessagePart::Text { text } => UserPart::Text(text.clone()),
            MessagePart::File { path, mime_type, name } => {
                UserPart::File { path: path.clone(), mime_type: mime_type.clone(), name: name.clone() }
            }
        }));
        unit.push(ChatMessage::User { parts });
    }
    unit
}
