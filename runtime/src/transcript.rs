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
            EventPayload::RunStarted { input, skill, .. } => {
                // A skill invocation reaches the model as the skill's rendered text.
                let text = skill.as_ref().map_or(input, |skill| &skill.rendered);
                self.messages.push(ChatMessage::User { parts: vec![UserPart::Text(text.clone())] });
            }
            EventPayload::UserInputSubmitted { input, .. } => {
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

#[cfg(test)]
mod tests {
    use troupe_protocol::types::events::ToolCallRecord;
    use troupe_protocol::types::run::ToolEmittedMessage;

    use super::*;

    fn event(seq: u64, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: Some("r".into()),
            seq,
            timestamp: "t".into(),
            origin: None,
            payload,
        }
    }

    fn turn_with_call(seq: u64, id: &str) -> StoredEvent {
        event(
            seq,
            EventPayload::ModelTurnCommitted {
                attempt_id: "a".into(),
                model: "local/scripted".into(),
                fallback_index: 0,
                text: String::new(),
                reasoning: None,
                tool_calls: vec![ToolCallRecord {
                    tool_call_id: id.into(),
                    tool: "probe".into(),
                    arguments: serde_json::json!({}),
                }],
            },
        )
    }

    fn terminated(seq: u64, id: &str, output: &str, messages: Vec<ToolEmittedMessage>) -> StoredEvent {
        event(
            seq,
            EventPayload::ToolCallTerminated {
                tool_call_id: id.into(),
                result: PersistedToolResult {
                    status: ToolResultStatus::Ok,
                    output: output.into(),
                    display: None,
                    output_ref: None,
                    additional_messages: messages,
                },
            },
        )
    }

    fn message(role: MessageRole, text: &str) -> ToolEmittedMessage {
        ToolEmittedMessage { role, parts: vec![MessagePart::Text { text: text.into() }] }
    }

    fn texts(message: &ChatMessage) -> Vec<String> {
        match message {
            ChatMessage::User { parts } => parts
                .iter()
                .map(|part| match part {
                    UserPart::Text(text) => text.clone(),
                    UserPart::File { path, .. } => format!("file:{path}"),
                })
                .collect(),
            other => vec![format!("{other:?}")],
        }
    }

    #[test]
    fn the_result_comes_first_then_its_messages_in_order_with_system_ones_marked() {
        let mut transcript = Transcript::default();
        transcript.apply(&turn_with_call(2, "c1"));
        transcript.apply(&terminated(
            3,
            "c1",
            "result",
            vec![
                message(MessageRole::User, "from the user role"),
                message(MessageRole::System, "from the system role"),
            ],
        ));
        let messages = transcript.messages();
        assert_eq!(messages.len(), 4);
        assert!(matches!(&messages[1], ChatMessage::ToolResult { tool_call_id, tool, content, is_error: false }
            if tool_call_id == "c1" && tool == "probe" && content == "result"));
        assert_eq!(texts(&messages[2]), ["from the user role"]);
        assert_eq!(texts(&messages[3]), [SYSTEM_MESSAGE_MARKER, "from the system role"]);
    }

    #[test]
    fn a_replayed_termination_replaces_the_unit_instead_of_adding_its_messages_twice() {
        let mut transcript = Transcript::default();
        transcript.apply(&turn_with_call(2, "c1"));
        transcript.apply(&terminated(
            3,
            "c1",
            "first",
            vec![message(MessageRole::User, "a"), message(MessageRole::User, "b")],
        ));
        transcript.apply(&turn_with_call(4, "c2"));
        transcript.apply(&terminated(5, "c2", "other", vec![]));
        // The same call terminates again, now with one message: its unit shrinks in place.
        transcript.apply(&terminated(6, "c1", "second", vec![message(MessageRole::User, "c")]));
        let shape: Vec<String> = transcript
            .messages()
            .iter()
            .map(|message| match message {
                ChatMessage::ToolResult { content, .. } => format!("result {content}"),
                ChatMessage::Assistant { tool_calls, .. } => format!("call {}", tool_calls[0].tool_call_id),
                user => texts(user).join(" "),
            })
            .collect();
        assert_eq!(shape, ["call c1", "result second", "c", "call c2", "result other"]);
        // And a later replacement of c2 still finds its (moved) unit.
        transcript.apply(&terminated(7, "c2", "other again", vec![message(MessageRole::User, "d")]));
        assert_eq!(texts(transcript.messages().last().unwrap()), ["d"]);
    }

    #[test]
    fn a_skill_invocation_reaches_the_model_as_its_rendered_text() {
        use troupe_protocol::types::common::{ModelSelection, RunSelection};
        use troupe_protocol::types::skills::{SkillInvocation, SkillSource};
        let mut transcript = Transcript::default();
        transcript.apply(&event(
            2,
            EventPayload::RunStarted {
                client_run_id: "c".into(),
                selection: RunSelection {
                    agent: "default".into(),
                    model: ModelSelection { model: "local/echo".into(), variant: None },
                    preset: None,
                },
                input: "/review a.rs".into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: Some(SkillInvocation {
                    name: "review".into(),
                    arguments: "a.rs".into(),
                    source: SkillSource::Project,
                    rendered: "Review a.rs.".into(),
                }),
            },
        ));
        assert_eq!(texts(&transcript.messages()[0]), ["Review a.rs."]);
    }
}
