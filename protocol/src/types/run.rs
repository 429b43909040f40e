//! Runs: `run.start`, `run.steer`, `run.recall_steer`, `run.cancel`, `run.tool_stdin`, and the persisted result
//! of a tool call that `tool_call_terminated` events carry.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::attachment::InputAttachment;
use crate::types::common::RunSelection;

/// `run.start` params. Idempotent by `client_run_id`: the same key with the same content returns the same
/// `run_id`; different content under it is `idempotency_conflict`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStartParams {
    pub session_id: String,
    /// Idempotency key: 1..=256 bytes, no control characters.
    pub client_run_id: String,
    pub selection: RunSelection,
    /// The user's message.
    pub input: String,
    /// True for an explicit model reset: start at the selected model instead of trimming the fallback chain to
    /// the session's latest successful fallback.
    #[serde(default)]
    pub reset_fallback: bool,
    /// troupe extension: images and PDFs attached to the input (at most 8, 10 MiB together). Part of the
    /// idempotent content: the same key with other attachments is `idempotency_conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<InputAttachment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunStartResult {
    pub run_id: String,
}

/// `run.steer` params: input for the active run, promoted at its next tool-batch or completion boundary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSteerParams {
    pub run_id: String,
    pub input: String,
    /// troupe extension: images and PDFs attached to the input, as `run.start`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<InputAttachment>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunSteerResult {
    /// True once the input is admitted (`user_input_admitted` is durable).
    pub accepted: bool,
}

/// Params of the methods that name only a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunIdParams {
    pub run_id: String,
}

/// `run.recall_steer` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunRecallSteerResult {
    /// The newest pending input, now removed; null when nothing was pending. Always present.
    pub recalled: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunCancelResult {
    /// False when the run had already ended.
    pub cancelled: bool,
}

/// `run.tool_stdin` params: write to, or close, the stdin of a running tool call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunToolStdinParams {
    pub run_id: String,
    pub tool_call_id: String,
    /// UTF-8 text written to the tool's stdin as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Close stdin after writing `data`.
    pub eof: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunToolStdinResult {
    pub accepted: bool,
}

/// The most messages a tool result may emit.
pub const MAX_ADDITIONAL_MESSAGES: usize = 4;
/// The most content parts of one emitted message.
pub const MAX_MESSAGE_PARTS: usize = 16;
/// The most bytes of one text part of an emitted message.
pub const MAX_MESSAGE_TEXT_BYTES: usize = 32 * 1024;
/// The most bytes of text of all the messages of one result together: they enter every later request of the
/// session, like the result itself.
pub const MAX_MESSAGES_TEXT_BYTES: usize = 64 * 1024;
/// The most file parts (attachments) of one emitted message.
pub const MAX_MESSAGE_FILES: usize = 4;
/// The most file parts of all the messages of one result together: each may be up to 10 MiB, sent base64-encoded
/// with every later request of the run.
pub const MAX_RESULT_FILES: usize = 8;
/// The longest `mime_type` or `name` of a file part, in bytes.
pub const MAX_FILE_LABEL_BYTES: usize = 255;
/// The directory of stored artifacts under the data directory: a file part's `path` is `artifacts/<name>`.
pub const ARTIFACTS_DIR: &str = "artifacts";

/// Why a result's `additional_messages` are refused: the reference's bounds on messages, parts, text and
/// attachments, and the form of every referenced artifact. Messages name positions, never echo content.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EmittedMessagesError {
    #[error("a tool result may emit at most {MAX_ADDITIONAL_MESSAGES} additional messages, not {0}")]
    TooManyMessages(usize),
    #[error("additional message {message} has no content parts; each needs at least one")]
    NoParts { message: usize },
    #[error("additional message {message} has {parts} content parts; at most {MAX_MESSAGE_PARTS} are allowed")]
    TooManyParts { message: usize, parts: usize },
    #[error(
        "text part {part} of additional message {message} is {bytes} bytes; at most {MAX_MESSAGE_TEXT_BYTES} are \
         allowed"
    )]
    TextTooLong { message: usize, part: usize, bytes: usize },
    #[error(
        "the additional messages carry {bytes} bytes of text; at most {MAX_MESSAGES_TEXT_BYTES} are allowed in all"
    )]
    TooMuchText { bytes: usize },
    #[error("additional message {message} attaches {files} files; at most {MAX_MESSAGE_FILES} are allowed per message")]
    TooManyFilesInMessage { message: usize, files: usize },
    #[error("the additional messages attach {files} files; at most {MAX_RESULT_FILES} are allowed per result")]
    TooManyFiles { files: usize },
    #[error("file part {part} of additional message {message}: {reason}")]
    BadFile { message: usize, part: usize, reason: FileReferenceError },
}

/// Why a file part does not name an attachable artifact.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FileReferenceError {
    #[error("only stored artifacts ({ARTIFACTS_DIR}/<name>) can be attached")]
    NotAnArtifact,
    #[error("the artifact name must be 1 to 255 letters, digits, `.`, `_` or `-`, not starting with `.`")]
    BadArtifactName,
    #[error("the mime_type must be a type/subtype of at most {MAX_FILE_LABEL_BYTES} visible ASCII characters")]
    BadMimeType,
    #[error("the name must be at most {MAX_FILE_LABEL_BYTES} bytes without control or format characters")]
    BadName,
    /// The artifact the part names is not a stored file (checked where the data directory is known).
    #[error("the artifact is not a stored regular file of at most {max_bytes} bytes")]
    Unavailable { max_bytes: u64 },
}

/// The artifact name of a file part's `path` (`artifacts/<name>`): a plain file name, so that a part can never
/// name a file outside the artifacts directory (no `/`, no `..`, no hidden file).
pub fn artifact_name(path: &str) -> Result<&str, FileReferenceError> {
    let name = path
        .strip_prefix(ARTIFACTS_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .ok_or(FileReferenceError::NotAnArtifact)?;
    let valid = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid { Ok(name) } else { Err(FileReferenceError::BadArtifactName) }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolResultStatus {
    Ok,
    /// The tool ran and failed.
    Error,
    /// The permission policy or the user refused the call.
    Denied,
    /// The run or the call was cancelled.
    Cancelled,
}

/// The terminal result of a tool call, as recorded in `tool_call_terminated`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PersistedToolResult {
    pub status: ToolResultStatus,
    /// What the model receives.
    pub output: String,
    /// What a UI shows instead of `output`, when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// A reference to the full output stored as an artifact, when `output` was shortened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    /// Messages the tool adds to the history after its result, in order; at most 4. Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_messages: Vec<ToolEmittedMessage>,
}

impl PersistedToolResult {
    /// Checks `additional_messages` against the reference's bounds: at most [`MAX_ADDITIONAL_MESSAGES`], each with
    /// 1 to [`MAX_MESSAGE_PARTS`] parts; text within [`MAX_MESSAGE_TEXT_BYTES`] a part and
    /// [`MAX_MESSAGES_TEXT_BYTES`] in all; at most [`MAX_MESSAGE_FILES`] files a message and [`MAX_RESULT_FILES`] in
    /// all; every file part naming an artifact ([`artifact_name`]) with a plain MIME type and name. Whether the
    /// artifact exists is checked where the data directory is known.
    pub fn validate(&self) -> Result<(), EmittedMessagesError> {
        let messages = &self.additional_messages;
        if messages.len() > MAX_ADDITIONAL_MESSAGES {
            return Err(EmittedMessagesError::TooManyMessages(messages.len()));
        }
        let (mut text_bytes, mut files) = (0, 0);
        for (message, emitted) in messages.iter().enumerate() {
            match emitted.parts.len() {
                0 => return Err(EmittedMessagesError::NoParts { message }),
                parts if parts > MAX_MESSAGE_PARTS => {
                    return Err(EmittedMessagesError::TooManyParts { message, parts });
                }
                _ => {}
            }
            let mut files_here = 0;
            for (part, content) in emitted.parts.iter().enumerate() {
                match content {
                    MessagePart::Text { text } => {
                        if text.len() > MAX_MESSAGE_TEXT_BYTES {
                            return Err(EmittedMessagesError::TextTooLong { message, part, bytes: text.len() });
                        }
                        text_bytes += text.len();
                    }
                    MessagePart::File { .. } => {
                        content.check_file_reference().map_err(|reason| EmittedMessagesError::BadFile {
                            message,
                            part,
                            reason,
                        })?;
                        files_here += 1;
                    }
                }
            }
            if files_here > MAX_MESSAGE_FILES {
                return Err(EmittedMessagesError::TooManyFilesInMessage { message, files: files_here });
            }
            files += files_here;
        }
        if text_bytes > MAX_MESSAGES_TEXT_BYTES {
            return Err(EmittedMessagesError::TooMuchText { bytes: text_bytes });
        }
        if files > MAX_RESULT_FILES {
            return Err(EmittedMessagesError::TooManyFiles { files });
        }
        Ok(())
    }

    /// Every file part of `additional_messages`, with its message's and its own position.
    pub fn file_parts(&self) -> impl Iterator<Item = (usize, usize, &str)> {
        self.additional_messages.iter().enumerate().flat_map(|(message, emitted)| {
            emitted.parts.iter().enumerate().filter_map(move |(part, content)| match content {
                MessagePart::File { path, .. } => Some((message, part, path.as_str())),
                MessagePart::Text { .. } => None,
            })
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// Materialized as a user turn that opens with a marker, so the system prefix stays stable.
    System,
    User,
}

/// A message a tool result adds to the model history, after the result itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolEmittedMessage {
    pub role: MessageRole,
    /// One or more parts, in order.
    pub parts: Vec<MessagePart>,
}

/// One content part of a tool-emitted message, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessagePart {
    Text {
        text: String,
    },
    /// An attachment: a stored artifact.
    File {
        /// The artifact's path.
        path: String,
        mime_type: String,
        /// The name to show, when it differs from the path's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
}

impl MessagePart {
    /// For a file part: whether it names an artifact, with a MIME type and name a client can show safely.
    fn check_file_reference(&self) -> Result<(), FileReferenceError> {
        let MessagePart::File { path, mime_type, name } = self else { return Ok(()) };
        artifact_name(path)?;
        let mime_ok = mime_type.len() <= MAX_FILE_LABEL_BYTES
            && mime_type.bytes().all(|byte| byte.is_ascii_graphic() || byte == b' ')
            && mime_type.split(';').next().is_some_and(|essence| {
                essence.trim().split_once('/').is_some_and(|(kind, sub)| !kind.is_empty() && !sub.is_empty())
            });
        if !mime_ok {
            return Err(FileReferenceError::BadMimeType);
        }
        if let Some(name) = name
            && (name.len() > MAX_FILE_LABEL_BYTES
                || name.chars().any(|c| c.is_control() || crate::diagnostic::is_format_control(c)))
        {
            return Err(FileReferenceError::BadName);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(messages: Vec<ToolEmittedMessage>) -> PersistedToolResult {
        PersistedToolResult {
            status: ToolResultStatus::Ok,
            output: "done".into(),
            display: None,
            output_ref: None,
            additional_messages: messages,
        }
    }

    fn text_message() -> ToolEmittedMessage {
        ToolEmittedMessage { role: MessageRole::User, parts: vec![MessagePart::Text { text: "hi".into() }] }
    }

    #[test]
    fn empty_additional_messages_and_absent_options_are_omitted() {
        let value = serde_json::to_value(result(Vec::new())).unwrap();
        assert_eq!(value, json!({"status": "ok", "output": "done"}));
        assert_eq!(serde_json::from_value::<PersistedToolResult>(value).unwrap(), result(Vec::new()));
    }

    #[test]
    fn message_parts_are_tagged_by_type() {
        let message = ToolEmittedMessage {
            role: MessageRole::System,
            parts: vec![
                MessagePart::Text { text: "see".into() },
                MessagePart::File { path: "artifacts/ab12".into(), mime_type: "image/png".into(), name: None },
            ],
        };
        let value = serde_json::to_value(result(vec![message])).unwrap();
        assert_eq!(
            value["additional_messages"],
            json!([{"role": "system", "parts": [
                {"type": "text", "text": "see"},
                {"type": "file", "path": "artifacts/ab12", "mime_type": "image/png"}
            ]}])
        );
    }

    #[test]
    fn validate_bounds_messages_and_parts() {
        assert!(result(vec![text_message(); MAX_ADDITIONAL_MESSAGES]).validate().is_ok());
        assert!(result(vec![text_message(); MAX_ADDITIONAL_MESSAGES + 1]).validate().is_err());
        let empty = ToolEmittedMessage { role: MessageRole::User, parts: Vec::new() };
        assert!(result(vec![text_message(), empty]).validate().is_err());
    }

    fn file(path: &str) -> MessagePart {
        MessagePart::File { path: path.into(), mime_type: "image/png".into(), name: None }
    }

    fn user(parts: Vec<MessagePart>) -> ToolEmittedMessage {
        ToolEmittedMessage { role: MessageRole::User, parts }
    }

    fn text(bytes: usize) -> MessagePart {
        MessagePart::Text { text: "x".repeat(bytes) }
    }

    #[test]
    fn validate_bounds_each_text_part_and_the_text_of_all_messages() {
        assert!(result(vec![user(vec![text(MAX_MESSAGE_TEXT_BYTES)])]).validate().is_ok());
        assert_eq!(
            result(vec![user(vec![text(1), text(MAX_MESSAGE_TEXT_BYTES + 1)])]).validate(),
            Err(EmittedMessagesError::TextTooLong { message: 0, part: 1, bytes: MAX_MESSAGE_TEXT_BYTES + 1 })
        );
        // Two full parts fit the total; a third byte more does not.
        let full = || user(vec![text(MAX_MESSAGE_TEXT_BYTES)]);
        assert!(result(vec![full(), full()]).validate().is_ok());
        assert_eq!(
            result(vec![full(), full(), user(vec![text(1)])]).validate(),
            Err(EmittedMessagesError::TooMuchText { bytes: MAX_MESSAGES_TEXT_BYTES + 1 })
        );
        let many = user((0..=MAX_MESSAGE_PARTS).map(|_| text(1)).collect());
        assert_eq!(
            result(vec![many]).validate(),
            Err(EmittedMessagesError::TooManyParts { message: 0, parts: MAX_MESSAGE_PARTS + 1 })
        );
    }

    #[test]
    fn validate_bounds_attachments_per_message_and_per_result() {
        let files = |count: usize| user((0..count).map(|index| file(&format!("artifacts/f{index}.png"))).collect());
        assert!(result(vec![files(MAX_MESSAGE_FILES), files(MAX_MESSAGE_FILES)]).validate().is_ok());
        assert_eq!(
            result(vec![files(MAX_MESSAGE_FILES + 1)]).validate(),
            Err(EmittedMessagesError::TooManyFilesInMessage { message: 0, files: MAX_MESSAGE_FILES + 1 })
        );
        assert_eq!(
            result(vec![files(MAX_MESSAGE_FILES), files(MAX_MESSAGE_FILES), files(1)]).validate(),
            Err(EmittedMessagesError::TooManyFiles { files: MAX_RESULT_FILES + 1 })
        );
    }

    #[test]
    fn validate_refuses_file_parts_that_name_no_artifact_or_carry_unsafe_labels() {
        for (path, reason) in [
            ("/etc/passwd", FileReferenceError::NotAnArtifact),
            ("artifacts/../providers.json", FileReferenceError::BadArtifactName),
            ("artifacts/a/b", FileReferenceError::BadArtifactName),
            ("artifacts/.hidden", FileReferenceError::BadArtifactName),
            ("artifacts/", FileReferenceError::BadArtifactName),
        ] {
            assert_eq!(
                result(vec![user(vec![text(1), file(path)])]).validate(),
                Err(EmittedMessagesError::BadFile { message: 0, part: 1, reason }),
                "{path}"
            );
        }
        let labelled = |mime_type: &str, name: Option<&str>| {
            let part = MessagePart::File {
                path: "artifacts/a.png".into(),
                mime_type: mime_type.into(),
                name: name.map(str::to_owned),
            };
            result(vec![user(vec![part])]).validate().map_err(|error| error.to_string())
        };
        assert_eq!(labelled("text/plain; charset=utf-8", Some("notes.txt")), Ok(()));
        for bad_mime in ["", "png", "image/png\n", "image/\u{1b}[31m", &format!("image/{}", "x".repeat(250))] {
            assert!(labelled(bad_mime, None).is_err_and(|error| error.contains("mime_type")), "{bad_mime:?}");
        }
        for bad_name in ["evil\u{202e}gnp.exe", "two\nlines", &"n".repeat(256)] {
            assert!(
                labelled("image/png", Some(bad_name)).is_err_and(|error| error.contains("the name")),
                "{bad_name:?}"
            );
        }
    }

    #[test]
    fn start_params_default_reset_fallback_and_reject_unknown_fields() {
        let params = json!({
            "session_id": "s", "client_run_id": "r-1", "input": "hello",
            "selection": {"agent": "default", "model": {"model": "local/echo", "variant": null}}
        });
        let decoded: RunStartParams = serde_json::from_value(params.clone()).unwrap();
        assert!(!decoded.reset_fallback);
        let mut extra = params;
        extra["priority"] = json!(1);
        assert!(serde_json::from_value::<RunStartParams>(extra).is_err());
    }
}
