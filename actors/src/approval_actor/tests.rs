//! The approval actor without a daemon: a real `ApprovalActor` whose supervisor and sessions are fakes behind
//! its `SupervisorPort` and their `SessionPort`s, so what it asks of them, and of which session, is visible.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use parking_lot::Mutex;
use troupe_protocol::types::approval::{
    ApprovalConstraints, ApprovalDecision, ApprovalOperation, ApprovalRecord, ApprovalRespondParams, ApprovalStatus,
    PermissionAction, TreeGrant,
};
use troupe_protocol::types::session::{PermissionMode, SessionTreeNode};

use super::ApprovalActor;
use crate::error::EngineError;
use crate::ports::approval::{ListTreeApprovals, RespondInTree, TreePermissions};
use crate::ports::session::*;
use crate::ports::supervisor::*;
use crate::ports::{SessionPort, SupervisorPort};
use crate::test_support::{session_created, unexpected_messages};

/// What each fake session was asked, by session id.
type Asked = Arc<Mutex<Vec<(String, &'static str)>>>;

struct FakeSession {
    session_id: String,
    grants: Vec<TreeGrant>,
    approvals: Vec<ApprovalRecord>,
    asked: Asked,
}

impl Actor for FakeSession {
    type Context = Context<Self>;
}

impl FakeSession {
    fn note(&self, what: &'static str) {
        self.asked.lock().push((self.session_id.clone(), what));
    }
}

impl Handler<GetTreeGrants> for FakeSession {
    type Result = Result<Vec<TreeGrant>, EngineError>;

    fn handle(&mut self, _: GetTreeGrants, _: &mut Context<Self>) -> Self::Result {
        self.note("get_tree_grants");
        Ok(self.grants.clone())
    }
}

impl Handler<RespondToApproval> for FakeSession {
    type Result = Result<(ApprovalRecord, Option<TreeGrant>), EngineError>;

    fn handle(&mut self, message: RespondToApproval, _: &mut Context<Self>) -> Self::Result {
        self.note("respond");
        let grant = (message.decision == ApprovalDecision::ApproveTree).then(|| grant("execute-me"));
        Ok((record(&self.session_id, &message.approval_id), grant))
    }
}

impl Handler<ListSessionApprovals> for FakeSession {
    type Result = Result<Vec<ApprovalRecord>, EngineError>;

    fn handle(&mut self, _: ListSessionApprovals, _: &mut Context<Self>) -> Self::Result {
        self.note("list");
        Ok(self.approvals.clone())
    }
}

impl Handler<CommitTreeGrant> for FakeSession {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, message: CommitTreeGrant, _: &mut Context<Self>) -> Self::Result {
        self.note("commit_grant");
        self.grants.push(message.grant);
        Ok(())
    }
}

// Messages the approval actor must not send in these tests: each fails loudly.
unexpected_messages!(FakeSession {
    StartRun => Result<String, EngineError>,
    StartDelegatedRun => Result<String, EngineError>,
    CancelActiveRun => Result<bool, EngineError>,
    AppendRunEvent => Result<u64, EngineError>,
    AppendTrackedRunEvent => Result<TrackedEvent, EngineError>,
    WriteBatchNow => (),
    RunOutput => (),
    PromotePendingInputs => Result<Vec<crate::ports::session::PromotedInput>, EngineError>,
    EndToolFreeTurn => Result<TurnEnd, EngineError>,
    RequestApproval => Result<(String, tokio::sync::oneshot::Receiver<ApprovalOutcome>), EngineError>,
    CancelPendingApprovals => Result<(), EngineError>,
    CompactionSourceOfRun => Result<Option<crate::compaction::CompactionSource>, EngineError>,
    RunHistory => Result<Vec<troupe_runtime::model::ChatMessage>, EngineError>,
    GetGoal => Result<Option<troupe_protocol::types::goal::GoalState>, EngineError>,
    UpdateGoalChecklist => Result<troupe_protocol::types::goal::GoalState, EngineError>,
    PrepareGoalRun => Result<Option<GoalRunPlan>, EngineError>,
    StartGoalRun => Result<Option<String>, EngineError>,
});

/// The supervisor: opens the fake sessions it knows.
struct FakeSupervisor {
    sessions: HashMap<String, SessionPort>,
}

impl Actor for FakeSupervisor {
    type Context = Context<Self>;
}

/// The tree: `root` with one child, `child`.
impl Handler<GetTree> for FakeSupervisor {
    type Result = Result<(SessionTreeNode, PermissionMode), EngineError>;

    fn handle(&mut self, _: GetTree, _: &mut Context<Self>) -> Self::Result {
        let node = |session_id: &str, children| SessionTreeNode { session: meta(session_id), children };
        Ok((node("root", vec![node("child", Vec::new())]), PermissionMode::Ask))
    }
}

impl Handler<OpenSession> for FakeSupervisor {
    type Result = Result<SessionPort, EngineError>;

    fn handle(&mut self, message: OpenSession, _: &mut Context<Self>) -> Self::Result {
        let session_id = message.session_id;
        self.sessions.get(&session_id).cloned().ok_or(EngineError::SessionNotFound { session_id })
    }
}

unexpected_messages!(FakeSupervisor {
    SessionGone => (),
    SessionMetaChanged => (),
    SessionStopped => (),
    SessionUsageChanged => (),
    SessionArtifactsChanged => (),
    GoalReport => (),
    ApprovalsFor => Result<crate::ports::ApprovalLease, EngineError>,
    CreateChildSession => Result<troupe_protocol::types::common::SessionMeta, ChildRefused>,
});

fn grant(resource: &str) -> TreeGrant {
    TreeGrant {
        action: PermissionAction::Execute,
        resource: resource.into(),
        granted_at: "2026-12-02T00:00:00Z".into(),
        granted_by: "user".into(),
    }
}

/// The metadata of a new root session `session_id`, as the projection makes it.
fn meta(session_id: &str) -> troupe_protocol::types::common::SessionMeta {
    troupe_runtime::session_state::SessionState::created(&session_created(session_id)).unwrap().meta()
}

fn record(session_id: &str, approval_id: &str) -> ApprovalRecord {
    ApprovalRecord {
        session_id: session_id.into(),
        run_id: "run".into(),
        tool_call_id: "call".into(),
        approval_id: approval_id.into(),
        revision: 2,
        status: ApprovalStatus::Approved,
        operation: ApprovalOperation {
            tool: "shell".into(),
            action: PermissionAction::Execute,
            resource: "execute-me".into(),
            summary: "run a command".into(),
            diff: None,
        },
        operation_fingerprint: "f".into(),
        constraints: ApprovalConstraints {
            allow_once: true,
            allow_tree_grant: true,
            cancellable: true,
            expires_at: None,
        },
        decision: Some(ApprovalDecision::ApproveTree),
        feedback: None,
        answered_by: Some("user".into()),
        created_at: "2026-12-02T00:00:00Z".into(),
        decided_at: Some("2026-12-02T00:00:01Z".into()),
    }
}

/// A tree of `root` and `child`, the root's log holding `root_grants`, and its approval actor in `mode`.
fn tree(root_grants: Vec<TreeGrant>, mode: PermissionMode) -> (Addr<ApprovalActor>, Asked) {
    tree_with(root_grants, [Vec::new(), Vec::new()], mode)
}

/// [`tree`], with the approval records of the root and of the child.
fn tree_with(
    root_grants: Vec<TreeGrant>,
    [root_approvals, child_approvals]: [Vec<ApprovalRecord>; 2],
    mode: PermissionMode,
) -> (Addr<ApprovalActor>, Asked) {
    let asked: Asked = Arc::default();
    let mut sessions = HashMap::new();
    for (session_id, grants, approvals) in
        [("root", root_grants, root_approvals), ("child", Vec::new(), child_approvals)]
    {
        let session = FakeSession { session_id: session_id.into(), grants, approvals, asked: asked.clone() }.start();
        sessions.insert(session_id.to_owned(), SessionPort::new(&session));
    }
    let supervisor = FakeSupervisor { sessions }.start();
    let actor = ApprovalActor::new("root".into(), SupervisorPort::new(&supervisor), mode).start();
    (actor, asked)
}

async fn check(actor: &Addr<ApprovalActor>, resource: &str) -> (PermissionMode, bool) {
    let view = tokio::time::timeout(Duration::from_secs(10), actor.send(TreePermissions));
    let view = view.await.expect("answered in time").unwrap();
    (view.mode, view.granted(PermissionAction::Execute, resource))
}

#[actix::test]
async fn the_roots_grants_are_loaded_before_any_permission_is_answered() {
    let (actor, asked) = tree(vec![grant("git status")], PermissionMode::Ask);
    assert_eq!(check(&actor, "git status").await, (PermissionMode::Ask, true));
    assert_eq!(check(&actor, "git push").await, (PermissionMode::Ask, false), "a grant covers its resource only");
    assert_eq!(*asked.lock(), [("root".to_owned(), "get_tree_grants")], "read once, from the root's log");
}

#[actix::test]
async fn an_approve_tree_answer_goes_to_its_session_and_its_grant_to_the_root_and_the_next_check() {
    let (actor, asked) = tree(Vec::new(), PermissionMode::AutoApprove);
    assert_eq!(check(&actor, "execute-me").await, (PermissionMode::AutoApprove, false));
    let respond = RespondInTree {
        params: ApprovalRespondParams {
            session_id: "child".into(),
            approval_id: "a1".into(),
            request_revision: 1,
            operation_fingerprint: "f".into(),
            client_response_id: "r1".into(),
            decision: ApprovalDecision::ApproveTree,
            feedback: None,
        },
        answered_by: "user".into(),
    };
    let answered = tokio::time::timeout(Duration::from_secs(10), actor.send(respond)).await.expect("in time");
    let record = answered.unwrap().expect("the answer is recorded");
    assert_eq!((record.session_id.as_str(), record.approval_id.as_str()), ("child", "a1"));
    assert_eq!(
        asked.lock()[1..],
        [("child".to_owned(), "respond"), ("root".to_owned(), "commit_grant")],
        "the child's actor records the answer, the root's log the tree grant"
    );
    assert_eq!(check(&actor, "execute-me").await, (PermissionMode::AutoApprove, true), "the grant applies at once");
}

#[actix::test]
async fn the_list_of_a_tree_collects_every_session_s_approvals_filtered_and_in_id_order() {
    let pending = |session_id: &str, approval_id: &str| ApprovalRecord {
        status: ApprovalStatus::Pending,
        decision: None,
        ..record(session_id, approval_id)
    };
    let approvals = [vec![pending("root", "a3"), record("root", "a1")], vec![pending("child", "a2")]];
    let (actor, asked) = tree_with(vec![grant("git status")], approvals, PermissionMode::Ask);
    let list = ListTreeApprovals { status: Some(ApprovalStatus::Pending) };
    let listed =
        tokio::time::timeout(Duration::from_secs(10), actor.send(list)).await.expect("in time").unwrap().unwrap();
    let ids: Vec<(&str, &str)> =
        listed.approvals.iter().map(|record| (record.session_id.as_str(), record.approval_id.as_str())).collect();
    assert_eq!(ids, [("child", "a2"), ("root", "a3")], "pending only, across the tree, by approval id");
    assert_eq!(listed.tree_grants, [grant("git status")]);
    let lists = asked.lock().iter().filter(|(_, what)| *what == "list").count();
    assert_eq!(lists, 2, "each session of the tree was asked once");
}
