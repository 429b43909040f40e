//! The protocol's methods, each handed to its handler (`engine/<concern>.rs`) or sent here as one actor message.

use troupe_protocol::notification::RuntimeChanged;
use troupe_protocol::server::{ServerContext, ServerProtocol};
use troupe_protocol::types::approval::{
    ApprovalListParams, ApprovalListResult, ApprovalRespondParams, ApprovalRespondResult,
};
use troupe_protocol::types::attachment::{
    SessionAttachmentParams as AttachmentParams, SessionAttachmentResult as AttachmentResult,
    SessionFileParams as FileParams, SessionFileResult as FileResult, SessionFilesParams as FilesParams,
    SessionFilesResult as FilesResult,
};
use troupe_protocol::types::changes::{SessionDiffParams, SessionDiffResult, SessionUndoParams, SessionUndoResult};
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::daemon::{ConsoleLoginCodeResult, DaemonStatusResult};
use troupe_protocol::types::events::{EventsSubscribeParams, EventsSubscribeResult};
use troupe_protocol::types::goal::{GoalGetResult, GoalLifecycleParams, GoalResult, GoalSetParams};
use troupe_protocol::types::presence::SessionPresenceResult;
use troupe_protocol::types::producers::SessionProducersResult;
use troupe_protocol::types::provider::{
    ProviderConnectParams, ProviderConnectResult, ProviderDisconnectParams, ProviderDisconnectResult,
};
use troupe_protocol::types::run::{
    RunCancelResult, RunIdParams, RunRecallSteerResult, RunStartParams, RunStartResult, RunSteerParams, RunSteerResult,
    RunToolStdinParams, RunToolStdinResult,
};
use troupe_protocol::types::runtime::{
    HandshakeParams, HandshakeResult, PROTOCOL_VERSION, RuntimeChangedParams, RuntimeSnapshotGetResult, ServerInfo,
};
use troupe_protocol::types::session::{
    SessionArchiveParams, SessionChildrenResult, SessionCompactParams, SessionCompactResult, SessionCreateParams,
    SessionDeleteResult, SessionForkParams, SessionForkResult, SessionListParams, SessionListResult,
    SessionRenameParams, SessionRenameResult, SessionResult, SessionRevertParams, SessionTreeResult,
    SetPermissionModeParams,
};
use troupe_protocol::types::skills::{SkillsGetParams, SkillsGetResult, SkillsListResult};
use troupe_protocol::types::tool_output::{
    ToolOutputReadParams, ToolOutputReadResult, ToolOutputSubscribeParams, ToolOutputSubscribeResult,
    ToolOutputUnsubscribeParams, ToolOutputUnsubscribeResult, ToolsListResult,
};
use troupe_protocol::types::usage::{
    AgentUsageParams, AgentUsageResult, GlobalUsageResult, SessionTreeUsageResult, SessionUsageResult,
};
use troupe_protocol::{Encoded, RpcError};

use super::Engine;
use crate::error::{EngineError, check_idempotency_key};
use crate::runtime_actor::{
    ConnectProvider, DisconnectProvider, GetSnapshot, RegisterConnection, UnregisterConnection,
};
use crate::session_actor::{CancelActiveRun, GetMeta, RecallSteer, Subscribe};
use crate::session_supervisor::{GetTree, ListChildren, SetPermissionMode};

impl ServerProtocol for Engine {
    fn connected(&self, _connection_id: u64) {
        self.status.connected();
    }

    fn disconnected(&self, connection_id: u64) {
        self.status.disconnected();
        self.runtime.do_send(UnregisterConnection { connection_id });
        self.presence.do_send(crate::presence_actor::ConnectionClosed { connection_id });
    }

    fn forwarder(&self) -> Option<std::sync::Arc<dyn troupe_protocol::server::RequestForwarder>> {
        self.forwarder.get().cloned()
    }

    fn connection_label(&self, connection_id: u64) -> String {
        crate::presence_actor::connection_label(connection_id, self.node.as_deref())
    }

    async fn handshake(&self, ctx: &ServerContext, _: HandshakeParams) -> Result<HandshakeResult, RpcError> {
        let snapshot = self
            .runtime
            .send(RegisterConnection { notifier: ctx.connection_notifier() })
            .await
            .map_err(|_| RpcError::from(EngineError::ShuttingDown))?;
        ctx.notify_after_reply::<RuntimeChanged>(&RuntimeChangedParams {
            previous_revision: None,
            snapshot,
            reasons: vec!["startup".to_owned()],
        });
        Ok(HandshakeResult {
            protocol_version: PROTOCOL_VERSION,
            server: ServerInfo { name: "troupe".to_owned(), version: env!("CARGO_PKG_VERSION").to_owned() },
        })
    }

    async fn runtime_snapshot_get(&self, _: &ServerContext, _: Empty) -> Result<RuntimeSnapshotGetResult, RpcError> {
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| RpcError::from(EngineError::ShuttingDown))?;
        Ok(RuntimeSnapshotGetResult { snapshot })
    }

    async fn session_create(&self, _: &ServerContext, params: SessionCreateParams) -> Result<SessionResult, RpcError> {
        self.create_session(params).await
    }

    async fn session_list(&self, _: &ServerContext, params: SessionListParams) -> Result<SessionListResult, RpcError> {
        self.list_sessions(params).await
    }

    async fn session_get(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<Encoded<SessionResult>, RpcError> {
        self.get_session(params).await
    }

    async fn session_resume(&self, _: &ServerContext, params: SessionIdParams) -> Result<SessionResult, RpcError> {
        let session = self.ask_session(&params.session_id, || GetMeta).await?;
        Ok(SessionResult { session })
    }

    async fn session_rename(
        &self,
        _: &ServerContext,
        params: SessionRenameParams,
    ) -> Result<SessionRenameResult, RpcError> {
        self.rename_session(params).await
    }

    async fn session_children(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionChildrenResult, RpcError> {
        let children = self.supervisor_ask(ListChildren { session_id: params.session_id }).await??;
        Ok(SessionChildrenResult { children })
    }

    async fn session_tree(&self, _: &ServerContext, params: SessionIdParams) -> Result<SessionTreeResult, RpcError> {
        let (tree, mode) = self.supervisor_ask(GetTree { session_id: params.session_id }).await??;
        Ok(SessionTreeResult { tree, permission_mode: Some(mode) })
    }

    async fn session_set_permission_mode(
        &self,
        _: &ServerContext,
        params: SetPermissionModeParams,
    ) -> Result<Empty, RpcError> {
        self.supervisor_ask(SetPermissionMode { session_id: params.session_id, mode: params.mode }).await??;
        Ok(Empty {})
    }

    async fn session_presence(
        &self,
        ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionPresenceResult, RpcError> {
        self.watch_presence(ctx, params).await
    }

    async fn session_presence_unsubscribe(
        &self,
        ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<Empty, RpcError> {
        self.unwatch_presence(ctx, params).await
    }

    async fn approval_list(
        &self,
        _: &ServerContext,
        params: ApprovalListParams,
    ) -> Result<ApprovalListResult, RpcError> {
        self.list_approvals(params).await
    }

    async fn approval_respond(
        &self,
        ctx: &ServerContext,
        params: ApprovalRespondParams,
    ) -> Result<ApprovalRespondResult, RpcError> {
        self.respond_to_approval(ctx, params).await
    }

    async fn skills_list(&self, _: &ServerContext, params: SessionIdParams) -> Result<SkillsListResult, RpcError> {
        self.list_skills(params).await
    }

    async fn skills_get(&self, _: &ServerContext, params: SkillsGetParams) -> Result<SkillsGetResult, RpcError> {
        self.get_skill(params).await
    }

    async fn events_subscribe(
        &self,
        ctx: &ServerContext,
        params: EventsSubscribeParams,
    ) -> Result<EventsSubscribeResult, RpcError> {
        // The reply carries at most one page of events; building it counts against the connection's budget,
        // so many pipelined subscribes build a few replies at a time.
        // Fails when the connection closed meanwhile (nobody would read the reply) or when a batch's subscribes
        // together would exceed the budget.
        ctx.reserve_reply_bytes(self.replay_page_bytes).await?;
        let local = self
            .ask_session(&params.session_id, || Subscribe {
                sink: ctx.event_sink(&params.session_id),
                cursor: params.cursor,
            })
            .await;
        let result = match local {
            // In a cluster, another node's session is followed from JetStream here (`engine/remote_follow.rs`).
            Err(refused @ EngineError::SessionHostedElsewhere { .. }) => {
                self.subscribe_remote(ctx, &params, refused).await?
            }
            local => local?,
        };
        // Before the reply: a client that sees it and asks for the presence list finds itself in it.
        self.presence
            .do_send(crate::presence_actor::Subscribed { session_id: params.session_id, connection: ctx.connection() });
        Ok(result)
    }

    async fn tool_output_read(
        &self,
        _: &ServerContext,
        params: ToolOutputReadParams,
    ) -> Result<ToolOutputReadResult, RpcError> {
        self.read_tool_output(params).await
    }

    async fn tools_list(&self, _: &ServerContext, _: Empty) -> Result<ToolsListResult, RpcError> {
        Ok(ToolsListResult { tools: self.services.tool_descriptors() })
    }

    async fn tool_output_subscribe(
        &self,
        ctx: &ServerContext,
        params: ToolOutputSubscribeParams,
    ) -> Result<ToolOutputSubscribeResult, RpcError> {
        self.subscribe_tool_output(ctx, params).await
    }

    async fn tool_output_unsubscribe(
        &self,
        ctx: &ServerContext,
        params: ToolOutputUnsubscribeParams,
    ) -> Result<ToolOutputUnsubscribeResult, RpcError> {
        self.unsubscribe_tool_output(ctx, params)
    }

    async fn provider_connect(
        &self,
        _: &ServerContext,
        params: ProviderConnectParams,
    ) -> Result<ProviderConnectResult, RpcError> {
        check_idempotency_key("client_connect_id", &params.client_connect_id)?;
        Ok(self.runtime.send(ConnectProvider { params }).await.map_err(|_| EngineError::ShuttingDown)??)
    }

    async fn provider_disconnect(
        &self,
        _: &ServerContext,
        params: ProviderDisconnectParams,
    ) -> Result<ProviderDisconnectResult, RpcError> {
        check_idempotency_key("client_request_id", &params.client_request_id)?;
        Ok(self.runtime.send(DisconnectProvider { params }).await.map_err(|_| EngineError::ShuttingDown)??)
    }

    async fn run_start(&self, _: &ServerContext, params: RunStartParams) -> Result<RunStartResult, RpcError> {
        self.start_run(params).await
    }

    async fn run_steer(&self, _: &ServerContext, params: RunSteerParams) -> Result<RunSteerResult, RpcError> {
        self.steer_run(params).await
    }

    async fn run_recall_steer(&self, _: &ServerContext, params: RunIdParams) -> Result<RunRecallSteerResult, RpcError> {
        let session_id = self.session_of_run(&params.run_id).await?;
        let recalled = self.ask_session(&session_id, || RecallSteer { run_id: params.run_id.clone() }).await?;
        Ok(RunRecallSteerResult { recalled })
    }

    async fn run_cancel(&self, _: &ServerContext, params: RunIdParams) -> Result<RunCancelResult, RpcError> {
        let session_id = self.session_of_run(&params.run_id).await?;
        let cancelled = self.ask_session(&session_id, || CancelActiveRun { run_id: params.run_id.clone() }).await?;
        Ok(RunCancelResult { cancelled })
    }

    async fn session_producers(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionProducersResult, RpcError> {
        Ok(self.producers_of(&params.session_id).await?)
    }

    async fn session_compact(
        &self,
        _: &ServerContext,
        params: SessionCompactParams,
    ) -> Result<SessionCompactResult, RpcError> {
        self.compact(params).await
    }

    async fn session_revert(&self, _: &ServerContext, params: SessionRevertParams) -> Result<SessionResult, RpcError> {
        self.revert(params).await
    }

    async fn session_fork(&self, _: &ServerContext, params: SessionForkParams) -> Result<SessionForkResult, RpcError> {
        self.fork(params).await
    }

    async fn session_goal_get(&self, _: &ServerContext, params: SessionIdParams) -> Result<GoalGetResult, RpcError> {
        self.goal_get(params).await
    }

    async fn session_goal_set(&self, _: &ServerContext, params: GoalSetParams) -> Result<GoalResult, RpcError> {
        self.goal_set(params).await
    }

    async fn session_goal_lifecycle(
        &self,
        _: &ServerContext,
        params: GoalLifecycleParams,
    ) -> Result<GoalResult, RpcError> {
        self.goal_lifecycle(params).await
    }

    async fn session_usage(&self, _: &ServerContext, params: SessionIdParams) -> Result<SessionUsageResult, RpcError> {
        self.usage_of_session(params).await
    }

    async fn agent_usage(&self, _: &ServerContext, params: AgentUsageParams) -> Result<AgentUsageResult, RpcError> {
        self.usage_of_agent(params).await
    }

    async fn usage_global(&self, _: &ServerContext, _: Empty) -> Result<GlobalUsageResult, RpcError> {
        self.usage_of_everything().await
    }

    async fn session_tree_usage(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionTreeUsageResult, RpcError> {
        self.usage_of_tree(params).await
    }

    async fn session_archive(
        &self,
        _: &ServerContext,
        params: SessionArchiveParams,
    ) -> Result<SessionResult, RpcError> {
        self.archive_session(params).await
    }

    async fn session_delete(
        &self,
        _: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionDeleteResult, RpcError> {
        self.delete_session(params).await
    }

    async fn session_attachment(&self, _: &ServerContext, p: AttachmentParams) -> Result<AttachmentResult, RpcError> {
        self.read_attachment(p).await
    }

    async fn session_files(&self, _: &ServerContext, p: FilesParams) -> Result<FilesResult, RpcError> {
        self.list_cwd_files(p).await
    }

    async fn session_file(&self, _: &ServerContext, p: FileParams) -> Result<FileResult, RpcError> {
        self.read_cwd_file(p).await
    }

    async fn session_diff(&self, _: &ServerContext, params: SessionDiffParams) -> Result<SessionDiffResult, RpcError> {
        self.diff_changes(params).await
    }

    async fn session_undo(&self, _: &ServerContext, params: SessionUndoParams) -> Result<SessionUndoResult, RpcError> {
        self.undo_changes(params).await
    }

    async fn daemon_status(&self, _: &ServerContext, _: Empty) -> Result<DaemonStatusResult, RpcError> {
        self.daemon_status_now().await
    }

    async fn console_login_code(&self, context: &ServerContext, _: Empty) -> Result<ConsoleLoginCodeResult, RpcError> {
        self.console_login_code_now(context.authority()).await
    }

    async fn run_tool_stdin(
        &self,
        _: &ServerContext,
        params: RunToolStdinParams,
    ) -> Result<RunToolStdinResult, RpcError> {
        self.tool_stdin(params).await
    }
}
