//! What a session knows about its runs, rebuilt from its log: the active run and its steering lane, every run
//! by `client_run_id` (for idempotent `run.start`), and fallback stickiness.
//!
//! The steering lane lives here, in the session's projection, because admission, promotion and recall are all
//! events of the session's log: the session actor is the one place that orders a steer against a boundary.

use std::collections::{HashMap, VecDeque};

use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::events::{EventPayload, StoredEvent};

/// An input admitted by `run.steer` and not yet promoted or recalled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingInput {
    pub input_id: String,
    pub input: String,
}

/// The run that has started and not yet reached a terminal event.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveRun {
    pub run_id: String,
    pub selection: RunSelection,
    /// The models this run may use, in order.
    pub model_chain: Vec<ModelSelection>,
    /// Admitted steering inputs, oldest first.
    pub pending: VecDeque<PendingInput>,
}

/// What `run.start` recorded under a `client_run_id`, to answer a redelivery or detect a conflict.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRun {
    pub run_id: String,
    pub selection: RunSelection,
    pub input: String,
    pub reset_fallback: bool,
}

/// Which requests share a sticky fallback: the same agent, preset and requested model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FallbackScope {
    pub agent: String,
    pub preset: Option<String>,
    pub model: ModelSelection,
}

impl FallbackScope {
    pub fn of(selection: &RunSelection) -> Self {
        FallbackScope {
            agent: selection.agent.clone(),
            preset: selection.preset.clone(),
            model: selection.model.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunLedger {
    pub active: Option<ActiveRun>,
    runs: HashMap<String, RecordedRun>,
    /// The model (of the agent's chain) on which the latest turn of a scope committed, when that was a fallback.
    sticky: HashMap<FallbackScope, ModelSelection>,
}

impl RunLedger {
    pub fn recorded(&self, client_run_id: &str) -> Option<&RecordedRun> {
        self.runs.get(client_run_id)
    }

    /// The model a new run of this scope should start from instead of the requested one, if a fallback stuck.
    pub fn sticky_model(&self, scope: &FallbackScope) -> Option<&ModelSelection> {
        self.sticky.get(scope)
    }

    pub fn active_run_id(&self) -> Option<&str> {
        self.active.as_ref().map(|run| run.run_id.as_str())
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        let run_id = event.run_id.as_deref();
        match &event.payload {
            EventPayload::RunStarted { client_run_id, selection, input, model_chain, reset_fallback, .. } => {
                let Some(run_id) = run_id else { return };
                self.runs.insert(
                    client_run_id.clone(),
                    RecordedRun {
                        run_id: run_id.to_owned(),
                        selection: selection.clone(),
                        input: input.clone(),
                        reset_fallback: *reset_fallback,
                    },
                );
                let model_chain =
                    if model_chain.is_empty() { vec![selection.model.clone()] } else { model_chain.clone() };
                self.active = Some(ActiveRun {
                    run_id: run_id.to_owned(),
                    selection: selection.clone(),
                    model_chain,
                    pending: VecDeque::new(),
                });
            }
            EventPayload::UserInputAdmitted { input_id, input } => {
                if let Some(active) = self.active_for(run_id) {
                    active.pending.push_back(PendingInput { input_id: input_id.clone(), input: input.clone() });
                }
            }
            EventPayload::UserInputSubmitted { input_id, .. } | EventPayload::UserInputRecalled { input_id, .. } => {
                if let Some(active) = self.active_for(run_id) {
                    active.pending.retain(|pending| &pending.input_id != input_id);
                }
            }
            EventPayload::ModelTurnCommitted { model, .. } => {
                if let Some(active) = self.active_for(run_id) {
                    let scope = FallbackScope::of(&active.selection);
                    if *model == scope.model.model {
                        self.sticky.remove(&scope);
                    } else if let Some(committed) = active.model_chain.iter().find(|entry| &entry.model == model) {
                        let committed = committed.clone();
                        self.sticky.insert(scope, committed);
                    }
                }
            }
            // Terminal run events void whatever is still pending.
            EventPayload::RunCompleted { .. }
            | EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. }
                if self.active_for(run_id).is_some() =>
            {
                self.active = None;
            }
            _ => {}
        }
    }

    fn active_for(&mut self, run_id: Option<&str>) -> Option<&mut ActiveRun> {
        self.active.as_mut().filter(|active| Some(active.run_id.as_str()) == run_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(model: &str) -> RunSelection {
        RunSelection {
            agent: "default".into(),
            model: ModelSelection { model: model.into(), variant: None },
            preset: None,
        }
    }

    fn event(seq: u64, run_id: Option<&str>, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: run_id.map(str::to_owned),
            seq,
            timestamp: "t".into(),
            origin: None,
            payload,
        }
    }

    fn started(run_id: &str, chain: &[&str]) -> StoredEvent {
        event(
            1,
            Some(run_id),
            EventPayload::RunStarted {
                client_run_id: format!("c-{run_id}"),
                selection: selection(chain[0]),
                input: "hi".into(),
                fallback_index: 0,
                model_chain: chain.iter().map(|m| ModelSelection { model: (*m).into(), variant: None }).collect(),
                reset_fallback: false,
                skill: None,
            },
        )
    }

    fn admitted(run_id: &str, id: &str) -> StoredEvent {
        event(2, Some(run_id), EventPayload::UserInputAdmitted { input_id: id.into(), input: id.into() })
    }

    #[test]
    fn the_lane_keeps_admitted_inputs_until_promoted_recalled_or_voided() {
        let mut ledger = RunLedger::default();
        ledger.apply(&started("r1", &["local/echo"]));
        ledger.apply(&admitted("r1", "a"));
        ledger.apply(&admitted("r1", "b"));
        ledger.apply(&admitted("r1", "c"));
        ledger.apply(&event(
            3,
            Some("r1"),
            EventPayload::UserInputRecalled { input_id: "c".into(), input: "c".into() },
        ));
        ledger.apply(&event(
            4,
            Some("r1"),
            EventPayload::UserInputSubmitted { input_id: "a".into(), input: "a".into() },
        ));
        let pending: Vec<_> = ledger.active.as_ref().unwrap().pending.iter().map(|p| p.input_id.clone()).collect();
        assert_eq!(pending, ["b"]);
        ledger.apply(&event(5, Some("r1"), EventPayload::RunCancelled { reason: None }));
        assert_eq!(ledger.active, None);
        assert_eq!(ledger.recorded("c-r1").unwrap().run_id, "r1");
    }

    #[test]
    fn a_committed_fallback_sticks_until_the_requested_model_commits_again() {
        let mut ledger = RunLedger::default();
        ledger.apply(&started("r1", &["openai/a", "local/echo"]));
        let committed = |model: &str| {
            event(
                3,
                Some("r1"),
                EventPayload::ModelTurnCommitted {
                    attempt_id: "x".into(),
                    model: model.into(),
                    fallback_index: 1,
                    text: String::new(),
                    reasoning: None,
                    tool_calls: Vec::new(),
                },
            )
        };
        ledger.apply(&committed("local/echo"));
        let scope = FallbackScope::of(&selection("openai/a"));
        assert_eq!(ledger.sticky_model(&scope).map(|m| m.model.as_str()), Some("local/echo"));
        ledger.apply(&committed("openai/a"));
        assert_eq!(ledger.sticky_model(&scope), None);
    }
}
