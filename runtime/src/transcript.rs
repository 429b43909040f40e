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

use std::borrow::Cow;
use std::collections::HashMap;

use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{MessagePart, MessageRole, PersistedToolResult, ToolResultStatus};

use crate::model::{ChatMessage, FileContent, ToolCallRequest, UserPart};

/// The first text part of a system-role tool-emitted message, materialized as a user turn.
pub const SYSTEM_MESSAGE_MARKER: &str = "[tool-emitted system message; materialized as user history]";

/// The result given to a call that never terminated.
pub const UNFINISHED_CALL_RESULT: &str = "the call did not finish: its run ended before it returned a result";

/// A terminated tool call in history form: its result and the messages it emitted.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolUnit {
    pub result: ChatMessage,
    pub emitted: Vec<ChatMessage>,
}

/// One entry of the history: a plain message, or a model turn with its tool calls' units.
#[derive(Clone, Debug)]
enum Entry {
    Message(ChatMessage),
    Turn(ToolTurn),
}

/// A committed model turn that asked for tools, and the units of the calls that terminated so far.
#[derive(Clone, Debug)]
struct ToolTurn {
    /// The assistant message; `None` for terminations whose turn is not in the log (kept, in log order).
    assistant: Option<ChatMessage>,
    /// Units by call id, in termination order.
    units: Vec<(String, ToolUnit)>,
}

impl ToolTurn {
    /// The turn's messages: the assistant turn, every result in call order, then every emitted message.
    fn flatten_into(&self, messages: &mut Vec<ChatMessage>) {
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
        messages.extend(units.iter().map(|unit| unit.result.clone()));
        for unit in &units {
            messages.extend(unit.emitted.iter().cloned());
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Transcript {
    entries: Vec<Entry>,
    /// The entry of each call's turn, by call id.
    turn_of_call: HashMap<String, usize>,
    /// Tool names by call id, from the committed turns that asked for them.
    tool_names: HashMap<String, String>,
}

impl Transcript {
    /// The history, oldest first, as it is sent to a model.
    pub fn messages(&self) -> Vec<ChatMessage> {
        let mut messages = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            match entry {
                Entry::Message(message) => messages.push(message.clone()),
                Entry::Turn(turn) => turn.flatten_into(&mut messages),
            }
        }
        messages
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        match &event.payload {
            EventPayload::RunStarted { input, skill, .. } => {
                // A skill invocation reaches the model as the skill's rendered text.
                let text = skill.as_ref().map_or(input, |skill| &skill.rendered);
                self.entries.push(Entry::Message(ChatMessage::User { parts: vec![UserPart::Text(text.clone())] }));
            }
            EventPayload::UserInputSubmitted { input, .. } => {
                self.entries.push(Entry::Message(ChatMessage::User { parts: vec![UserPart::Text(input.clone())] }));
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
                    self.entries.push(Entry::Message(assistant));
                    return;
                }
                let index = self.entries.len();
                for call in tool_calls {
                    self.tool_names.insert(call.tool_call_id.clone(), call.tool.clone());
                    self.turn_of_call.insert(call.tool_call_id.clone(), index);
                }
                self.entries.push(Entry::Turn(ToolTurn { assistant: Some(assistant), units: Vec::new() }));
            }
            EventPayload::ToolCallTerminated { tool_call_id, result } => {
                self.terminate(event.seq, tool_call_id, result)
            }
            _ => {}
        }
    }

    fn terminate(&mut self, seq: u64, tool_call_id: &str, result: &PersistedToolResult) {
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
                self.entries.push(Entry::Turn(ToolTurn { assistant: None, units: Vec::new() }));
                self.entries.len() - 1
            }
        };
        let Some(Entry::Turn(turn)) = self.entries.get_mut(index) else { return };
        match turn.units.iter_mut().find(|(id, _)| id == tool_call_id) {
            Some((_, existing)) => *existing = unit,
            None => turn.units.push((tool_call_id.to_owned(), unit)),
        }
    }
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
        turn_with_calls(seq, &[id])
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

    fn turn_with_calls(seq: u64, ids: &[&str]) -> StoredEvent {
        event(
            seq,
            EventPayload::ModelTurnCommitted {
                attempt_id: "a".into(),
                model: "local/scripted".into(),
                fallback_index: 0,
                text: String::new(),
                reasoning: None,
                tool_calls: ids
                    .iter()
                    .map(|id| ToolCallRecord {
                        tool_call_id: (*id).into(),
                        tool: "probe".into(),
                        arguments: serde_json::json!({}),
                    })
                    .collect(),
            },
        )
    }

    fn shape(transcript: &Transcript) -> Vec<String> {
        transcript
            .messages()
            .iter()
            .map(|message| match message {
                ChatMessage::ToolResult { tool_call_id, .. } => format!("result {tool_call_id}"),
                ChatMessage::Assistant { tool_calls, .. } => format!("calls {}", tool_calls.len()),
                user => texts(user).join(" "),
            })
            .collect()
    }

    #[test]
    fn all_results_of_a_turn_come_before_the_messages_its_tools_emitted() {
        let mut transcript = Transcript::default();
        transcript.apply(&turn_with_calls(2, &["c1", "c2", "c3"]));
        transcript.apply(&terminated(
            3,
            "c1",
            "r1",
            vec![message(MessageRole::User, "m1a"), message(MessageRole::User, "m1b")],
        ));
        transcript.apply(&terminated(4, "c2", "r2", vec![]));
        transcript.apply(&terminated(5, "c3", "r3", vec![message(MessageRole::System, "m3")]));
        transcript.apply(&event(6, EventPayload::UserInputSubmitted { input_id: "i".into(), input: "steer".into() }));
        assert_eq!(
            shape(&transcript),
            [
                "calls 3",
                "result c1",
                "result c2",
                "result c3",
                "m1a",
                "m1b",
                &format!("{SYSTEM_MESSAGE_MARKER} m3"),
                "steer"
            ]
        );
        // A replayed termination of the first call still lands in place, its messages before the later call's.
        transcript.apply(&terminated(7, "c1", "r1 again", vec![message(MessageRole::User, "m1c")]));
        assert_eq!(
            shape(&transcript)[1..7],
            ["result c1", "result c2", "result c3", "m1c", &format!("{SYSTEM_MESSAGE_MARKER} m3"), "steer"]
        );
    }

    #[test]
    fn messages_out_of_bounds_are_left_out_with_a_note_and_the_result_is_kept() {
        let mut transcript = Transcript::default();
        transcript.apply(&turn_with_calls(2, &["c1", "c2"]));
        transcript.apply(&terminated(3, "c1", "too many", vec![message(MessageRole::User, "x"); 5]));
        let empty = ToolEmittedMessage { role: MessageRole::User, parts: Vec::new() };
        transcript.apply(&terminated(4, "c2", "an empty one", vec![message(MessageRole::User, "y"), empty]));
        let messages = transcript.messages();
        assert_eq!(messages.len(), 3, "{messages:?}");
        let contents: Vec<&str> = messages[1..]
            .iter()
            .map(|message| match message {
                ChatMessage::ToolResult { content, .. } => content.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(contents[0].starts_with("too many") && contents[0].contains("at most 4"), "{}", contents[0]);
        assert!(contents[1].contains("no content parts"), "{}", contents[1]);
    }

    #[test]
    fn a_call_that_never_terminated_gets_an_error_result_so_the_turn_stays_answerable() {
        let mut transcript = Transcript::default();
        transcript.apply(&turn_with_calls(2, &["c1", "c2"]));
        transcript.apply(&terminated(3, "c1", "r1", vec![message(MessageRole::User, "m1")]));
        transcript.apply(&event(4, EventPayload::RunCancelled { reason: None }));
        let messages = transcript.messages();
        assert_eq!(shape(&transcript), ["calls 2", "result c1", "result c2", "m1"]);
        assert!(matches!(&messages[2], ChatMessage::ToolResult { content, is_error: true, .. }
            if content == UNFINISHED_CALL_RESULT));
    }

    #[test]
    fn file_parts_become_attachments_to_load() {
        let mut transcript = Transcript::default();
        transcript.apply(&turn_with_call(2, "c1"));
        let file = MessagePart::File { path: "artifacts/a.png".into(), mime_type: "image/png".into(), name: None };
        transcript.apply(&terminated(
            3,
            "c1",
            "r",
            vec![ToolEmittedMessage { role: MessageRole::User, parts: vec![file] }],
        ));
        assert!(matches!(&transcript.messages()[2], ChatMessage::User { parts }
            if matches!(&parts[0], UserPart::File { path, content: FileContent::NotLoaded, .. }
                if path == "artifacts/a.png")));
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
