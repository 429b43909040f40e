//! `session.usage`, `agent.usage`, `usage.global` and `session.tree_usage`.
//!
//! `session.usage` asks the session's actor (it knows the visible branch); the others are answered by the
//! supervisor's usage index without loading any log. `agent.usage` does not check the agent against the catalog:
//! an agent removed from the configuration still has its past usage, and an agent that never ran (or a name that
//! was never an agent) simply has an empty rollup rather than an error.

use troupe_protocol::RpcError;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::usage::{
    AgentUsageParams, AgentUsageResult, GlobalUsageResult, SessionTreeUsageResult, SessionUsageResult,
};

use super::Engine;
use crate::session_actor::GetUsage;
use crate::session_supervisor::{AgentUsage, GlobalUsage, TreeUsage};

impl Engine {
    pub(super) async fn usage_of_session(&self, params: SessionIdParams) -> Result<SessionUsageResult, RpcError> {
        Ok(self.ask_session(&params.session_id, || GetUsage).await?)
    }

    pub(super) async fn usage_of_agent(&self, params: AgentUsageParams) -> Result<AgentUsageResult, RpcError> {
        let usage = self.supervisor_ask(AgentUsage { agent: params.agent_id.clone() }).await?;
        Ok(AgentUsageResult { agent_id: params.agent_id, usage })
    }

    pub(super) async fn usage_of_everything(&self) -> Result<GlobalUsageResult, RpcError> {
        Ok(GlobalUsageResult { usage: self.supervisor_ask(GlobalUsage).await? })
    }

    pub(super) async fn usage_of_tree(&self, params: SessionIdParams) -> Result<SessionTreeUsageResult, RpcError> {
        Ok(self.supervisor_ask(TreeUsage { session_id: params.session_id }).await??)
    }
}
