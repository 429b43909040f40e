//! The TUI's state and how the session's events change it (the "reduction"): no I/O here, so rendering and the
//! reduction are tested without a daemon.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRecord};
use troupe_protocol::types::common::{RunSelection, SessionMeta, SessionStatus};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::mcp::McpServerStatus;
use troupe_protocol::types::run::ToolResultStatus;
use troupe_protocol::types::session::PermissionMode;
use troupe_protocol::types::tool_output::OutputStream;

use crate::style::clean;

/// How long a notice stays on screen (one about the active run stays until the run ends, "Ctrl-C again quits"
/// until the next key): long enough to read, short enough that an old one is not taken for news.
pub const NOTICE_LIFETIME: Duration = Duration::from_secs(8);

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
    /// The session's working directory; `None` for a child, which works in its root's.
    pub cwd: Option<String>,
    /// 0 for a root session, 1 for its children, …
    pub depth: usize,
}

/// One block of the transcript.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    User(String),
    /// The run moved to another model than the one asked for (a fallback, or a start on a sticky fallback).
    ModelSwitch(String),
    /// A steer taken back before the run used it (`user_input_recalled`).
    Recalled(String),
    /// The model's text; streaming deltas append to the last one of its attempt.
    Assistant {
        attempt_id: String,
        text: String,
    },
    /// The model's reasoning, before its text: folded to one line unless [`App::show_reasoning`].
    Reasoning {
        attempt_id: String,
        text: String,
    },
    /// A tool call: from its approval request (if it asked), its start, or (a call that never started, such as a
    /// rejected one) its end.
    Tool {
        tool_call_id: String,
        tool: String,
        /// What the call works on (a command, a path) as the daemon sent it, untrusted: the view shows it with
        /// every control visible, never cleaned (a dropped `\r` would change what it reads as).
        resource: String,
        /// The approval the call asked for, and the answer once given.
        approval: Option<CallApproval>,
        /// `tool_call_started` was seen: the call runs (a rejected or cancelled call never starts).
        started: bool,
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
    pub status: ToolResultStatus,
    pub text: String,
}

/// A call's approval as the transcript shows it: asked, then answered by a person (or withdrawn, which the call's
/// `cancelled` end shows).
#[derive(Clone, Debug, PartialEq)]
pub struct CallApproval {
    pub approval_id: String,
    pub answer: Option<ApprovalDecision>,
    /// The feedback given with a rejection.
    pub feedback: Option<String>,
}

/// One line of the model picker: an agent with one of its models, and why it cannot run now (its provider is not
/// connected, …), in which case it is shown greyed and cannot be picked.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub selection: RunSelection,
    pub unusable: Option<String>,
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
    /// The tree's permission mode as the daemon last reported it (`approval.list`), `None` until it has.
    pub mode: Option<PermissionMode>,
    /// The tool names of the latest model turn's calls, by id: a call that ends without starting (rejected) is
    /// named from here when it asked no approval.
    pub turn_calls: HashMap<String, String>,
    pub last_selection: Option<RunSelection>,
    /// Chosen in the model picker; used for the next run.
    pub picked: Option<RunSelection>,
    pub choices: Vec<Choice>,
    pub choosing: Option<usize>,
    pub tokens: (u64, u64),
    pub input: String,
    pub input_mode: InputMode,
    /// Lines scrolled up from the bottom of the transcript.
    pub scroll: u16,
    /// The model's reasoning unfolded (Ctrl-T), as the console's "thinking" details open.
    pub show_reasoning: bool,
    pub notice: Option<String>,
    /// The notice is about the active run ("steer queued", "cancelling"): it goes when the run ends.
    pub run_notice: bool,
    /// The notice as first seen by [`App::expire_notice`], and when: any other notice goes after
    /// [`NOTICE_LIFETIME`], or when the next run starts.
    notice_seen: Option<(String, Instant)>,
    /// The daemon's MCP servers (the runtime snapshot's `mcp_servers`, kept current by `runtime.changed`); `None`
    /// until it has said.
    pub mcp_servers: Option<Vec<McpServerStatus>>,
    /// The MCP servers overlay is up (`s` on the picker, Ctrl-S in a session), scrolled this many lines down.
    pub servers_shown: Option<u16>,
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
            turn_calls: HashMap::new(),
            last_selection: None,
            picked: None,
            choices: Vec::new(),
            choosing: None,
            tokens: (0, 0),
            input: String::new(),
            input_mode: InputMode::Prompt,
            scroll: 0,
            show_reasoning: false,
            notice: None,
            run_notice: false,
            notice_seen: None,
            mcp_servers: None,
            servers_shown: None,
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
        // Another tree's mode until the daemon says otherwise.
        self.mode = None;
        self.turn_calls.clear();
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
                    self.approvals.push((**approval).clone());
                }
                if own {
                    self.asked(approval);
                }
            }
            EventPayload::ApprovalUserDecisionRecorded { approval_id, decision, feedback, .. } => {
                self.approvals.retain(|approval| &approval.approval_id != approval_id);
                if own {
                    self.answered(approval_id, *decision, feedback.as_deref());
                }
            }
            EventPayload::ApprovalFinalized { approval_id, .. }
            | EventPayload::ApprovalCancelled { approval_id, .. } => {
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
            EventPayload::RunStarted { input, selection, attachments, .. } => {
                self.active_run = event.run_id.clone();
                // What was said before the run (a completion's list, an error) is not about it.
                if !self.run_notice && !self.quit_armed {
                    self.notice = None;
                }
                // What was asked for: a sticky fallback is noted below, never taken as the session's model.
                self.last_selection = payload.requested_selection();
                let words = format!("run started · {} · {}", selection.agent, selection.model.model);
                self.entries.push(Entry::RunBoundary(clean(&words)));
                if let Some(sticky) = crate::event_words::sticky_start(payload) {
                    self.entries.push(Entry::ModelSwitch(clean(&sticky)));
                }
                self.entries.push(Entry::User(clean(&format!("{input}{}", crate::event_words::attached(attachments)))));
            }
            EventPayload::UserInputAdmitted { input, attachments, .. } => {
                self.entries.push(Entry::User(clean(&format!("{input}{}", crate::event_words::attached(attachments)))))
            }
            EventPayload::UserInputRecalled { input, .. } => {
                let text = clean(input);
                if let Some(entry) =
                    self.entries.iter_mut().rev().find(|entry| matches!(entry, Entry::User(shown) if *shown == text))
                {
                    *entry = Entry::Recalled(text);
                }
            }
            EventPayload::TextDelta { attempt_id, text } => match self.entries.last_mut() {
                Some(Entry::Assistant { attempt_id: last, text: shown }) if last == attempt_id => shown.push_str(text),
                _ => self.entries.push(Entry::Assistant { attempt_id: attempt_id.clone(), text: text.clone() }),
            },
            EventPayload::ReasoningDelta { attempt_id, text } => match self.entries.last_mut() {
                Some(Entry::Reasoning { attempt_id: last, text: shown }) if last == attempt_id => shown.push_str(text),
                _ => self.entries.push(Entry::Reasoning { attempt_id: attempt_id.clone(), text: text.clone() }),
            },
            EventPayload::ModelTurnCommitted { attempt_id, text, tool_calls, reasoning, .. } => {
                self.turn_calls =
                    tool_calls.iter().map(|call| (call.tool_call_id.clone(), clean(&call.tool))).collect();
                let reasoned = self
                    .entries
                    .iter()
                    .any(|entry| matches!(entry, Entry::Reasoning { attempt_id: shown, .. } if shown == attempt_id));
                if let Some(reasoning) = reasoning.as_ref().filter(|reasoning| !reasoning.is_empty() && !reasoned) {
                    self.entries.push(Entry::Reasoning { attempt_id: attempt_id.clone(), text: reasoning.clone() });
                }
                if text.is_empty() {
                    return;
                }
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
                self.entries.push(Entry::Error(clean(&format!("{model}: {} ({next})", error.message))));
            }
            EventPayload::ModelFallback { .. } => {
                if let Some(words) = crate::event_words::model_switch(payload) {
                    self.entries.push(Entry::ModelSwitch(clean(&words)));
                }
            }
            EventPayload::ModelUsageRecorded { input_tokens, output_tokens, .. } => {
                self.tokens.0 += input_tokens;
                self.tokens.1 += output_tokens;
            }
            EventPayload::ToolCallStarted { tool_call_id, tool, arguments, resource, .. } => {
                self.running_tools.push(tool_call_id.clone());
                // A call that asked first has its entry already: it starts there, its diff just above it.
                let at = self.call_entry(tool_call_id, |_| (clean(tool), resource.clone()));
                if let Entry::Tool { started, .. } = &mut self.entries[at] {
                    *started = true;
                }
                if let Some(diff) = edit_diff(tool, arguments) {
                    self.entries.insert(at, diff);
                }
            }
            EventPayload::ToolCallProgress { tool_call_id, stream, offset, text } => {
                self.tool_output(tool_call_id, *stream, *offset, text.as_bytes());
            }
            EventPayload::ToolCallTerminated { tool_call_id, result } => {
                self.running_tools.retain(|running| running != tool_call_id);
                let text = result.display.clone().unwrap_or_else(|| result.output.clone());
                // A call refused before it started (by the policy) has no entry yet: still shown, with why.
                let at = self.call_entry(tool_call_id, |app| {
                    let tool = app.turn_calls.get(tool_call_id).cloned().unwrap_or_else(|| "tool".to_owned());
                    (tool, String::new())
                });
                if let Entry::Tool { result: end, .. } = &mut self.entries[at] {
                    *end = Some(ToolEnd { status: result.status, text });
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

    /// Drops the notice once it has been on screen for [`NOTICE_LIFETIME`] (a notice about the active run, or one
    /// saying a second Ctrl-C quits while it does, stays); returns when the one on screen goes, for the loop to
    /// draw the screen again then. `now` is when the notice is taken as shown, the first time this sees it.
    pub fn expire_notice(&mut self, now: Instant) -> Option<Instant> {
        let Some(text) = self.notice.as_ref().filter(|_| !self.run_notice && !self.quit_armed) else {
            self.notice_seen = None;
            return None;
        };
        let since = match &self.notice_seen {
            Some((seen, since)) if seen == text => *since,
            _ => {
                self.notice_seen = Some((text.clone(), now));
                now
            }
        };
        let until = since + NOTICE_LIFETIME;
        if now < until {
            return Some(until);
        }
        self.notice = None;
        self.notice_seen = None;
        None
    }

    /// Shows `text` until the active run ends.
    pub fn notice_for_run(&mut self, text: &str) {
        self.notice = Some(text.to_owned());
        self.run_notice = true;
    }

    fn run_ended(&mut self, words: String) {
        self.active_run = None;
        self.running_tools.clear();
        // What was said about the run (a steer queued, a cancel asked) is over with it. A Ctrl-C that cancelled
        // it still arms quitting (until the next key), and the notice now says only that.
        if self.run_notice {
            self.notice = self.quit_armed.then(|| super::keys::QUIT_ARMED.to_owned());
            self.run_notice = false;
        }
        self.entries.push(Entry::RunBoundary(words));
    }

    fn tool_index(&self, id: &str) -> Option<usize> {
        self.entries.iter().rposition(|entry| matches!(entry, Entry::Tool { tool_call_id, .. } if tool_call_id == id))
    }

    fn tool_entry(&mut self, id: &str) -> Option<&mut Entry> {
        self.tool_index(id).map(|index| &mut self.entries[index])
    }

    /// The index of call `id`'s entry; one is made at the end, with the tool and resource `named` gives, when it
    /// has none yet.
    fn call_entry(&mut self, id: &str, named: impl FnOnce(&Self) -> (String, String)) -> usize {
        if let Some(at) = self.tool_index(id) {
            return at;
        }
        let (tool, resource) = named(self);
        self.entries.push(Entry::Tool {
            tool_call_id: id.to_owned(),
            tool,
            resource,
            approval: None,
            started: false,
            output: String::new(),
            received: [0, 0],
            result: None,
        });
        self.entries.len() - 1
    }

    /// A call of the open session asks for approval: its entry appears now, waiting.
    fn asked(&mut self, approval: &ApprovalRecord) {
        let operation = &approval.operation;
        let at = self.call_entry(&approval.tool_call_id, |_| (clean(&operation.tool), operation.resource.clone()));
        if let Entry::Tool { approval: asked, .. } = &mut self.entries[at] {
            *asked = Some(CallApproval { approval_id: approval.approval_id.clone(), answer: None, feedback: None });
        }
    }

    /// A person answered a call's approval: the answer (and a rejection's feedback) shows under the call.
    fn answered(&mut self, approval_id: &str, decision: ApprovalDecision, feedback: Option<&str>) {
        for entry in self.entries.iter_mut().rev() {
            if let Entry::Tool { approval: Some(approval), .. } = entry
                && approval.approval_id == approval_id
            {
                approval.answer = Some(decision);
                approval.feedback = feedback.map(clean);
                return;
            }
        }
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
