//! The TUI's state and how the session's events change it (the "reduction"): no I/O here, so rendering and the
//! reduction are tested without a daemon.

use troupe_protocol::types::approval::ApprovalRecord;
use troupe_protocol::types::common::{RunSelection, SessionMeta, SessionStatus};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;
use troupe_protocol::types::tool_output::OutputStream;

use crate::style::clean;

/// Which screen is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    Picker,
    Session,
}

/// What the input line is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputMode {
    /// A prompt: starts a run when idle, steers the active one.
    Prompt,
    /// A line for the running command's stdin.
    Stdin,
    /// The feedback of a rejection.
    Feedback,
}

/// One line of the session picker: a root session or (indented) one of its delegated children.
#[derive(Clone, Debug, PartialEq)]
pub struct PickerRow {
    pub session_id: String,
    pub title: Option<String>,
    pub status: SessionStatus,
    pub last_activity_at: String,
    /// 0 for a root session, 1 for its children, …
    pub depth: usize,
}

/// One block of the transcript.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    User(String),
    /// The model's text; streaming deltas append to the last one of its attempt.
    Assistant {
        attempt_id: String,
        text: String,
    },
    Tool {
        tool_call_id: String,
        tool: String,
        resource: String,
        output: String,
        /// Bytes received per stream (stdout, stderr): live deltas and durable progress overlap, and each byte is
        /// shown once.
        received: [u64; 2],
        result: Option<ToolEnd>,
    },
    /// An edit as a diff: removed and added lines.
    Diff {
        path: String,
        removed: Vec<String>,
        added: Vec<String>,
    },
    RunBoundary(String),
    Error(String),
}

/// How a tool call ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolEnd {
    pub ok: bool,
    pub text: String,
}

/// Everything on screen.
#[derive(Debug)]
pub struct App {
    pub screen: Screen,
    pub url: String,
    pub connected: bool,
    pub rows: Vec<PickerRow>,
    pub selected: usize,
    pub session: Option<SessionMeta>,
    pub entries: Vec<Entry>,
    /// The last event seq seen of the open session (the cursor a resubscribe would use).
    pub cursor: Option<u64>,
    pub active_run: Option<String>,
    /// The running tool calls of the active run, oldest first (stdin goes to the newest).
    pub running_tools: Vec<String>,
    pub approvals: Vec<ApprovalRecord>,
    pub mode: Option<PermissionMode>,
    pub last_selection: Option<RunSelection>,
    /// Chosen in the model picker; used for the next run.
    pub picked: Option<RunSelection>,
    pub choices: Vec<RunSelection>,
    pub choosing: Option<usize>,
    pub tokens: (u64, u64),
    pub input: String,
    pub input_mode: InputMode,
    /// Lines scrolled up from the bottom of the transcript.
    pub scroll: u16,
    pub notice: Option<String>,
    /// A first Ctrl-C with nothing to cancel arms quitting; a second one quits.
    pub quit_armed: bool,
    pub quit: bool,
}

impl App {
    pub fn new(url: String) -> Self {
        App {
            screen: Screen::Picker,
            url,
            connected: true,
            rows: Vec::new(),
            selected: 0,
            session: None,
            entries: Vec::new(),
            cursor: None,
            active_run: None,
            running_tools: Vec::new(),
            approvals: Vec::new(),
            mode: None,
            last_selection: None,
            picked: None,
            choices: Vec::new(),
            choosing: None,
            tokens: (0, 0),
            input: String::new(),
            input_mode: InputMode::Prompt,
            scroll: 0,
            notice: None,
            quit_armed: false,
            quit: false,
        }
    }

    /// Opens a session: the transcript starts empty and fills from the subscription's replay.
    pub fn open(&mut self, session: SessionMeta) {
        self.screen = Screen::Session;
        self.session = Some(session);
        self.entries.clear();
        self.cursor = None;
        self.active_run = None;
        self.running_tools.clear();
        self.approvals.clear();
        self.tokens = (0, 0);
        self.scroll = 0;
        self.last_selection = None;
    }

    pub fn session_id(&self) -> Option<&str> {
        self.session.as_ref().map(|session| session.session_id.as_str())
    }

    /// The approval the prompt shows: the oldest one pending in the tree.
    pub fn pending_approval(&self) -> Option<&ApprovalRecord> {
        self.approvals.first()
    }

    /// Applies one stored event of the open session or of one of its children.
    pub fn apply(&mut self, event: &StoredEvent) {
        let own = Some(event.session_id.as_str()) == self.session_id();
        if own {
            if self.cursor.is_some_and(|cursor| event.seq <= cursor) {
                return;
            }
            self.cursor = Some(event.seq);
        }
        match &event.payload {
            EventPayload::ApprovalRequested { approval } => {
                if !self.approvals.iter().any(|known| known.approval_id == approval.approval_id) {
                    self.approvals.push(approval.clone());
                }
            }
            EventPayload::ApprovalFinalized { approval_id, .. }
            | EventPayload::ApprovalCancelled { approval_id, .. }
            | EventPayload::ApprovalUserDecisionRecorded { approval_id, .. } => {
                self.approvals.retain(|approval| &approval.approval_id != approval_id);
            }
            _ if !own => {}
            payload => self.apply_own(event, payload),
        }
    }

    fn apply_own(&mut self, event: &StoredEvent, payload: &EventPayload) {
        match payload {
            EventPayload::SessionTitleCommitted { title, .. } => {
                if let Some(session) = self.session.as_mut() {
                    session.title = title.clone();
                }
            }
            EventPayload::RunStarted { input, selection, .. } => {
                self.active_run = event.run_id.clone();
                self.last_selection = Some(selection.clone());
                self.entries
                    .push(Entry::RunBoundary(format!("run started · {} · {}", selection.agent, selection.model.model)));
                self.entries.push(Entry::User(clean(input)));
            }
            EventPayload::UserInputAdmitted { input, .. } => self.entries.push(Entry::User(clean(input))),
            EventPayload::TextDelta { attempt_id, text } => match self.entries.last_mut() {
                Some(Entry::Assistant { attempt_id: last, text: shown }) if last == attempt_id => shown.push_str(text),
                _ => self.entries.push(Entry::Assistant { attempt_id: attempt_id.clone(), text: text.clone() }),
            },
            EventPayload::ModelTurnCommitted { attempt_id, text, .. } if !text.is_empty() => {
                let streamed = self
                    .entries
                    .iter()
                    .any(|entry| matches!(entry, Entry::Assistant { attempt_id: shown, .. } if shown == attempt_id));
                if !streamed {
                    self.entries.push(Entry::Assistant { attempt_id: attempt_id.clone(), text: text.clone() });
                }
            }
            EventPayload::AttemptAbandoned { model, error, will_retry, .. } => {
                let next = if *will_retry { "retrying" } else { "giving up on it" };
                self.entries.push(Entry::Error(format!("{model}: {} ({next})", clean(&error.message))));
            }
            EventPayload::ModelUsageRecorded { input_tokens, output_tokens, .. } => {
                self.tokens.0 += input_tokens;
                self.tokens.1 += output_tokens;
            }
            EventPayload::ToolCallStarted { tool_call_id, tool, arguments, resource, .. } => {
                self.running_tools.push(tool_call_id.clone());
                if let Some(diff) = edit_diff(tool, arguments) {
                    self.entries.push(diff);
                }
                self.entries.push(Entry::Tool {
                    tool_call_id: tool_call_id.clone(),
                    tool: clean(tool),
                    resource: clean(resource),
                    output: String::new(),
                    received: [0, 0],
                    result: None,
                });
            }
            EventPayload::ToolCallProgress { tool_call_id, stream, offset, text } => {
                self.tool_output(tool_call_id, *stream, *offset, text.as_bytes());
            }
            EventPayload::ToolCallTerminated { tool_call_id, result } => {
                self.running_tools.retain(|running| running != tool_call_id);
                let ok = result.status == ToolResultStatus::Ok;
                let text = result.display.clone().unwrap_or_else(|| result.output.clone());
                if let Some(Entry::Tool { result: end, .. }) = self.tool_entry(tool_call_id) {
                    *end = Some(ToolEnd { ok, text });
                }
            }
            EventPayload::RunCompleted { .. } => self.run_ended("run completed".to_owned()),
            EventPayload::RunFailed { error, .. } => {
                self.entries.push(Entry::Error(clean(error)));
                self.run_ended("run failed".to_owned());
            }
            EventPayload::RunCancelled { .. } => self.run_ended("run cancelled".to_owned()),
            EventPayload::RunInterrupted { .. } => self.run_ended("run interrupted".to_owned()),
            _ => {}
        }
    }

    fn run_ended(&mut self, words: String) {
        self.active_run = None;
        self.running_tools.clear();
        self.entries.push(Entry::RunBoundary(words));
    }

    fn tool_entry(&mut self, id: &str) -> Option<&mut Entry> {
        self.entries
            .iter_mut()
            .rev()
            .find(|entry| matches!(entry, Entry::Tool { tool_call_id, .. } if tool_call_id == id))
    }

    /// Appends output bytes at `offset` of a tool call's stream, skipping what was already shown (a live
    /// `events.tool_output_*` notification and the durable `tool_call_progress` carry the same bytes).
    pub fn tool_output(&mut self, tool_call_id: &str, stream: OutputStream, offset: u64, bytes: &[u8]) {
        let index = match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        };
        if let Some(Entry::Tool { output, received, .. }) = self.tool_entry(tool_call_id) {
            let end = offset + bytes.len() as u64;
            if end <= received[index] {
                return;
            }
            let skip = received[index].saturating_sub(offset) as usize;
            output.push_str(&String::from_utf8_lossy(&bytes[skip..]));
            received[index] = end;
        }
    }
}

/// The `edit_file` tool's arguments as a diff (its result says only how many places it replaced).
fn edit_diff(tool: &str, arguments: &serde_json::Value) -> Option<Entry> {
    if tool != "edit_file" {
        return None;
    }
    let text = |key: &str| arguments.get(key).and_then(serde_json::Value::as_str).map(clean);
    let lines = |text: String| text.lines().map(str::to_owned).collect::<Vec<_>>();
    Some(Entry::Diff { path: text("path")?, removed: lines(text("old_string")?), added: lines(text("new_string")?) })
}
