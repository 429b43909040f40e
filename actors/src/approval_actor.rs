//! `ApprovalActor`: one per root session tree, the tree's side of permissions.
//!
//! It owns the tree's runtime-only permission mode and its tree grants (loaded from the root session's log when
//! it starts, and kept current as grants are committed), answers runs that ask for the mode and grants to judge
//! their calls with, routes `approval.respond` to the session whose run asked (that session's actor validates the
//! answer and records it, so racing answers are ordered in one place), commits the tree grant an `approve_tree`
//! answer creates to the root session's log, and collects `approval.list` across the tree. The supervisor starts it
//! when the tree is used and stops it once the tree is idle (`approval_trees.rs`): it holds nothing that is lost
//! then, as the grants are reloaded from the log and the supervisor keeps the tree's mode.

use std::sync::Arc;

use actix::prelude::*;
use troupe_protocol::types::approval::{ApprovalListResult, ApprovalRecord, TreeGrant};
use troupe_protocol::types::session::{PermissionMode, SessionTreeNode};

use crate::error::EngineError;
pub use crate::ports::approval::{
    ListTreeApprovals, PermissionView, ReloadGrants, RespondInTree, TreeMode, TreePermissions,
};
use crate::ports::session::{
    CommitTreeGrant, GetTreeGrants, ListSessionApprovals, RespondToApproval, SessionRecipients,
};
use crate::ports::supervisor::{GetTree, OpenSession};
use crate::ports::{Carries, SupervisorPort};

/// Sent by the supervisor, which remembers the tree's mode.
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetTreeMode {
    pub mode: PermissionMode,
}

/// Sent by the supervisor when the tree is idle and it has forgotten this actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopIdle;

pub struct ApprovalActor {
    root_session_id: String,
    supervisor: SupervisorPort,
    /// Runtime-only: the supervisor remembers it between this tree's approval actors, not across restarts.
    mode: PermissionMode,
    /// Durable in the root session's log. Shared with the views handed out; a new grant makes a new slice.
    grants: Arc<[TreeGrant]>,
}

impl ApprovalActor {
    pub fn new(root_session_id: String, supervisor: SupervisorPort, mode: PermissionMode) -> Self {
        ApprovalActor { root_session_id, supervisor, mode, grants: Arc::from([]) }
    }
}

/// Asks a session's actor, starting it if needed.
async fn ask_session<M>(
    supervisor: &SupervisorPort,
    session_id: &str,
    message: M,
) -> Result<<M::Result as ResultOk>::Ok, EngineError>
where
    M: Message + Send + 'static,
    M::Result: ResultOk + Send,
    SessionRecipients: Carries<M>,
{
    let session = supervisor
        .send(OpenSession { session_id: session_id.to_owned() })
        .await
        .map_err(|_| EngineError::ShuttingDown)??;
    let reply = session.send(message).await.map_err(|_| EngineError::Unavailable {
        session_id: session_id.to_owned(),
        detail: "the session stopped while answering".into(),
    })?;
    reply.into_result()
}

/// The replies of session messages are `Result<T, EngineError>`; this names their `T`.
pub trait ResultOk {
    type Ok;
    fn into_result(self) -> Result<Self::Ok, EngineError>;
}

impl<T> ResultOk for Result<T, EngineError> {
    type Ok = T;
    fn into_result(self) -> Result<T, EngineError> {
        self
    }
}

fn tree_sessions(node: &SessionTreeNode, into: &mut Vec<String>) {
    into.push(node.session.session_id.clone());
    for child in &node.children {
        tree_sessions(child, into);
    }
}

impl Actor for ApprovalActor {
    type Context = Context<Self>;

    /// Loads the tree's grants before answering anything, so a grant is never missed after a restart.
    fn started(&mut self, ctx: &mut Context<Self>) {
        self.load_grants(ctx);
    }
}

impl ApprovalActor {
    /// Reads the grants from the root session's projection; nothing else is answered meanwhile (`ctx.wait`), so no
    /// permission check sees grants older than the ones asked for. A grant committed while this load is under way
    /// is pushed by its `RespondInTree` after it: it is never lost (at worst listed twice until the next load).
    fn load_grants(&mut self, ctx: &mut Context<Self>) {
        let supervisor = self.supervisor.clone();
        let root = self.root_session_id.clone();
        let load = async move { ask_session(&supervisor, &root, GetTreeGrants).await };
        ctx.wait(load.into_actor(self).map(|loaded, actor, _| match loaded {
            Ok(grants) => actor.grants = grants.into(),
            // In a cluster, a tree another node hosts has its grants there: its approvals are answered there.
            Err(error @ EngineError::SessionHostedElsewhere { .. }) => {
                tracing::debug!(root = %actor.root_session_id, %error, "the tree's grants are on another node")
            }
            Err(error) => tracing::error!(root = %actor.root_session_id, %error, "could not load the tree's grants"),
        }));
    }
}

impl Handler<ReloadGrants> for ApprovalActor {
    type Result = ();

    fn handle(&mut self, _: ReloadGrants, ctx: &mut Context<Self>) {
        self.load_grants(ctx);
    }
}

impl Handler<TreePermissions> for ApprovalActor {
    type Result = MessageResult<TreePermissions>;

    fn handle(&mut self, _: TreePermissions, _: &mut Context<Self>) -> Self::Result {
        MessageResult(PermissionView { mode: self.mode, grants: self.grants.clone() })
    }
}

impl Handler<TreeMode> for ApprovalActor {
    type Result = MessageResult<TreeMode>;

    fn handle(&mut self, _: TreeMode, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.mode)
    }
}

impl Handler<SetTreeMode> for ApprovalActor {
    type Result = ();

    fn handle(&mut self, message: SetTreeMode, _: &mut Context<Self>) {
        self.mode = message.mode;
    }
}

impl Handler<StopIdle> for ApprovalActor {
    type Result = ();

    fn handle(&mut self, _: StopIdle, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Handler<ListTreeApprovals> for ApprovalActor {
    type Result = ResponseActFuture<Self, Result<ApprovalListResult, EngineError>>;

    fn handle(&mut self, message: ListTreeApprovals, _: &mut Context<Self>) -> Self::Result {
        let supervisor = self.supervisor.clone();
        let root = self.root_session_id.clone();
        let collect = async move {
            let (tree, _) =
                supervisor.send(GetTree { session_id: root }).await.map_err(|_| EngineError::ShuttingDown)??;
            let mut sessions = Vec::new();
            tree_sessions(&tree, &mut sessions);
            let mut approvals = Vec::new();
            for session_id in sessions {
                approvals.extend(ask_session(&supervisor, &session_id, ListSessionApprovals).await?);
            }
            Ok::<_, EngineError>(approvals)
        };
        Box::pin(collect.into_actor(self).map(move |collected, actor, _| {
            let mut approvals = collected?;
            if let Some(status) = message.status {
                approvals.retain(|record| record.status == status);
            }
            approvals.sort_by(|a, b| a.approval_id.cmp(&b.approval_id));
            Ok(ApprovalListResult { approvals, tree_grants: actor.grants.to_vec() })
        }))
    }
}

impl Handler<RespondInTree> for ApprovalActor {
    type Result = ResponseActFuture<Self, Result<ApprovalRecord, EngineError>>;

    fn handle(&mut self, message: RespondInTree, _: &mut Context<Self>) -> Self::Result {
        let supervisor = self.supervisor.clone();
        let root = self.root_session_id.clone();
        let params = message.params;
        let respond = async move {
            let (record, grant) = ask_session(
                &supervisor,
                &params.session_id,
                RespondToApproval {
                    approval_id: params.approval_id,
                    request_revision: params.request_revision,
                    operation_fingerprint: params.operation_fingerprint,
                    client_response_id: params.client_response_id,
                    decision: params.decision,
                    feedback: params.feedback.map(|feedback| feedback.message),
                    answered_by: message.answered_by,
                },
            )
            .await?;
            if let Some(grant) = &grant {
                ask_session(&supervisor, &root, CommitTreeGrant { grant: grant.clone() }).await?;
            }
            Ok::<_, EngineError>((record, grant))
        };
        Box::pin(respond.into_actor(self).map(|responded, actor, _| {
            let (record, grant) = responded?;
            if let Some(grant) = grant {
                actor.grants = actor.grants.iter().cloned().chain([grant]).collect();
            }
            Ok(record)
        }))
    }
}

#[cfg(test)]
mod tests;
