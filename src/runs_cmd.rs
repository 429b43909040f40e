//! `troupe runs SESSION`: a session's runs, oldest first, with the whole run id (what `steer`, `recall`, `cancel`
//! and `stdin` take), the state, agent, model, start and the first line of the input.
//!
//! The protocol has no listing of runs, so they are read from the session's events: the command subscribes from
//! the beginning and folds each event into a small summary per run as it arrives, until it has seen the event the
//! session ended with when asked. The events themselves are not kept, so a session of 100k events costs the
//! memory of its runs' summaries only (the client pages a long replay).

use std::time::Duration;

use troupe_protocol::client::{ClientDelivery, ClientOptions, ClientProtocol, DeliveryStream};
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::inspect_cmd::{first_line, table};
use crate::output::{pretty_json, text};
use crate::session_ref::resolve_session_id;
use crate::style::{Style, relative_time};

/// How long the replay may pause before the command gives up: the daemon pages a long history, so a silence
/// this long means it is stuck, not busy.
const REPLAY_SILENCE: Duration = Duration::from_secs(60);

/// The first line of a run's input, at most this many characters (JSON keeps a little more).
const INPUT_CHARS: usize = 60;
const JSON_INPUT_CHARS: usize = 200;

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Active,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

impl RunState {
    /// As printed, and in `--json`.
    pub fn name(self) -> &'static str {
        match self {
            RunState::Active => "active",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
            RunState::Interrupted => "interrupted",
        }
    }
}

/// One run, as `troupe runs` prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    pub run_id: String,
    pub state: RunState,
    pub agent: String,
    /// The model the run started on; after a fallback, the model it fell back to.
    pub model: String,
    /// RFC 3339 UTC, from `run_started`.
    pub started_at: String,
    /// RFC 3339 UTC, from the run's end; null while active.
    pub ended_at: Option<String>,
    /// The first line of the input, cleaned of terminal controls and cut.
    pub input: String,
    /// Why it failed, was cancelled or interrupted (first line, cleaned), when the log says.
    pub reason: Option<String>,
    /// A later `session_reverted` hid it from the conversation (it stays in the log).
    pub reverted: bool,
    started_seq: u64,
}

/// Folds a session's events into its runs, in order. Events seen twice (a re-sent page) are skipped by `seq`.
#[derive(Debug, Default)]
pub struct RunLedger {
    runs: Vec<RunSummary>,
    last_seq: u64,
    input_chars: usize,
}

impl RunLedger {
    pub fn new(input_chars: usize) -> Self {
        RunLedger { input_chars, ..RunLedger::default() }
    }

    /// The highest `seq` folded in.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn see(&mut self, event: &StoredEvent) {
        if event.seq <= self.last_seq {
            return;
        }
        self.last_seq = event.seq;
        let reason = |text: Option<&String>| text.map(|text| first_line(text, 120));
        match &event.payload {
            EventPayload::RunStarted { selection, input, .. } => {
                let Some(run_id) = &event.run_id else { return };
                self.runs.push(RunSummary {
                    run_id: run_id.clone(),
                    state: RunState::Active,
                    agent: selection.agent.clone(),
                    model: selection.model.model.clone(),
                    started_at: event.timestamp.clone(),
                    ended_at: None,
                    input: first_line(input, self.input_chars),
                    reason: None,
                    reverted: false,
                    started_seq: event.seq,
                });
            }
            EventPayload::ModelFallback { to, .. } => {
                if let Some(run) = self.run_of(event) {
                    run.model = to.clone();
                }
            }
            EventPayload::RunCompleted { .. } => self.end(event, RunState::Completed, None),
            EventPayload::RunFailed { error, .. } => self.end(event, RunState::Failed, reason(Some(error))),
            EventPayload::RunCancelled { reason: why } => self.end(event, RunState::Cancelled, reason(why.as_ref())),
            EventPayload::RunInterrupted { reason: why } => {
                self.end(event, RunState::Interrupted, reason(why.as_ref()))
            }
            EventPayload::SessionReverted { through_seq } => {
                // The marker hides what lies between the event reverted to and itself.
                for run in &mut self.runs {
                    if run.started_seq > *through_seq && run.started_seq < event.seq {
                        run.reverted = true;
                    }
                }
            }
            _ => {}
        }
    }

    fn run_of(&mut self, event: &StoredEvent) -> Option<&mut RunSummary> {
        let run_id = event.run_id.as_deref()?;
        self.runs.iter_mut().rev().find(|run| run.run_id == run_id)
    }

    fn end(&mut self, event: &StoredEvent, state: RunState, reason: Option<String>) {
        let timestamp = event.timestamp.clone();
        if let Some(run) = self.run_of(event) {
            run.state = state;
            run.ended_at = Some(timestamp);
            run.reason = reason;
        }
    }

    pub fn into_runs(self) -> Vec<RunSummary> {
        self.runs
    }
}

impl RunSummary {
    /// The run in `troupe runs --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "run_id": self.run_id,
            "state": self.state.name(),
            "agent": self.agent,
            "model": self.model,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "input": self.input,
            "reason": self.reason,
            "reverted": self.reverted,
        })
    }
}

/// `troupe runs SESSION`.
pub async fn runs(connection: &Connection, given: &str, json: bool) -> anyhow::Result<()> {
    let Connected { client, mut deliveries } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, given).await?;
    let session =
        client.session_get(SessionIdParams { session_id: session_id.clone() }).await.map_err(explained)?.session;
    let mut ledger = RunLedger::new(if json { JSON_INPUT_CHARS } else { INPUT_CHARS });
    client.subscribe(&session_id, None).await.map_err(explained)?;
    read_until(&mut deliveries, &session_id, session.last_event_seq, &mut ledger).await?;
    client.close().await;
    let runs = ledger.into_runs();
    let active = runs.iter().rev().find(|run| run.state == RunState::Active).map(|run| run.run_id.as_str());
    if json {
        let runs: Vec<serde_json::Value> = runs.iter().map(RunSummary::to_json).collect();
        return pretty_json(&serde_json::json!({ "session_id": session_id, "active_run_id": active, "runs": runs }));
    }
    text(&render_runs(&session_id, &runs, Style::stdout()));
    Ok(())
}

/// Folds the session's events into `ledger` until the one at `end_seq` (the session's last when asked).
async fn read_until<D: DeliveryStream>(
    deliveries: &mut D,
    session_id: &str,
    end_seq: u64,
    ledger: &mut RunLedger,
) -> anyhow::Result<()> {
    while ledger.last_seq() < end_seq {
        let delivery = tokio::time::timeout(REPLAY_SILENCE, deliveries.next()).await.map_err(|_| {
            anyhow::anyhow!(
                "the daemon stopped sending the session's events after #{} of {end_seq}\n  hint: try again; \
                 `troupe status` shows whether the daemon is well",
                ledger.last_seq()
            )
        })?;
        match delivery {
            Some(ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event))
                if event.session_id == session_id =>
            {
                ledger.see(&event)
            }
            // Lines the daemon skipped as unreadable leave holes: the replay's end says it has sent everything.
            Some(ClientDelivery::ReplayEnd { session_id: ended, last_seq })
                if ended == session_id && last_seq >= end_seq =>
            {
                return Ok(());
            }
            Some(ClientDelivery::RecoveryFailed { detail, .. }) => {
                anyhow::bail!("could not read the session's events: {detail}")
            }
            Some(_) => {}
            None => anyhow::bail!("the connection to the daemon ended while reading the session's events"),
        }
    }
    Ok(())
}

/// The runs as a table, oldest first, the active one marked; a hint on how to act on it.
pub fn render_runs(session_id: &str, runs: &[RunSummary], style: Style) -> String {
    if runs.is_empty() {
        return format!("no runs in session {session_id}\n  start one with `troupe run --session {session_id} TEXT`\n");
    }
    let mut rows = vec![["RUN", "STATE", "AGENT", "MODEL", "STARTED", "INPUT"].map(str::to_owned).to_vec()];
    for run in runs {
        let mut state = run.state.name().to_owned();
        if run.reverted {
            state.push_str(" (reverted)");
        }
        rows.push(vec![
            run.run_id.clone(),
            state,
            crate::style::clean(&run.agent),
            crate::style::clean(&run.model),
            relative_time(&run.started_at),
            run.input.clone(),
        ]);
    }
    let mut text = String::new();
    let rendered = table(&rows);
    for (index, line) in rendered.lines().enumerate() {
        let painted = if index == 0 {
            style.bold(line)
        } else {
            match runs[index - 1].state {
                RunState::Active => style.cyan(line),
                RunState::Failed => style.red(line),
                RunState::Cancelled | RunState::Interrupted => style.yellow(line),
                RunState::Completed => line.to_owned(),
            }
        };
        text.push_str(&painted);
        text.push('\n');
    }
    for run in runs.iter().filter(|run| run.reason.is_some()) {
        if let Some(reason) = &run.reason {
            text.push_str(&style.dim(&format!("{} {}: {reason}", run.run_id, run.state.name())));
            text.push('\n');
        }
    }
    if let Some(active) = runs.iter().rev().find(|run| run.state == RunState::Active) {
        let id = &active.run_id;
        text.push_str(&format!(
            "active: {id}; steer it with `troupe steer {id} TEXT`, stop it with `troupe cancel {id}`\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::common::{ModelSelection, RunSelection};

    use super::*;

    fn event(seq: u64, run_id: Option<&str>, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: run_id.map(str::to_owned),
            seq,
            timestamp: format!("2026-01-01T00:00:{seq:02}Z"),
            origin: None,
            payload,
        }
    }

    fn started(seq: u64, run_id: &str, input: &str) -> StoredEvent {
        event(
            seq,
            Some(run_id),
            EventPayload::RunStarted {
                client_run_id: "c".into(),
                selection: RunSelection {
                    agent: "default".into(),
                    model: ModelSelection { model: "local/echo".into(), variant: None },
                    preset: None,
                },
                input: input.into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        )
    }

    #[test]
    fn runs_are_folded_in_order_with_their_end_and_repeats_skipped() {
        let mut ledger = RunLedger::new(20);
        ledger.see(&started(2, "r1", "first\nsecond line"));
        ledger.see(&event(3, Some("r1"), EventPayload::RunCompleted { final_text: Some("ok".into()) }));
        ledger.see(&started(4, "r2", "again"));
        ledger.see(&event(
            5,
            Some("r2"),
            EventPayload::RunFailed { error: "boom".into(), model_error: None, resolved_model: None },
        ));
        ledger.see(&started(6, "r3", "third"));
        // A re-sent page: seen already, not folded twice.
        ledger.see(&started(4, "r2", "again"));
        ledger.see(&event(7, None, EventPayload::SessionReverted { through_seq: 3 }));
        let runs = ledger.into_runs();
        let states: Vec<_> = runs.iter().map(|run| (run.run_id.as_str(), run.state, run.reverted)).collect();
        assert_eq!(
            states,
            [("r1", RunState::Completed, false), ("r2", RunState::Failed, true), ("r3", RunState::Active, true)]
        );
        assert_eq!(runs[0].input, "first …");
        assert_eq!(runs[1].reason.as_deref(), Some("boom"));
    }

    #[test]
    fn the_active_run_is_named_with_what_to_do_with_it() {
        let mut ledger = RunLedger::new(20);
        ledger.see(&started(2, "run-1", "go"));
        let text = render_runs("session-1234", &ledger.into_runs(), Style::plain());
        assert!(text.starts_with("RUN    STATE   AGENT    MODEL       STARTED"), "{text}");
        assert!(text.contains("run-1  active  default  local/echo"), "{text}");
        assert!(text.contains("troupe steer run-1 TEXT"), "{text}");
        assert!(render_runs("session-1234", &[], Style::plain()).starts_with("no runs in session session-"));
    }
}
