//! The artifacts a session's log names: the files its inputs attached (`run_started`, `user_input_admitted`,
//! `user_input_submitted`, `user_input_recalled`) and the file parts of its tool results' messages
//! (`tool_call_terminated`), as `artifacts/<name>` paths.
//!
//! The set is part of the session's projection ([`crate::session_state::SessionState::artifacts`]), kept over the
//! whole log: the log is append-only, so a revert hides events from the model's history but leaves them in the
//! log, and a compaction's checkpoint replaces messages in the history, never lines of the log. Either way the
//! files stay named, and readable through `session.attachment`, for as long as the session exists. A fork's log
//! starts with a copy of its source's prefix, so the fork names what that prefix names.
//!
//! It answers two questions: whether a session may read a file back (`session.attachment` answers only paths the
//! session names), and which files no session names any more ([`crate::artifact_collection`]). A path that is not a
//! well-formed artifact path ([`artifact_name`]) is never kept: nothing could be read or collected through it.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::{MessagePart, artifact_name};

/// The artifact paths a log names, in order. Only grows as events are applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NamedArtifacts(BTreeSet<String>);

impl NamedArtifacts {
    /// Adds what `event` names; whether anything was new.
    pub fn apply(&mut self, event: &StoredEvent) -> bool {
        let mut added = false;
        for_each_named(&event.payload, |path| {
            if artifact_name(path).is_ok() && !self.0.contains(path) {
                self.0.insert(path.to_owned());
                added = true;
            }
        });
        added
    }

    /// Whether the log names `path` (`artifacts/<name>`).
    pub fn contains(&self, path: &str) -> bool {
        self.0.contains(path)
    }

    /// How many paths are named.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The file names (`<name>` of `artifacts/<name>`) named, in order.
    pub fn file_names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|path| artifact_name(path).ok())
    }
}

/// Calls `visit` with every artifact path the event names, well-formed or not.
fn for_each_named(payload: &EventPayload, mut visit: impl FnMut(&str)) {
    match payload {
        EventPayload::RunStarted { attachments, .. }
        | EventPayload::UserInputAdmitted { attachments, .. }
        | EventPayload::UserInputSubmitted { attachments, .. }
        | EventPayload::UserInputRecalled { attachments, .. } => {
            attachments.iter().for_each(|file| visit(&file.path));
        }
        EventPayload::ToolCallTerminated { result, .. } => {
            for message in &result.additional_messages {
                for part in &message.parts {
                    if let MessagePart::File { path, .. } = part {
                        visit(path);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::attachment::AttachedFile;
    use troupe_protocol::types::run::{MessageRole, PersistedToolResult, ToolEmittedMessage, ToolResultStatus};

    use super::*;

    fn event(payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: Some("r".into()),
            seq: 2,
            timestamp: "2026-01-01T00:00:00Z".into(),
            origin: None,
            payload,
        }
    }

    fn file(path: &str) -> AttachedFile {
        AttachedFile { path: path.into(), mime_type: "image/png".into(), name: "a.png".into(), size: 3 }
    }

    #[test]
    fn inputs_and_tool_results_name_artifacts_and_nothing_else_does() {
        let mut named = NamedArtifacts::default();
        let steered = EventPayload::UserInputAdmitted {
            input_id: "i".into(),
            input: "look".into(),
            attachments: vec![file("artifacts/b.png"), file("artifacts/../config.toml"), file("/etc/passwd")],
        };
        assert!(named.apply(&event(steered)));
        let parts = vec![
            MessagePart::Text { text: "artifacts/text.png".into() },
            MessagePart::File { path: "artifacts/chart.png".into(), mime_type: "image/png".into(), name: None },
        ];
        let result = PersistedToolResult {
            status: ToolResultStatus::Ok,
            output: "artifacts/output.png".into(),
            display: None,
            output_ref: None,
            additional_messages: vec![ToolEmittedMessage { role: MessageRole::User, parts }],
        };
        assert!(named.apply(&event(EventPayload::ToolCallTerminated { tool_call_id: "t".into(), result })));
        assert!(!named.apply(&event(EventPayload::RunCompleted { final_text: Some("artifacts/c.png".into()) })));
        // Named again: nothing new.
        let again = EventPayload::UserInputSubmitted {
            input_id: "i".into(),
            input: "look".into(),
            attachments: vec![file("artifacts/b.png")],
        };
        assert!(!named.apply(&event(again)));
        assert_eq!(named.file_names().collect::<Vec<_>>(), ["b.png", "chart.png"]);
        assert!(named.contains("artifacts/chart.png") && !named.contains("artifacts/text.png"));
        assert!(!named.contains("artifacts/../config.toml"));
        assert_eq!(named.len(), 2);
    }

    #[test]
    fn the_set_round_trips_as_a_list_of_paths() {
        let mut named = NamedArtifacts::default();
        named.0.insert("artifacts/a.png".into());
        let json = serde_json::to_value(&named).unwrap();
        assert_eq!(json, serde_json::json!(["artifacts/a.png"]));
        assert_eq!(serde_json::from_value::<NamedArtifacts>(json).unwrap(), named);
    }
}
