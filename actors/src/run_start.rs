//! One preparation for every run: `run.start`, a goal's automatic run, a producer message that wakes an idle
//! session and a delegated child's run each get a [`PreparedRun`] from [`PreparedRun::new`] (the agent's model
//! chain and policy, the tree's approval lease; [`EngineRunContext::prepare`] also fetches the snapshot, checks the
//! selection and takes the lease), and start with one [`StartRun`] `{ request, prepared }`.
//!
//! [`EngineRunContext`] is what a session actor needs to start a run nobody asked for over the wire: the runtime
//! snapshot for the agent's model chain, the shared run services. Given to every session actor by the supervisor.

use std::sync::Arc;

use actix::prelude::*;
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::runtime::RuntimeSnapshot;
use troupe_runtime::catalog::validate_selection;

use crate::error::EngineError;
pub use crate::ports::session::{PreparedRun, RunRequest, StartRun};
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

impl PreparedRun {
    /// The one preparation: the agent's model chain and where the requested model sits in it (from `snapshot`), the
    /// agent's policy, and the tree's `approvals`. The caller has judged `selection` against `snapshot`:
    /// `run.start` and a woken run refuse one that does not match it (`validate_selection`), a goal's run waits
    /// while no model of its chain can run.
    pub fn new(
        services: &Arc<RunServices>,
        snapshot: &RuntimeSnapshot,
        selection: RunSelection,
        approvals: ApprovalLease,
    ) -> Result<PreparedRun, EngineError> {
        let agent_chain = agent_chain(snapshot, &selection.agent);
        let requested_index = agent_chain.iter().position(|model| *model == selection.model);
        let policy = services.policy_for(&selection.agent)?;
        Ok(PreparedRun {
            selection,
            agent_chain,
            requested_index,
            policy,
            approvals: Arc::new(approvals),
            services: services.clone(),
        })
    }
}

/// The models of `agent`'s chain in `snapshot`, in order (none for an agent the snapshot does not have).
pub fn agent_chain(snapshot: &RuntimeSnapshot, agent: &str) -> Vec<ModelSelection> {
    let found = snapshot.agents.iter().find(|info| info.agent == agent);
    found.map(|info| info.models.clone()).unwrap_or_default()
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
        let approvals = supervisor
            .send(ApprovalsFor { session_id: session_id.to_owned() })
            .await
            .map_err(|_| EngineError::ShuttingDown)??;
        PreparedRun::new(&self.services, &snapshot, selection, approvals)
    }
}
