//! `session.revert` and `session.fork`: the session actors do the work (`session_actor/history.rs`, the copy in
//! `troupe_runtime::fork`); the engine routes a fork from its source to the supervisor, which starts the new
//! session.

use troupe_protocol::RpcError;
use troupe_protocol::types::common::SessionOrigin;
use troupe_protocol::types::session::{SessionForkParams, SessionForkResult, SessionResult, SessionRevertParams};

use super::Engine;
use crate::approval_actor::ReloadGrants;
use crate::session_actor::{PrepareFork, Revert};
use crate::session_supervisor::{ApprovalsFor, ForkSession};

impl Engine {
    pub(super) async fn revert(&self, params: SessionRevertParams) -> Result<SessionResult, RpcError> {
        let through_seq = params.through_seq;
        let session = self.ask_session(&params.session_id, || Revert { through_seq }).await?;
        if session.origin == SessionOrigin::Root {
            // The tree's grants are in the root's log, and the revert may have hidden some: the tree's approval
            // actor reads them again before it answers the next permission check (queued before this reply).
            let approvals = self.supervisor_ask(ApprovalsFor { session_id: session.session_id.clone() }).await??;
            approvals.do_send(ReloadGrants);
        }
        Ok(SessionResult { session })
    }

    pub(super) async fn fork(&self, params: SessionForkParams) -> Result<SessionForkResult, RpcError> {
        let through_seq = params.through_seq;
        let source = self.ask_session(&params.session_id, || PrepareFork { through_seq }).await?;
        let session = self.supervisor_ask(ForkSession { source }).await??;
        Ok(SessionForkResult { session_id: session.session_id })
    }
}
