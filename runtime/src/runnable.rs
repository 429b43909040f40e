//! Whether a model, or a selection's whole fallback chain, can run now on the daemon of a runtime snapshot.
//!
//! `catalog::validate_selection` answers whether a selection may be *recorded* (a remote provider that is not
//! connected is fine: connecting it later makes it runnable). This module answers whether a run started now could
//! reach a model at all, which is what an active goal's automatic runs wait on (`goal_actor.rs`): the goal is
//! [`GoalBlocked`] while no model of its chain can run, and its runs start again once one can.

use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::goal::{GoalBlocked, GoalBlockedReason};
use troupe_protocol::types::runtime::{ProviderKind, RuntimeSnapshot};

use crate::catalog::LOCAL_SCRIPTED;
use crate::run_ledger::{StickyFallback, plan_run};

/// Why one model cannot run now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrunnable {
    /// Not of the form `<provider>/<model id>`, or its provider or local model does not exist.
    Unknown,
    /// Its provider exists but is not connected.
    NotConnected { provider_id: String },
    /// `local/scripted` while the `local` provider has no script (generation 0: the built-in provider alone).
    NoScript,
}

impl Unrunnable {
    fn reason(&self) -> GoalBlockedReason {
        match self {
            Unrunnable::Unknown => GoalBlockedReason::ModelNotFound,
            Unrunnable::NotConnected { .. } => GoalBlockedReason::ProviderNotConnected,
            Unrunnable::NoScript => GoalBlockedReason::NoScript,
        }
    }

    /// Why, and what fixes it, in the protocol's words.
    fn explain(&self, model: &str) -> String {
        match self {
            Unrunnable::Unknown => format!("{model} is not a model this daemon offers"),
            Unrunnable::NotConnected { provider_id } => format!(
                "{model} cannot run: the provider `{provider_id}` is not connected (connect it with provider.connect)"
            ),
            Unrunnable::NoScript => format!(
                "{model} cannot run: the `local` provider has no script (connect the `local` provider with \
                 setup_values.script set)"
            ),
        }
    }
}

/// Whether `model` can run now. A remote provider may serve models its catalog does not list, so for those only
/// the connection counts; local models must exist.
pub fn check_model(snapshot: &RuntimeSnapshot, model: &str) -> Result<(), Unrunnable> {
    let Some((provider_id, _)) = model.split_once('/').filter(|(p, m)| !p.is_empty() && !m.is_empty()) else {
        return Err(Unrunnable::Unknown);
    };
    let Some(provider) = snapshot.providers.iter().find(|provider| provider.provider_id == provider_id) else {
        return Err(Unrunnable::Unknown);
    };
    let listed = snapshot.models.iter().any(|info| info.model == model);
    if provider.kind == ProviderKind::Local && !listed {
        return Err(Unrunnable::Unknown);
    }
    if !provider.connected {
        return Err(Unrunnable::NotConnected { provider_id: provider_id.to_owned() });
    }
    if model == LOCAL_SCRIPTED && provider.generation == 0 {
        return Err(Unrunnable::NoScript);
    }
    Ok(())
}

/// The models a run requesting `selection` may use, as `run.start` plans them (`run_ledger::plan_run`): the
/// agent's chain from the requested model on, trimmed to the session's `sticky` fallback when that comes later in
/// it, else the requested model alone. `None` when the agent does not exist.
pub fn selection_chain(
    snapshot: &RuntimeSnapshot,
    selection: &RunSelection,
    sticky: Option<&ModelSelection>,
) -> Option<Vec<ModelSelection>> {
    let agent = snapshot.agents.iter().find(|agent| agent.agent == selection.agent)?;
    let requested_index = agent.models.iter().position(|model| *model == selection.model);
    // `plan_run` reads only the sticky model (its position in the chain is found again there).
    let sticky = sticky.map(|model| StickyFallback { model: model.clone(), chain_index: 0 });
    Some(plan_run(selection, false, &agent.models, requested_index, sticky.as_ref()).model_chain)
}

/// Why automatic runs on `selection` (in a session whose sticky fallback for it is `sticky`) would fail now: `None`
/// when some model of their chain can run.
pub fn selection_blocked(
    snapshot: &RuntimeSnapshot,
    selection: &RunSelection,
    sticky: Option<&ModelSelection>,
) -> Option<GoalBlocked> {
    const WHAT_TO_DO: &str = "automatic runs start again by themselves once it can run; or pause the goal and \
                              resume it with another selection";
    let Some(chain) = selection_chain(snapshot, selection, sticky) else {
        return Some(GoalBlocked {
            reason: GoalBlockedReason::AgentNotFound,
            detail: format!("the agent `{}` no longer exists; {WHAT_TO_DO}", selection.agent),
        });
    };
    let mut first_failure = None;
    for model in &chain {
        match check_model(snapshot, &model.model) {
            Ok(()) => return None,
            Err(why) => {
                first_failure.get_or_insert((model.model.clone(), why));
            }
        }
    }
    let (model, why) = first_failure?;
    let rest = match chain.len() {
        1 => String::new(),
        _ => format!(", nor can any later model of agent `{}`'s chain", selection.agent),
    };
    Some(GoalBlocked { reason: why.reason(), detail: format!("{}{rest}; {WHAT_TO_DO}", why.explain(&model)) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::builtin_snapshot;
    use troupe_protocol::types::runtime::{AgentInfo, AgentMode};

    fn selection(agent: &str, model: &str) -> RunSelection {
        RunSelection { agent: agent.into(), model: ModelSelection { model: model.into(), variant: None }, preset: None }
    }

    fn with_chain(models: &[&str]) -> RuntimeSnapshot {
        let mut snapshot = builtin_snapshot(1);
        snapshot.agents.push(AgentInfo {
            agent: "chain".into(),
            description: String::new(),
            mode: AgentMode::Primary,
            models: models.iter().map(|model| ModelSelection { model: (*model).into(), variant: None }).collect(),
        });
        snapshot
    }

    #[test]
    fn a_model_runs_when_its_provider_is_connected_and_local_scripted_has_a_script() {
        let mut snapshot = builtin_snapshot(1);
        assert_eq!(check_model(&snapshot, "local/echo"), Ok(()));
        assert_eq!(check_model(&snapshot, "local/scripted"), Err(Unrunnable::NoScript));
        assert_eq!(check_model(&snapshot, "local/nope"), Err(Unrunnable::Unknown));
        assert_eq!(check_model(&snapshot, "acme/x"), Err(Unrunnable::Unknown));
        assert_eq!(check_model(&snapshot, "echo"), Err(Unrunnable::Unknown));
        assert_eq!(
            check_model(&snapshot, "openai/gpt-4o"),
            Err(Unrunnable::NotConnected { provider_id: "openai".into() })
        );
        for provider in &mut snapshot.providers {
            provider.connected = true;
            provider.generation = 1;
        }
        assert_eq!(check_model(&snapshot, "openai/gpt-4o"), Ok(()), "an unlisted remote model may run");
        assert_eq!(check_model(&snapshot, "local/scripted"), Ok(()));
    }

    #[test]
    fn a_selection_is_blocked_only_when_no_model_of_its_chain_can_run() {
        let snapshot = with_chain(&["openai/gpt-4o", "local/echo"]);
        assert_eq!(selection_blocked(&snapshot, &selection("chain", "openai/gpt-4o"), None), None, "it falls back");
        let blocked = selection_blocked(&snapshot, &selection("default", "openai/gpt-4o"), None).unwrap();
        assert_eq!(blocked.reason, GoalBlockedReason::ProviderNotConnected);
        assert!(blocked.detail.contains("openai/gpt-4o") && blocked.detail.contains("provider.connect"), "{blocked:?}");
        let snapshot = with_chain(&["openai/gpt-4o", "anthropic/claude"]);
        let blocked = selection_blocked(&snapshot, &selection("chain", "openai/gpt-4o"), None).unwrap();
        assert!(blocked.detail.contains("nor can any later model"), "{blocked:?}");
        let gone = selection_blocked(&snapshot, &selection("nobody", "local/echo"), None).unwrap();
        assert_eq!(gone.reason, GoalBlockedReason::AgentNotFound);
        let script = selection_blocked(&snapshot, &selection("default", "local/scripted"), None).unwrap();
        assert_eq!(script.reason, GoalBlockedReason::NoScript);
    }

    #[test]
    fn a_sticky_fallback_that_cannot_run_blocks_although_an_earlier_model_could() {
        let mut snapshot = with_chain(&["openai/gpt-4o", "anthropic/claude"]);
        snapshot.providers.iter_mut().find(|provider| provider.provider_id == "openai").unwrap().connected = true;
        let asked = selection("chain", "openai/gpt-4o");
        let sticky = ModelSelection { model: "anthropic/claude".into(), variant: None };
        assert_eq!(selection_blocked(&snapshot, &asked, None), None);
        let blocked = selection_blocked(&snapshot, &asked, Some(&sticky)).expect("runs start on the sticky fallback");
        assert!(blocked.detail.starts_with("anthropic/claude cannot run"), "{blocked:?}");
    }
}
