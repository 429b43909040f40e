//! Which running tool calls have gone quiet: a command that waits on its stdin (`read`, a prompt, `python` with
//! no script) prints nothing and never ends, which a follower cannot tell from a hang. The daemon does not say
//! that a process reads its stdin, so `troupe run` and `watch` say, after [`QUIET_AFTER`] without output from a
//! running call, that it still runs and how to send it input (`troupe stdin`). Pure bookkeeping, driven by the
//! events and output the follower sees and the time it passes in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use troupe_protocol::types::events::{EventPayload, StoredEvent};

/// How long a running call may be silent before the follower says how to send it input.
pub const QUIET_AFTER: Duration = Duration::from_secs(3);

/// A running call.
struct Running {
    session_id: String,
    run_id: String,
    tool: String,
    /// Its last sign of life: its start, output, or input sent to it.
    heard: Instant,
    /// Said since it was last heard from: said once per silence.
    said: bool,
}

/// The running tool calls of the sessions followed, by call id.
#[derive(Default)]
pub struct QuietTools {
    running: BTreeMap<String, Running>,
}

impl QuietTools {
    /// Follows an event: a call starts, is written to, or ends; a run's end ends its calls.
    pub fn event(&mut self, event: &StoredEvent, now: Instant) {
        match &event.payload {
            EventPayload::ToolCallStarted { tool_call_id, tool, .. } => {
                let running = Running {
                    session_id: event.session_id.clone(),
                    run_id: event.run_id.clone().unwrap_or_default(),
                    tool: tool.clone(),
                    heard: now,
                    said: false,
                };
                self.running.insert(tool_call_id.clone(), running);
            }
            EventPayload::ToolCallProgress { tool_call_id, .. }
            | EventPayload::ToolStdinSubmitted { tool_call_id, .. } => self.heard(tool_call_id, now),
            EventPayload::ToolCallTerminated { tool_call_id, .. } => {
                self.running.remove(tool_call_id);
            }
            payload if crate::render::is_run_end(payload) => {
                let run_id = event.run_id.as_deref().unwrap_or_default();
                self.running.retain(|_, running| running.run_id != run_id);
            }
            _ => {}
        }
    }

    /// Output of a call arrived (a live `events.tool_output_delta` or snapshot).
    pub fn heard(&mut self, tool_call_id: &str, now: Instant) {
        if let Some(running) = self.running.get_mut(tool_call_id) {
            running.heard = now;
            running.said = false;
        }
    }

    /// When the next call goes quiet, if one may.
    pub fn next_due(&self) -> Option<Instant> {
        self.running.values().filter(|running| !running.said).map(|running| running.heard + QUIET_AFTER).min()
    }

    /// What to say of the calls quiet at `now` (each once per silence): the session the line belongs to and the
    /// line.
    pub fn due(&mut self, now: Instant) -> Vec<(String, String)> {
        let quiet: Vec<String> = self
            .running
            .iter()
            .filter(|(_, running)| !running.said && now >= running.heard + QUIET_AFTER)
            .map(|(id, _)| id.clone())
            .collect();
        let mut lines = Vec::new();
        for tool_call_id in quiet {
            let Some(running) = self.running.get(&tool_call_id) else { continue };
            // With several calls running in the run, `--call` says which one gets the input.
            let siblings = self.running.values().filter(|other| other.run_id == running.run_id).count();
            let call = if siblings > 1 { format!(" --call {tool_call_id}") } else { String::new() };
            let quiet_for = now.saturating_duration_since(running.heard).as_secs();
            lines.push((
                running.session_id.clone(),
                format!(
                    "{} ({tool_call_id}) is still running, with no output for {quiet_for}s; if it waits for input, \
                     send it: troupe stdin --session {}{call} TEXT (--eof ends its input)",
                    troupe_protocol::diagnostic::visible_line(&running.tool, 40),
                    running.session_id,
                ),
            ));
            if let Some(running) = self.running.get_mut(&tool_call_id) {
                running.said = true;
            }
        }
        lines
    }
}

/// Waits until `due`, or forever without one: a `select!` branch that fires when a call goes quiet.
pub async fn until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload: serde_json::Value) -> StoredEvent {
        serde_json::from_value(serde_json::json!({
            "session_id": "s1", "run_id": "r1", "seq": 1, "timestamp": "2026-01-01T00:00:00Z", "payload": payload
        }))
        .unwrap()
    }

    fn started(id: &str) -> StoredEvent {
        event(serde_json::json!({"type": "tool_call_started", "tool_call_id": id, "tool": "shell",
            "arguments": {"command": "read x"}, "action": "execute", "resource": "read x"}))
    }

    #[test]
    fn a_silent_call_is_named_once_per_silence_with_the_command_that_feeds_it() {
        let start = Instant::now();
        let mut quiet = QuietTools::default();
        quiet.event(&started("call-1-1"), start);
        assert_eq!(quiet.next_due(), Some(start + QUIET_AFTER));
        assert!(quiet.due(start + Duration::from_secs(1)).is_empty());
        let said = quiet.due(start + QUIET_AFTER);
        assert_eq!(said.len(), 1);
        assert!(said[0].1.starts_with("shell (call-1-1) is still running, with no output for 3s"), "{said:?}");
        assert!(said[0].1.contains("troupe stdin --session s1 TEXT"), "{said:?}");
        // Said once; output starts a new silence.
        assert!(quiet.due(start + QUIET_AFTER * 2).is_empty());
        assert_eq!(quiet.next_due(), None);
        quiet.heard("call-1-1", start + QUIET_AFTER * 2);
        assert_eq!(quiet.due(start + QUIET_AFTER * 3).len(), 1);

        // Two calls of one run: `--call` names the one.
        quiet.event(&started("call-2-1"), start);
        let said = quiet.due(start + QUIET_AFTER * 4);
        assert!(said[0].1.contains("--call call-2-1"), "{said:?}");
        // The run's end ends its calls.
        quiet.event(&event(serde_json::json!({"type": "run_completed"})), start);
        assert_eq!(quiet.next_due(), None);
    }
}
