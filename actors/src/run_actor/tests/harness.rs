//! The fakes the run loop's tests drive a real `RunActor` against: a session actor behind the run's `SessionPort`
//! that records what the run sends it and answers as a session would (approvals and steering as a test scripts
//! them), and a tree's approval actor of a fixed mode.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::PermissionMode;
use troupe_runtime::config::{PermissionsConfig, SandboxConfig};
use troupe_runtime::model::local::{Script, ScriptedModel};
use troupe_runtime::model::{ChatMessage, UserPart};
use troupe_runtime::policy::Policy;
use troupe_runtime::sandbox::Sandbox;

use crate::error::EngineError;
use crate::ports::approval::{
    ListTreeApprovals, PermissionView, ReloadGrants, RespondInTree, TreeMode, TreePermissions,
};
use crate::ports::session::*;
use crate::ports::{ApprovalPort, SessionPort};
use crate::run_actor::{RunActor, RunSetup};
use crate::run_services::RunServices;
use crate::test_support::unexpected_messages;

/// What the run sent its session, in order.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "a test's record of messages: its size does not matter")]
pub enum Seen {
    /// `AppendRunEvent` and `AppendTrackedRunEvent`.
    Event(EventPayload),
    /// `EndToolFreeTurn`: the turn's events and the run's answer.
    ToolFreeTurn {
        final_text: String,
    },
    Approval {
        tool: String,
    },
    PromotePending,
    CancelApprovals,
    Output(String),
}

/// How the fake session answers.
#[derive(Default)]
pub struct SessionScript {
    /// The answer to each approval the run asks for, in order; an approval beyond them is rejected.
    pub approvals: VecDeque<ApprovalOutcome>,
    /// Steering inputs pending at each tool-free turn, in order: a non-empty entry continues the run.
    pub steering: VecDeque<Vec<String>>,
    /// Stop the fake session at the first text delta (the session crashed mid-run).
    pub stop_at_first_delta: bool,
}

pub struct FakeSession {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: SessionScript,
    next_seq: u64,
}

impl FakeSession {
    fn record(&mut self, seen: Seen) -> u64 {
        self.seen.lock().push(seen);
        self.next_seq += 1;
        self.next_seq
    }
}

impl Actor for FakeSession {
    type Context = Context<Self>;
}

impl Handler<AppendRunEvent> for FakeSession {
    type Result = Result<u64, EngineError>;

    fn handle(&mut self, message: AppendRunEvent, ctx: &mut Context<Self>) -> Self::Result {
        if self.script.stop_at_first_delta && matches!(message.payload, EventPayload::TextDelta { .. }) {
            ctx.stop();
        }
        Ok(self.record(Seen::Event(message.payload)))
    }
}

impl Handler<AppendTrackedRunEvent> for FakeSession {
    type Result = Result<TrackedEvent, EngineError>;

    fn handle(&mut self, message: AppendTrackedRunEvent, _: &mut Context<Self>) -> Self::Result {
        let seq = self.record(Seen::Event(message.payload));
        let (durable, receiver) = oneshot::channel();
        let _ = durable.send(Ok(()));
        Ok(TrackedEvent { seq, durable: receiver })
    }
}

impl Handler<WriteBatchNow> for FakeSession {
    type Result = ();

    fn handle(&mut self, _: WriteBatchNow, _: &mut Context<Self>) {}
}

impl Handler<EndToolFreeTurn> for FakeSession {
    type Result = Result<TurnEnd, EngineError>;

    fn handle(&mut self, message: EndToolFreeTurn, _: &mut Context<Self>) -> Self::Result {
        for event in message.events {
            self.record(Seen::Event(event));
        }
        self.record(Seen::ToolFreeTurn { final_text: message.final_text.clone() });
        match self.script.steering.pop_front() {
            Some(inputs) if !inputs.is_empty() => {
                Ok(TurnEnd::Continue(inputs.into_iter().map(crate::ports::session::PromotedInput::text).collect()))
            }
            _ => {
                // As the session does: the run's end is appended with the turn.
                self.record(Seen::Event(EventPayload::RunCompleted { final_text: Some(message.final_text) }));
                Ok(TurnEnd::Completed)
            }
        }
    }
}

impl Handler<RequestApproval> for FakeSession {
    type Result = Result<(String, oneshot::Receiver<ApprovalOutcome>), EngineError>;

    fn handle(&mut self, message: RequestApproval, _: &mut Context<Self>) -> Self::Result {
        self.record(Seen::Approval { tool: message.operation.tool });
        let outcome = self.script.approvals.pop_front().unwrap_or(ApprovalOutcome::Rejected { feedback: None });
        let (answer, receiver) = oneshot::channel();
        let _ = answer.send(outcome);
        Ok((format!("approval-{}", self.next_seq), receiver))
    }
}

impl Handler<PromotePendingInputs> for FakeSession {
    type Result = Result<Vec<crate::ports::session::PromotedInput>, EngineError>;

    fn handle(&mut self, _: PromotePendingInputs, _: &mut Context<Self>) -> Self::Result {
        self.record(Seen::PromotePending);
        Ok(Vec::new())
    }
}

impl Handler<CancelPendingApprovals> for FakeSession {
    type Result = Result<(), EngineError>;

    fn handle(&mut self, _: CancelPendingApprovals, _: &mut Context<Self>) -> Self::Result {
        self.record(Seen::CancelApprovals);
        Ok(())
    }
}

impl Handler<RunOutput> for FakeSession {
    type Result = ();

    fn handle(&mut self, message: RunOutput, _: &mut Context<Self>) {
        self.record(Seen::Output(String::from_utf8_lossy(&message.data).into_owned()));
    }
}

impl Handler<CompactionSourceOfRun> for FakeSession {
    type Result = Result<Option<crate::compaction::CompactionSource>, EngineError>;

    fn handle(&mut self, _: CompactionSourceOfRun, _: &mut Context<Self>) -> Self::Result {
        Ok(None)
    }
}

impl Handler<GetGoal> for FakeSession {
    type Result = Result<Option<troupe_protocol::types::goal::GoalState>, EngineError>;

    fn handle(&mut self, _: GetGoal, _: &mut Context<Self>) -> Self::Result {
        Ok(None)
    }
}

// The messages of the port a run never sends its own session in these tests: each fails loudly.
unexpected_messages!(FakeSession {
    StartRun => Result<String, EngineError>,
    StartDelegatedRun => Result<String, EngineError>,
    CancelActiveRun => Result<bool, EngineError>,
    RespondToApproval => Result<(troupe_protocol::types::approval::ApprovalRecord, Option<troupe_protocol::types::approval::TreeGrant>), EngineError>,
    ListSessionApprovals => Result<Vec<troupe_protocol::types::approval::ApprovalRecord>, EngineError>,
    GetTreeGrants => Result<Vec<troupe_protocol::types::approval::TreeGrant>, EngineError>,
    CommitTreeGrant => Result<(), EngineError>,
    RunHistory => Result<Vec<ChatMessage>, EngineError>,
    UpdateGoalChecklist => Result<troupe_protocol::types::goal::GoalState, EngineError>,
    PrepareGoalRun => Result<Option<GoalRunPlan>, EngineError>,
    StartGoalRun => Result<Option<String>, EngineError>,
});

/// The tree's approval actor: a fixed mode and no grants.
pub struct FakeTree {
    mode: PermissionMode,
}

impl Actor for FakeTree {
    type Context = Context<Self>;
}

impl Handler<TreePermissions> for FakeTree {
    type Result = MessageResult<TreePermissions>;

    fn handle(&mut self, _: TreePermissions, _: &mut Context<Self>) -> Self::Result {
        MessageResult(PermissionView::without_grants(self.mode))
    }
}

impl Handler<TreeMode> for FakeTree {
    type Result = MessageResult<TreeMode>;

    fn handle(&mut self, _: TreeMode, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.mode)
    }
}

impl Handler<ListTreeApprovals> for FakeTree {
    type Result = Result<troupe_protocol::types::approval::ApprovalListResult, EngineError>;

    fn handle(&mut self, _: ListTreeApprovals, _: &mut Context<Self>) -> Self::Result {
        panic!("a run never lists the tree's approvals")
    }
}

impl Handler<RespondInTree> for FakeTree {
    type Result = Result<troupe_protocol::types::approval::ApprovalRecord, EngineError>;

    fn handle(&mut self, _: RespondInTree, _: &mut Context<Self>) -> Self::Result {
        panic!("a run never answers approvals")
    }
}

impl Handler<ReloadGrants> for FakeTree {
    type Result = ();

    fn handle(&mut self, _: ReloadGrants, _: &mut Context<Self>) {}
}

/// A run of `turns` (the scripted model's JSON turns) in `cwd`, as far as the test lets it go.
pub struct TestRun {
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub run: Addr<RunActor>,
    pub session: Addr<FakeSession>,
    pub _data_dir: tempfile::TempDir,
}

pub fn start_run(
    turns: serde_json::Value,
    mode: PermissionMode,
    script: SessionScript,
    cwd: &std::path::Path,
) -> TestRun {
    start_run_on(&["local/scripted"], turns, mode, script, cwd)
}

/// [`start_run`] on the model chain `chain` (`turns` are what `local/scripted` plays).
pub fn start_run_on(
    chain: &[&str],
    turns: serde_json::Value,
    mode: PermissionMode,
    script: SessionScript,
    cwd: &std::path::Path,
) -> TestRun {
    let data_dir = tempfile::tempdir().expect("a data dir");
    let data_path = data_dir.path().canonicalize().expect("the data dir resolves");
    let sandbox = Arc::new(Sandbox::new(&SandboxConfig::default(), &data_path, None));
    let services = RunServices::new(sandbox, Default::default(), PermissionsConfig::default(), Default::default());
    let model_script: Script = serde_json::from_value(serde_json::json!({ "turns": turns })).expect("a valid script");
    services.models.set_scripted(Some(Arc::new(ScriptedModel::new(model_script))));
    let policy = Arc::new(Policy::new(&PermissionsConfig::default(), &[], &data_path).expect("the default policy"));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let session = FakeSession { seen: seen.clone(), script, next_seq: 1 }.start();
    let tree = FakeTree { mode }.start();
    let model_chain: Vec<ModelSelection> =
        chain.iter().map(|model| ModelSelection { model: (*model).into(), variant: None }).collect();
    let model = model_chain[0].clone();
    let setup = RunSetup {
        run_id: "run-1".into(),
        session_id: "session-1".into(),
        session: SessionPort::new(&session),
        approvals: ApprovalPort::new(&tree),
        policy,
        cwd: cwd.to_path_buf(),
        selection: RunSelection { agent: "default".into(), model: model.clone(), preset: None },
        model_chain,
        history: vec![ChatMessage::User { parts: vec![UserPart::Text("do it".into())] }],
        services: Arc::new(services),
        goal_tools: false,
        delegation: None,
    };
    TestRun { seen, run: RunActor::new(setup).start(), session, _data_dir: data_dir }
}

impl TestRun {
    /// Waits (at most 20 s) until the run's actor has stopped, then returns what the session saw.
    pub async fn ended(self) -> Vec<Seen> {
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            while self.run.connected() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the run did not end; the session saw {:#?}", self.seen.lock());
        std::mem::take(&mut *self.seen.lock())
    }
}
