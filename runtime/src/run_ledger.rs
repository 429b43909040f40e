//! What a session knows about its runs, rebuilt from its log: the active run and its steering lane, every run
//! by `client_run_id` (for idempotent `run.start`), and fallback stickiness.
//!
//! Stickiness follows the reference: when a turn commits on a fallback (a later model of the run's chain), later
//! runs of the same agent and preset that request an earlier model of the agent's chain start at that fallback,
//! matched by exact model and variant; `run_started` records that effective selection and chain. A
//! `reset_fallback` run starts at the requested model, and once a turn commits there, the stickiness is gone. A
//! redelivered `run.start` is planned against the state that preceded the original run, so it is recognized
//! whatever the original run changed.
//!
//! The steering lane lives here, in the session's projection, because admission, promotion and recall are all
//! events of the session's log: the session actor is the one place that orders a steer against a boundary.

use std::collections::{HashMap, VecDeque};

use troupe_protocol::types::attachment::AttachedFile;
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::events::{EventPayload, StoredEvent};

use crate::recent::RecentRecords;

/// An input admitted by `run.steer` and not yet promoted or recalled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingInput {
    pub input_id: String,
    pub input: String,
    /// The files it attached (absent in snapshots written before attachments).
    #[serde(default)]
    pub attachments: Vec<AttachedFile>,
}

/// The run that has started and not yet reached a terminal event.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ActiveRun {
    pub run_id: String,
    pub selection: RunSelection,
    /// The models this run may use, in order.
    pub model_chain: Vec<ModelSelection>,
    /// The position of `model_chain[0]` in the agent's chain (`run_started.fallback_index`).
    pub chain_start: usize,
    /// Admitted steering inputs, oldest first.
    pub pending: VecDeque<PendingInput>,
    /// The run's `delegate` calls whose child is still at work: (tool call id, child session id), oldest first. A
    /// run closed without its actor records each as interrupted.
    pub open_delegates: Vec<(String, String)>,
}

/// What `run.start` recorded under a `client_run_id`, to answer a redelivery or detect a conflict.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecordedRun {
    pub run_id: String,
    /// The effective selection `run_started` recorded.
    pub selection: RunSelection,
    pub input: String,
    pub reset_fallback: bool,
    /// The sticky fallback of the run's scope just before the run: a redelivery is planned against it, not
    /// against what the run itself changed (for logs that did not record `requested_model`).
    pub sticky_before: Option<StickyFallback>,
    /// The model the client requested, as `run_started` recorded it.
    pub requested_model: Option<ModelSelection>,
    /// The files the input attached: a redelivery attaches the same (absent in older snapshots).
    #[serde(default)]
    pub attachments: Vec<AttachedFile>,
}

/// Which requests share a sticky fallback: the same agent and preset, whatever model they request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FallbackScope {
    pub agent: String,
    pub preset: Option<String>,
}

impl FallbackScope {
    pub fn of(selection: &RunSelection) -> Self {
        FallbackScope { agent: selection.agent.clone(), preset: selection.preset.clone() }
    }
}

/// The model (and variant) of the agent's chain on which the latest turn of a scope committed after a fallback,
/// and its position in the agent's chain.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StickyFallback {
    pub model: ModelSelection,
    pub chain_index: usize,
}

/// Where a new run starts: its effective selection, and its chain of models with the chain's position in the
/// agent's chain.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    /// The requested selection with the model the run starts on.
    pub selection: RunSelection,
    pub fallback_index: usize,
    pub model_chain: Vec<ModelSelection>,
}

/// The chain of a run requesting `selection`: the agent's chain from the requested model on (the requested
/// model alone when the chain does not hold it), trimmed to `sticky` when it comes later in that chain, unless
/// `reset_fallback`. Identity is exact: model and variant.
pub fn plan_run(
    selection: &RunSelection,
    reset_fallback: bool,
    agent_chain: &[ModelSelection],
    requested_index: Option<usize>,
    sticky: Option<&StickyFallback>,
) -> RunPlan {
    let (mut fallback_index, mut model_chain) = match requested_index.filter(|index| *index < agent_chain.len()) {
        Some(index) => (index, agent_chain[index..].to_vec()),
        None => (0, vec![selection.model.clone()]),
    };
    if !reset_fallback
        && requested_index.is_some()
        && let Some(sticky) = sticky
        && let Some(position) = model_chain.iter().position(|model| *model == sticky.model)
    {
        fallback_index += position;
        model_chain.drain(..position);
    }
    let selection = RunSelection { model: model_chain[0].clone(), ..selection.clone() };
    RunPlan { selection, fallback_index, model_chain }
}

impl ActiveRun {
    /// Whether the run requested a model outside the agent's chain: its chain is that model alone, at position 0
    /// (an agent chain of one model looks the same, but it never has a fallback to forget).
    fn off_chain(&self) -> bool {
        self.chain_start == 0 && self.model_chain.len() == 1
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunLedger {
    pub active: Option<ActiveRun>,
    /// The newest runs by `client_run_id`, for redeliveries.
    runs: RecentRecords<RecordedRun>,
    /// The latest committed fallback of each scope. (A list of pairs in a snapshot: JSON keys must be strings.)
    #[serde(with = "sticky_pairs")]
    sticky: HashMap<FallbackScope, StickyFallback>,
    /// The effective selection of the latest run.
    latest_selection: Option<RunSelection>,
}

/// Serializes the sticky fallbacks as `[scope, fallback]` pairs (for the projection snapshot).
mod sticky_pairs {
    use std::collections::HashMap;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::{FallbackScope, StickyFallback};

    pub fn serialize<S: Serializer>(map: &HashMap<FallbackScope, StickyFallback>, out: S) -> Result<S::Ok, S::Error> {
        out.collect_seq(map.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<HashMap<FallbackScope, StickyFallback>, D::Error> {
        Ok(Vec::<(FallbackScope, StickyFallback)>::deserialize(input)?.into_iter().collect())
    }
}

impl RunLedger {
    pub fn recorded(&self, client_run_id: &str) -> Option<&RecordedRun> {
        self.runs.get(client_run_id)
    }

    /// The latest committed fallback of a scope, which a new run of that scope starts from when it requests an
    /// earlier model of the agent's chain.
    pub fn sticky_fallback(&self, scope: &FallbackScope) -> Option<&StickyFallback> {
        self.sticky.get(scope)
    }

    /// The selection of the latest run, if the session has run.
    pub fn latest_selection(&self) -> Option<&RunSelection> {
        self.latest_selection.as_ref()
    }

    /// Where a new run requesting `selection` starts, given this session's sticky fallbacks.
    pub fn plan(
        &self,
        selection: &RunSelection,
        reset_fallback: bool,
        agent_chain: &[ModelSelection],
        requested_index: Option<usize>,
    ) -> RunPlan {
        let sticky = self.sticky_fallback(&FallbackScope::of(selection));
        plan_run(selection, reset_fallback, agent_chain, requested_index, sticky)
    }

    /// Whether a `run.start` is a redelivery of `recorded` (rather than a conflicting reuse of its id): the same
    /// input and flag, and a selection that, planned against the state preceding the original run, gives the
    /// selection it recorded.
    pub fn is_redelivery(
        recorded: &RecordedRun,
        selection: &RunSelection,
        input: &str,
        attachments: &[AttachedFile],
        reset_fallback: bool,
        agent_chain: &[ModelSelection],
        requested_index: Option<usize>,
    ) -> bool {
        if recorded.input != input || recorded.attachments != attachments || recorded.reset_fallback != reset_fallback {
            return false;
        }
        if let Some(requested_model) = &recorded.requested_model {
            // What the client asked for is on record: no replanning, which would depend on the branch the
            // stickiness was computed on (a revert and a restart can change that).
            return RunSelection { model: requested_model.clone(), ..recorded.selection.clone() } == *selection;
        }
        // A log written before `run_started` recorded the effective selection holds the requested one.
        recorded.selection == *selection
            || plan_run(selection, reset_fallback, agent_chain, requested_index, recorded.sticky_before.as_ref())
                .selection
                == recorded.selection
    }

    /// Takes the active run, stickiness and latest selection of `branch` (the visible events' ledger) and keeps
    /// this ledger's idempotency records, so a redelivered `run.start` of a reverted-away run is still recognized.
    pub fn adopt_branch(&mut self, branch: RunLedger) {
        self.active = branch.active;
        self.sticky = branch.sticky;
        self.latest_selection = branch.latest_selection;
    }

    pub fn active_run_id(&self) -> Option<&str> {
        self.active.as_ref().map(|run| run.run_id.as_str())
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        let run_id = event.run_id.as_deref();
        match &event.payload {
            EventPayload::RunStarted {
                client_run_id,
                selection,
                input,
                model_chain,
                reset_fallback,
                fallback_index,
                requested_model,
                attachments,
                ..
            } => {
                let Some(run_id) = run_id else { return };
                self.runs.insert(
                    client_run_id,
                    RecordedRun {
                        run_id: run_id.to_owned(),
                        selection: selection.clone(),
                        input: input.clone(),
                        reset_fallback: *reset_fallback,
                        sticky_before: self.sticky_fallback(&FallbackScope::of(selection)).cloned(),
                        requested_model: requested_model.clone(),
                        attachments: attachments.clone(),
                    },
                );
                self.latest_selection = Some(selection.clone());
                let model_chain =
                    if model_chain.is_empty() { vec![selection.model.clone()] } else { model_chain.clone() };
                self.active = Some(ActiveRun {
                    run_id: run_id.to_owned(),
                    selection: selection.clone(),
                    model_chain,
                    chain_start: *fallback_index as usize,
                    pending: VecDeque::new(),
                    open_delegates: Vec::new(),
                });
            }
            EventPayload::UserInputAdmitted { input_id, input, attachments } => {
                if let Some(active) = self.active_for(run_id) {
                    let attachments = attachments.clone();
                    active.pending.push_back(PendingInput {
                        input_id: input_id.clone(),
                        input: input.clone(),
                        attachments,
                    });
                }
            }
            EventPayload::UserInputSubmitted { input_id, .. } | EventPayload::UserInputRecalled { input_id, .. } => {
                if let Some(active) = self.active_for(run_id) {
                    active.pending.retain(|pending| &pending.input_id != input_id);
                }
            }
            EventPayload::ModelTurnCommitted { model, fallback_index, .. } => {
                let Some(active) = self.active_for(run_id) else { return };
                let scope = FallbackScope::of(&active.selection);
                // `fallback_index` is the position in the run's chain; the name guards against a log that
                // disagrees with itself.
                let position = *fallback_index as usize;
                let position = match active.model_chain.get(position) {
                    Some(entry) if entry.model == *model => position,
                    _ => match active.model_chain.iter().position(|entry| entry.model == *model) {
                        Some(position) => position,
                        None => return,
                    },
                };
                let committed = StickyFallback {
                    model: active.model_chain[position].clone(),
                    chain_index: active.chain_start + position,
                };
                if position > 0 {
                    // The run fell back and the fallback answered: later runs of the scope start there.
                    self.sticky.insert(scope, committed);
                } else if !active.off_chain()
                    && self.sticky.get(&scope).is_some_and(|sticky| committed.chain_index < sticky.chain_index)
                {
                    // The run's first model, earlier in the chain than the sticky fallback, answered (a
                    // `reset_fallback` run): the earlier model works again.
                    self.sticky.remove(&scope);
                }
            }
            EventPayload::DelegateStarted { tool_call_id, child_session_id, .. } => {
                if let Some(active) = self.active_for(run_id) {
                    active.open_delegates.push((tool_call_id.clone(), child_session_id.clone()));
                }
            }
            EventPayload::DelegateFinished { tool_call_id, .. } => {
                if let Some(active) = self.active_for(run_id) {
                    active.open_delegates.retain(|(open, _)| open != tool_call_id);
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
                requested_model: None,
                attachments: Vec::new(),
            },
        )
    }

    fn admitted(run_id: &str, id: &str) -> StoredEvent {
        event(
            2,
            Some(run_id),
            EventPayload::UserInputAdmitted { input_id: id.into(), input: id.into(), attachments: Vec::new() },
        )
    }

    #[test]
    fn a_run_keeps_its_delegations_open_until_each_finishes() {
        use troupe_protocol::types::events::DelegateStatus;
        let mut ledger = RunLedger::default();
        ledger.apply(&started("r1", &["local/echo"]));
        for (call, child) in [("c1", "child-1"), ("c2", "child-2")] {
            let payload = EventPayload::DelegateStarted {
                tool_call_id: call.into(),
                child_session_id: child.into(),
                agent: "helper".into(),
                task: "t".into(),
            };
            ledger.apply(&event(2, Some("r1"), payload));
        }
        let finished = EventPayload::DelegateFinished {
            tool_call_id: "c1".into(),
            child_session_id: "child-1".into(),
            status: DelegateStatus::Completed,
            summary: "s".into(),
        };
        ledger.apply(&event(3, Some("other-run"), finished.clone()));
        assert_eq!(ledger.active.as_ref().unwrap().open_delegates.len(), 2, "another run's event changes nothing");
        ledger.apply(&event(4, Some("r1"), finished));
        assert_eq!(ledger.active.as_ref().unwrap().open_delegates, [("c2".to_owned(), "child-2".to_owned())]);
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
            EventPayload::UserInputRecalled { input_id: "c".into(), input: "c".into(), attachments: Vec::new() },
        ));
        ledger.apply(&event(
            4,
            Some("r1"),
            EventPayload::UserInputSubmitted { input_id: "a".into(), input: "a".into(), attachments: Vec::new() },
        ));
        let pending: Vec<_> = ledger.active.as_ref().unwrap().pending.iter().map(|p| p.input_id.clone()).collect();
        assert_eq!(pending, ["b"]);
        ledger.apply(&event(5, Some("r1"), EventPayload::RunCancelled { reason: None }));
        assert_eq!(ledger.active, None);
        assert_eq!(ledger.recorded("c-r1").unwrap().run_id, "r1");
    }

    fn model(name: &str, variant: Option<&str>) -> ModelSelection {
        ModelSelection { model: name.into(), variant: variant.map(str::to_owned) }
    }

    fn started_with(
        run_id: &str,
        selection: RunSelection,
        fallback_index: u32,
        chain: Vec<ModelSelection>,
    ) -> StoredEvent {
        event(
            1,
            Some(run_id),
            EventPayload::RunStarted {
                client_run_id: format!("c-{run_id}"),
                selection,
                input: "hi".into(),
                fallback_index,
                model_chain: chain,
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        )
    }

    fn committed(run_id: &str, model: &str, position: u32) -> StoredEvent {
        event(
            3,
            Some(run_id),
            EventPayload::ModelTurnCommitted {
                attempt_id: "x".into(),
                model: model.into(),
                fallback_index: position,
                text: String::new(),
                reasoning: None,
                tool_calls: Vec::new(),
            },
        )
    }

    fn ended(run_id: &str) -> StoredEvent {
        event(4, Some(run_id), EventPayload::RunCompleted { final_text: None })
    }

    /// Starts a run as the session actor would (planned against the ledger) and returns its plan.
    fn start(
        ledger: &mut RunLedger,
        run_id: &str,
        requested: RunSelection,
        reset: bool,
        agent_chain: &[ModelSelection],
    ) -> RunPlan {
        let index = agent_chain.iter().position(|entry| *entry == requested.model);
        let plan = ledger.plan(&requested, reset, agent_chain, index);
        let mut started =
            started_with(run_id, plan.selection.clone(), plan.fallback_index as u32, plan.model_chain.clone());
        if let EventPayload::RunStarted { reset_fallback, .. } = &mut started.payload {
            *reset_fallback = reset;
        }
        ledger.apply(&started);
        plan
    }

    #[test]
    fn a_committed_fallback_trims_a_request_for_an_earlier_model_of_the_same_scope() {
        let chain = [model("openai/a", None), model("openai/b", Some("high")), model("openai/b", None)];
        let mut ledger = RunLedger::default();
        let first = start(&mut ledger, "r1", selection("openai/a"), false, &chain);
        assert_eq!((first.fallback_index, first.model_chain.len()), (0, 3));
        // The run fell back twice: to b/high, then to b without a variant, which answered.
        ledger.apply(&committed("r1", "openai/b", 2));
        ledger.apply(&ended("r1"));
        let sticky = ledger.sticky_fallback(&FallbackScope::of(&selection("x"))).unwrap();
        assert_eq!((&sticky.model, sticky.chain_index), (&chain[2], 2), "model and variant, not the first b");

        let second = start(&mut ledger, "r2", selection("openai/a"), false, &chain);
        assert_eq!(second.fallback_index, 2);
        assert_eq!(second.model_chain, [chain[2].clone()]);
        assert_eq!(second.selection.model, chain[2], "the effective selection is recorded");
        ledger.apply(&committed("r2", "openai/b", 0));
        ledger.apply(&ended("r2"));

        // Another preset is another scope; so is another agent.
        let mut other_preset = selection("openai/a");
        other_preset.preset = Some("fast".into());
        assert_eq!(ledger.plan(&other_preset, false, &chain, Some(0)).fallback_index, 0);
        let mut other_agent = selection("openai/a");
        other_agent.agent = "other".into();
        assert_eq!(ledger.plan(&other_agent, false, &chain, Some(0)).fallback_index, 0);
        // A request for b/high (earlier than the sticky b) is trimmed too; a model outside the chain is not.
        let mut high = selection("openai/b");
        high.model.variant = Some("high".into());
        assert_eq!(ledger.plan(&high, false, &chain, Some(1)).fallback_index, 2);
        assert_eq!(ledger.plan(&selection("openai/z"), false, &chain, None).model_chain, [model("openai/z", None)]);
    }

    #[test]
    fn reset_fallback_starts_at_the_requested_model_and_its_success_ends_the_stickiness() {
        let chain = [model("openai/a", None), model("anthropic/b", None)];
        let mut ledger = RunLedger::default();
        start(&mut ledger, "r1", selection("openai/a"), false, &chain);
        ledger.apply(&committed("r1", "anthropic/b", 1));
        ledger.apply(&ended("r1"));

        let reset = start(&mut ledger, "r2", selection("openai/a"), true, &chain);
        assert_eq!((reset.fallback_index, reset.model_chain.len()), (0, 2));
        ledger.apply(&committed("r2", "openai/a", 0));
        ledger.apply(&ended("r2"));
        assert_eq!(ledger.sticky_fallback(&FallbackScope::of(&selection("openai/a"))), None);
        assert_eq!(start(&mut ledger, "r3", selection("openai/a"), false, &chain).fallback_index, 0);
    }

    #[test]
    fn a_redelivery_is_planned_against_the_state_before_the_original_run() {
        let chain = [model("openai/a", None), model("anthropic/b", None)];
        let mut ledger = RunLedger::default();
        start(&mut ledger, "r1", selection("openai/a"), false, &chain);
        ledger.apply(&committed("r1", "anthropic/b", 1));
        ledger.apply(&ended("r1"));
        start(&mut ledger, "r2", selection("openai/a"), false, &chain);
        ledger.apply(&ended("r2"));

        // r1 was planned with no stickiness, r2 with it; both recognize their original request.
        for run in ["r1", "r2"] {
            let recorded = ledger.recorded(&format!("c-{run}")).unwrap();
            assert!(
                RunLedger::is_redelivery(recorded, &selection("openai/a"), "hi", &[], false, &chain, Some(0)),
                "{run}"
            );
            assert!(!RunLedger::is_redelivery(recorded, &selection("openai/a"), "other", &[], false, &chain, Some(0)));
            assert!(!RunLedger::is_redelivery(recorded, &selection("anthropic/c"), "hi", &[], false, &chain, None));
        }
        assert_eq!(ledger.recorded("c-r2").unwrap().selection.model.model, "anthropic/b");
        assert_eq!(ledger.latest_selection().map(|s| s.model.model.as_str()), Some("anthropic/b"));
    }
}
