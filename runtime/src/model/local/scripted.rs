//! A model that plays turns from a JSON script.
//!
//! The script is an object with a `turns` array. Each turn is what the model answers once:
//!
//! ```json
//! {"turns": [
//!   {"reasoning": "I should look first.",
//!    "text": "Let me list the files.",
//!    "tool_calls": [{"tool": "shell", "arguments": {"command": "ls"}}]},
//!   {"error": {"kind": "rate_limited", "http_status": 429, "message": "slow down", "retry_after_ms": 100}},
//!   {"text": "All done.", "delay_ms": 50}
//! ]}
//! ```
//!
//! Turn fields, all optional: `text` (streamed a word at a time), `reasoning`, `tool_calls` (each a `tool` and
//! its `arguments`, `{}` when absent), `delay_ms` (a wait before the first event, for cancellation and timeout
//! tests), and `error`, which makes the turn fail. An error has a `kind` (a `ModelErrorKind` wire name such as
//! `rate_limited`, `overload`, `auth`, `context_length`) and optionally `message`, `http_status`, `retryable`
//! (else the kind's usual value), `retry_after_ms`, `vendor_code` and `stage` (`connect`, `request` or
//! `stream`; default `request`). A `stream`-stage error fails after the turn's text and reasoning were
//! streamed, the way a vendor fails halfway through an answer; the other stages fail the request outright.
//!
//! Which turn plays is decided by the request alone: turn *n* answers a history holding *n* assistant
//! messages. A retried or replayed request therefore gets the same turn again (so an `error` turn fails every
//! attempt, which exercises fallback), and a restarted daemon picks up where the history is. A request past the
//! last turn fails with a non-retryable `invalid_request` error that names the turn, the number of turns and the
//! file, rather than answering nothing. Tool call ids are `call-<turn>-<position>`, stable across replays.
//!
//! The file is read again whenever it changed (its modification time, size or inode) since the last request, so
//! an edited script takes effect at the next turn without reconnecting. A file that cannot be read or parsed
//! then fails the turn with the reason; the connection keeps its provider.
//!
//! Several conversations can share one script (a parent session and the child sessions it delegates to): an
//! optional `by_input` object maps the text of a conversation's *first* user message to the turns that
//! conversation plays instead of the top-level `turns`. A request whose first user message is not a key (or has
//! none) plays `turns`.
//!
//! ```json
//! {"turns": [{"tool_calls": [{"tool": "delegate", "arguments": {"agent": "helper", "task": "count the files"}}]},
//!            {"text": "The helper answered."}],
//!  "by_input": {"count the files": {"turns": [{"text": "There are 3 files."}]}}}
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;

use super::{request_bytes, rough_token_count, whitespace_chunks};
use crate::model::{
    ChatMessage, ErrorStage, ModelError, ModelErrorKind, ModelProvider, ModelRequest, ModelStream, StreamEvent,
    TokenUsage, ToolCallRequest, json_text_len,
};

/// A parsed script.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub turns: Vec<ScriptedTurn>,
    /// Conversations by the text of their first user message; see the module docs.
    #[serde(default)]
    pub by_input: std::collections::BTreeMap<String, ScriptedConversation>,
}

/// The turns of one conversation selected by its first user message.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedConversation {
    pub turns: Vec<ScriptedTurn>,
}

/// One answer of the model.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedToolCall>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    #[serde(default)]
    pub error: Option<ScriptedError>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    pub tool: String,
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// A failure to play instead of (or, at the `stream` stage, after) the turn's answer.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    pub kind: ModelErrorKind,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub http_status: Option<u16>,
    #[serde(default)]
    pub retryable: Option<bool>,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    #[serde(default)]
    pub vendor_code: Option<String>,
    #[serde(default)]
    pub stage: Option<ErrorStage>,
}

impl ScriptedError {
    fn to_model_error(&self) -> ModelError {
        let message = self.message.clone().unwrap_or_else(|| format!("scripted {} failure", self.kind));
        let mut error = ModelError::new(self.kind, self.stage.unwrap_or(ErrorStage::Request), message);
        if let Some(retryable) = self.retryable {
            error.retryable = retryable;
        }
        error.http_status = self.http_status;
        error.retry_after_ms = self.retry_after_ms;
        error.vendor_code = self.vendor_code.clone();
        error
    }
}

/// Why a script could not be loaded. Messages carry the path and the reason, never the script's content.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read the model script {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the model script {path} is not a valid script: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
}

/// Plays a [`Script`]; see the module docs. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ScriptedModel {
    source: ScriptSource,
}

/// Where the script comes from: given once, or a file read again when it changes.
#[derive(Clone, Debug)]
enum ScriptSource {
    Fixed(Arc<Script>),
    File { path: PathBuf, loaded: Arc<Mutex<LoadedScript>> },
}

/// The script last read from a file and what identified the file's version then.
#[derive(Debug)]
struct LoadedScript {
    stamp: FileStamp,
    script: Arc<Script>,
}

/// A file's version as far as metadata tells: modification time, size and inode.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

impl FileStamp {
    fn of(metadata: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp { modified: metadata.modified().ok(), len: metadata.len(), inode: metadata.ino() }
    }
}

impl ScriptedModel {
    pub fn new(script: Script) -> ScriptedModel {
        ScriptedModel { source: ScriptSource::Fixed(Arc::new(script)) }
    }

    /// The turns that answer `request` in `script`: those of `by_input` for its first user message, else the
    /// top-level ones.
    fn turns_for<'a>(script: &'a Script, request: &ModelRequest) -> &'a [ScriptedTurn] {
        let first_input = request.messages.iter().find_map(|message| match message {
            ChatMessage::User { parts } => Some(parts),
            _ => None,
        });
        let text = first_input.and_then(|parts| {
            parts.iter().find_map(|part| match part {
                crate::model::UserPart::Text(text) => Some(text.as_str()),
                _ => None,
            })
        });
        match text.and_then(|text| script.by_input.get(text)) {
            Some(conversation) => &conversation.turns,
            None => &script.turns,
        }
    }

    /// Reads and parses a script file. Blocking: call it off the async runtime's hot path.
    /// The model keeps the path and reads the file again when it changes (see the module docs).
    pub fn from_file(path: &Path) -> Result<ScriptedModel, ScriptError> {
        let loaded = read_script(path)?;
        Ok(ScriptedModel { source: ScriptSource::File { path: path.to_owned(), loaded: Arc::new(Mutex::new(loaded)) } })
    }

    /// The file's current script, read again if the file changed since `loaded` was read. Blocking.
    fn current_script(path: &Path, loaded: &Mutex<LoadedScript>) -> Result<Arc<Script>, ScriptError> {
        let metadata = std::fs::metadata(path).map_err(|source| ScriptError::Read { path: path.to_owned(), source })?;
        let mut loaded = loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if loaded.stamp != FileStamp::of(&metadata) {
            *loaded = read_script(path)?;
        }
        Ok(loaded.script.clone())
    }

    /// The index of the turn that answers `request`: how many assistant messages it already holds.
    pub fn turn_index(request: &ModelRequest) -> usize {
        request.messages.iter().filter(|message| matches!(message, ChatMessage::Assistant { .. })).count()
    }
}

/// Reads and parses the script at `path`, with the stamp of the version read.
fn read_script(path: &Path) -> Result<LoadedScript, ScriptError> {
    let read_error = |source| ScriptError::Read { path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let stamp = FileStamp::of(&file.metadata().map_err(read_error)?);
    let script = serde_json::from_reader(std::io::BufReader::new(file))
        .map_err(|source| ScriptError::Parse { path: path.to_owned(), source })?;
    Ok(LoadedScript { stamp, script: Arc::new(script) })
}

/// The error of a request past the script's last turn: which turn, how many there are, where to add one.
fn ran_out(source: &ScriptSource, turn_index: usize, turns: usize) -> ModelError {
    let place = match source {
        ScriptSource::Fixed(_) => "the script".to_owned(),
        ScriptSource::File { path, .. } => path.display().to_string(),
    };
    let mut error = ModelError::new(
        ModelErrorKind::InvalidRequest,
        ErrorStage::Request,
        format!("the script has no reply for turn {} (it has {turns}); add one to {place}", turn_index + 1),
    );
    error.retryable = false;
    error
}

impl ModelProvider for ScriptedModel {
    fn stream(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        let source = self.source.clone();
        async move {
            let turn_index = ScriptedModel::turn_index(&request);
            let script = match &source {
                ScriptSource::Fixed(script) => script.clone(),
                ScriptSource::File { path, loaded } => {
                    let (path, loaded) = (path.clone(), loaded.clone());
                    tokio::task::spawn_blocking(move || ScriptedModel::current_script(&path, &loaded))
                        .await
                        .map_err(|error| {
                            ModelError::new(ModelErrorKind::Unknown, ErrorStage::Request, error.to_string())
                        })?
                        .map_err(|error| {
                            let mut error =
                                ModelError::new(ModelErrorKind::InvalidRequest, ErrorStage::Request, error.to_string());
                            error.retryable = false;
                            error
                        })?
                }
            };
            let turns = ScriptedModel::turns_for(&script, &request);
            let Some(turn) = turns.get(turn_index).cloned() else {
                return Err(ran_out(&source, turn_index, turns.len()));
            };
            let input_bytes = request_bytes(&request);
            if let Some(delay_ms) = turn.delay_ms {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            let stream_error = match &turn.error {
                Some(error) if error.stage == Some(ErrorStage::Stream) => Some(error.to_model_error()),
                Some(error) => return Err(error.to_model_error()),
                None => None,
            };
            let mut events: Vec<Result<StreamEvent, ModelError>> = Vec::new();
            if let Some(reasoning) = &turn.reasoning {
                events.push(Ok(StreamEvent::ReasoningDelta(reasoning.clone())));
            }
            events.extend(whitespace_chunks(&turn.text).into_iter().map(|chunk| Ok(StreamEvent::TextDelta(chunk))));
            if let Some(error) = stream_error {
                events.push(Err(error));
                return Ok(futures::stream::iter(events).boxed());
            }
            for (position, call) in turn.tool_calls.iter().enumerate() {
                events.push(Ok(StreamEvent::ToolCall(ToolCallRequest {
                    // Counted from 1, as the script's turns are (README: "Turn *n* (counting from 1)").
                    tool_call_id: format!("call-{}-{}", turn_index + 1, position + 1),
                    tool: call.tool.clone(),
                    arguments: call.arguments.clone(),
                })));
            }
            let output_bytes = turn.text.len()
                + turn.reasoning.as_deref().map_or(0, str::len)
                + turn.tool_calls.iter().map(|call| call.tool.len() + json_text_len(&call.arguments)).sum::<usize>();
            events.push(Ok(StreamEvent::Usage(TokenUsage {
                input_tokens: rough_token_count(input_bytes),
                output_tokens: rough_token_count(output_bytes),
                reasoning_tokens: rough_token_count(turn.reasoning.as_deref().map_or(0, str::len)),
                ..TokenUsage::default()
            })));
            let stop_reason = if turn.tool_calls.is_empty() { "stop" } else { "tool_calls" };
            events.push(Ok(StreamEvent::Finished { stop_reason: Some(stop_reason.to_owned()) }));
            Ok(futures::stream::iter(events).boxed())
        }
        .boxed()
    }
}
