//! `approval.list` and `approval.respond`: the supervisor names the approval actor of the session's tree
//! (`approval_actor.rs`), which lists and answers the tree's approvals.

use troupe_protocol::RpcError;
use troupe_protocol::server::ServerContext;
use troupe_protocol::types::approval::{
    ApprovalListParams, ApprovalListResult, ApprovalRespondParams, ApprovalRespondResult,
};
use troupe_protocol::types::common::SessionOrigin;

use super::Engine;
use crate::approval_actor::{ListTreeApprovals, RespondInTree};
use crate::error::{EngineError, check_idempotency_key};
use crate::session_supervisor::{ApprovalsFor, IndexedMeta};

impl Engine {
    /// The approvals of a root session's tree, optionally of one status.
    pub(super) async fn list_approvals(&self, params: ApprovalListParams) -> Result<ApprovalListResult, RpcError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: params.root_session_id.clone() }).await??;
        if meta.origin != SessionOrigin::Root {
            return Err(EngineError::NotRootSession { session_id: params.root_session_id }.into());
        }
        let approvals = self.supervisor_ask(ApprovalsFor { session_id: params.root_session_id }).await??;
        Ok(approvals
            .send(ListTreeApprovals { status: params.status })
            .await
            .map_err(|_| EngineError::ShuttingDown)??)
    }

    /// Answers an approval of the session's tree, on behalf of the asking connection.
    pub(super) async fn respond_to_approval(
        &self,
        ctx: &ServerContext,
        params: ApprovalRespondParams,
    ) -> Result<ApprovalRespondResult, RpcError> {
        check_idempotency_key("client_response_id", &params.client_response_id)?;
        let client_response_id = params.client_response_id.clone();
        let approvals = self.supervisor_ask(ApprovalsFor { session_id: params.session_id.clone() }).await??;
        // A request another node forwarded was answered by its client there, not by the forwarding connection.
        let caller = match ctx.forwarded_caller() {
            Some(caller) => caller.to_owned(),
            None => troupe_protocol::server::ServerProtocol::connection_label(self, ctx.connection_id()),
        };
        let answered_by = format!("client:{caller}");
        let approval =
            approvals.send(RespondInTree { params, answered_by }).await.map_err(|_| EngineError::ShuttingDown)??;
        Ok(ApprovalRespondResult { client_response_id, approval })
    }
}
