//! One preparation for every run: `run.start`, a goal's automatic run, a producer message that wakes an idle
//! session and a delegated child's run all check the selection against the runtime snapshot, resolve the agent's
//! model chain and policy and lease the tree's approval actor here ([`EngineRunContext::prepare`]), and start with
//! the [`StartRun`] that [`PreparedRun::into_start`] builds.
//!
//! [`EngineRunContext`] is what a session actor needs to start a run nobody asked for over the wire: the runtime
//! snapshot for the agent's model chain, the shared run services. Given to every session actor by the supervisor.

use std::sync::Arc;

use actix::prelude::*;
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_runtime::catalog::validate_selection;
use troupe_runtime::policy::Policy;

use crate::error::EngineError;
use crate::ports::session::StartRun;
use crate::ports::supervisor::ApprovalsFor;
use crate::ports::{ApprovalLease, SupervisorPort};
use crate::run_services::RunServices;
use crate::runtime_actor::{GetSnapshot, RuntimeActor};

/// What a session actor needs to start a run on its own. Cheap to clone.
#[derive(Clone)]
pub struct EngineRunContext {
    pub runtime: Addr<RuntimeActor>,
    pub services: Arc<RunServices>,
    /// `[limits] max_input_bytes`: the most a woken run's input (or one boundary's steer messages) may hold.
    pub max_input_bytes: usize,
}

/// A run ready to be started by a session actor: the selection checked against the runtime snapshot, the agent's
/// chain, the policy, and the tree's approval actor (held in use until the run has started).
pub struct PreparedRun {
    pub selection: RunSelection,
    pub agent_chain: Vec<ModelSelection>,
    pub requested_index: Option<usize>,
    pub policy: Arc<Policy>,
    pub approvals: ApprovalLease,
    pub services: Arc<RunServices>,
}

impl PreparedRun {
    /// The run's start message: an engine-started run (no reset, no skill) with `input`, under a
    /// `<kind>:<new id>` client run id.
    pub fn into_start(self, kind: &str, input: String) -> StartRun {
        StartRun {
            client_run_id: format!("{kind}:{}", troupe_runtime::clock::new_id()),
            selection: self.selection,
            input,
            reset_fallback: false,
            agent_chain: self.agent_chain,
            requested_index: self.requested_index,
            services: self.services,
            approvals: (*self.approvals).clone(),
            policy: self.policy,
            skill: None,
        }
    }
}

impl EngineRunContext {
    /// Prepares a run of `session_id` with `selection`, as `run.start` would. Fails when the selection no longer
    /// matches the runtime (an agent removed, a provider disconnected).
    pub async fn prepare(
        &self,
        supervisor: &SupervisorPort,
        session_id: &str,
        selection: RunSelection,
    ) -> Result<PreparedRun, EngineError> {
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| EngineError::ShuttingDown)?;
        validate_selection(&snapshot, &selection).map_err(EngineError::InvalidSelection)?;
        let agent_chain = snapshot
            .agents
            .iter()
            .find(|agent| agent.agent == selection.agent)
            .map(|agent| agent.models.clone())
            .unwrap_or_default();
        let requested_index = agent_chain.iter().position(|model| *model == selection.model);
        let (_, approvals) = supervisor
            .send(ApprovalsFor { session_id: session_id.to_owned() })
            .await
            .map_err(|_| EngineError::ShuttingDown)??;
        let policy = self.services.policy_for(&selection.agent)?;
        Ok(PreparedRun { selection, agent_chain, requested_index, policy, approvals, services: self.services.clone() })
    }
}
