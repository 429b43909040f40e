//! The method and notification tables: every JSON-RPC method of protocol 20 declared once.
//!
//! From the one table below come the marker types (`method::SessionGet` with its `NAME`, params and result),
//! the [`ServerProtocol`](crate::server::ServerProtocol) trait with one handler per method, the
//! [`ClientProtocol`] trait with one typed call per method, the server's dispatcher, the list of method names,
//! and the JSON Schema of the whole protocol. A method added here is
//! routed everywhere at once; a handler the engine has not implemented answers `not_implemented`.

use crate::jsonrpc::{Method, Notification};
use crate::types::approval::*;
use crate::types::attachment::*;
use crate::types::changes::*;
use crate::types::common::*;
use crate::types::daemon::*;
use crate::types::events::*;
use crate::types::goal::*;
use crate::types::plugin::*;
use crate::types::presence::*;
use crate::types::producers::*;
use crate::types::provider::*;
use crate::types::run::*;
use crate::types::runtime::*;
use crate::types::session::*;
use crate::types::skills::*;
use crate::types::tool_output::*;
use crate::types::usage::*;

/// The type a server handler returns: the method's result, or, for a method marked `[encoded]` in the table, an
/// [`Encoded`](crate::Encoded) result (the same JSON, encoded once and shared by many replies).
macro_rules! served {
    ($result:ty) => {
        $result
    };
    ($result:ty, encoded) => {
        crate::Encoded<$result>
    };
}

macro_rules! protocol_methods {
    ($( $(#[doc = $doc:literal])* $marker:ident, $handler:ident, $name:literal, $params:ty => $result:ty
        $([$served:ident])? $(, secrets = $secrets:literal)?; )+) => {
        /// One marker type per method, implementing [`Method`].
        pub mod method {
            use super::*;
            $(
                $(#[doc = $doc])*
                #[derive(Debug, Clone, Copy)]
                pub struct $marker;
                impl Method for $marker {
                    const NAME: &'static str = $name;
                    type Params = $params;
                    type Result = $result;
                    $(const CARRIES_SECRETS: bool = $secrets;)?
                }
            )+
        }

        /// Every method name, in table order.
        pub const METHOD_NAMES: &[&str] = &[$($name),+];

        /// The table's own name equal to `name`, when it is one of the table's.
        pub fn table_name(name: &str) -> Option<&'static str> {
            METHOD_NAMES.iter().copied().find(|known| *known == name)
        }

        /// The server contract: one handler per method, returning the method's result (or, where the table marks
        /// the method `[encoded]`, an [`Encoded`](crate::Encoded) result shared by many replies). A handler that
        /// is not overridden answers -32000
        /// `not_implemented` naming its method.
        pub trait ServerProtocol: Send + Sync + 'static {
            /// A connection was accepted (before its handshake).
            fn connected(&self, connection_id: u64) {
                let _ = connection_id;
            }

            /// A connection is gone; its sinks already report closed.
            fn disconnected(&self, connection_id: u64) {
                let _ = connection_id;
            }

            /// Where a request refused with `session_hosted_elsewhere` is sent on to the node hosting its
            /// session (see [`forward`](crate::server::RequestForwarder)). `None`, the default, answers the
            /// refusal as it is; it is asked only after such a refusal, so a single node pays nothing for it.
            fn forwarder(&self) -> Option<std::sync::Arc<dyn crate::server::RequestForwarder>> {
                None
            }

            /// The name a connection goes by where others see it (`connection-<n>`; a cluster node adds
            /// `@<node>`): in presence lists, an approval's `answered_by`, and as the `caller` of the requests it
            /// forwards.
            fn connection_label(&self, connection_id: u64) -> String {
                format!("connection-{connection_id}")
            }

            $(
                $(#[doc = $doc])*
                fn $handler(
                    &self,
                    ctx: &crate::server::ServerContext,
                    params: $params,
                ) -> impl std::future::Future<Output = Result<served!($result $(, $served)?), crate::error::RpcError>> + Send {
                    let _ = (ctx, params);
                    std::future::ready(Err(crate::error::RpcError::not_implemented($name)))
                }
            )+
        }

        /// The client contract (`ClientProtocol` in the reference), implemented by the shared
        /// [`Client`](crate::client::Client): one typed call per method of this table, each a
        /// [`call`](ClientProtocol::call) of its marker, plus following a session and closing. The deliveries
        /// of a followed session come out of the implementation's [`DeliveryStream`](crate::client::DeliveryStream).
        ///
        /// `handshake` and `events_subscribe` are here because the table has them, but a client performs the
        /// handshake when it connects and follows sessions with [`subscribe`](ClientProtocol::subscribe): a bare
        /// `events_subscribe` returns the reply without the client following the session.
        pub trait ClientProtocol: Send + Sync {
            /// The ordered stream of what the daemon sends besides replies.
            type Deliveries: crate::client::DeliveryStream;

            /// Calls `M` and decodes its result.
            fn call<M: Method>(
                &self,
                params: M::Params,
            ) -> impl std::future::Future<Output = Result<M::Result, crate::client::ClientError>> + Send;

            /// Follows a session from `cursor` (the last `seq` the caller has; `None` for the whole history):
            /// its replay and then its live events come out of the deliveries. Returns the reply's `last_seq`.
            fn subscribe(
                &self,
                session_id: &str,
                cursor: Option<u64>,
            ) -> impl std::future::Future<Output = Result<u64, crate::client::ClientError>> + Send;

            /// Ends the connection; outstanding and later calls fail.
            fn close(&self) -> impl std::future::Future<Output = ()> + Send;

            $(
                $(#[doc = $doc])*
                fn $handler(
                    &self,
                    params: $params,
                ) -> impl std::future::Future<Output = Result<$result, crate::client::ClientError>> + Send {
                    self.call::<method::$marker>(params)
                }
            )+
        }

        /// Decodes params, calls the handler, and encodes its result once, straight into the response to `id`
        /// (`None` for a notification, whose result is not encoded).
        pub(crate) async fn dispatch<S: ServerProtocol>(
            server: &S,
            ctx: &crate::server::ServerContext,
            method: &str,
            params: Option<&serde_json::value::RawValue>,
            id: Option<&crate::jsonrpc::RawId>,
        ) -> Result<Option<String>, crate::error::RpcError> {
            match method {
                $(
                    $name => {
                        let params: $params = crate::jsonrpc::decode_params($name, params)?;
                        // Each method's work in an allocation of its own size: inline, the dispatch (and with it
                        // every frame's future, which the gateway boxes) would be as large as the largest method's,
                        // several KiB, allocated and touched for every request (docs/performance.md, figure 4).
                        let result = Box::pin(server.$handler(ctx, params)).await?;
                        id.map(|id| crate::jsonrpc::encode_result_for(id, &result)).transpose()
                    }
                )+
                other => Err(crate::error::RpcError::method_not_found(other)),
            }
        }

        /// JSON Schema of every method's params and result, keyed by method name.
        pub fn methods_schema(generator: &mut schemars::SchemaGenerator) -> serde_json::Map<String, serde_json::Value> {
            let mut methods = serde_json::Map::new();
            $(
                methods.insert($name.to_owned(), serde_json::json!({
                    "params": generator.subschema_for::<$params>(),
                    "result": generator.subschema_for::<$result>(),
                }));
            )+
            methods
        }
    };
}

macro_rules! protocol_notifications {
    ($( $(#[doc = $doc:literal])* $marker:ident, $name:literal, $params:ty; )+) => {
        /// One marker type per server-to-client notification, implementing [`Notification`].
        pub mod notification {
            use super::*;
            $(
                $(#[doc = $doc])*
                #[derive(Debug, Clone, Copy)]
                pub struct $marker;
                impl Notification for $marker {
                    const NAME: &'static str = $name;
                    type Params = $params;
                }
            )+
        }

        /// Every notification name, in table order.
        pub const NOTIFICATION_NAMES: &[&str] = &[$($name),+];

        /// JSON Schema of every notification's params, keyed by name.
        pub fn notifications_schema(generator: &mut schemars::SchemaGenerator) -> serde_json::Map<String, serde_json::Value> {
            let mut notifications = serde_json::Map::new();
            $(
                notifications.insert($name.to_owned(), serde_json::json!({
                    "params": generator.subschema_for::<$params>(),
                }));
            )+
            notifications
        }
    };
}

protocol_methods! {
    /// Must be the first call: `{protocol_version: 20}`.
    Handshake, handshake, "handshake", HandshakeParams => HandshakeResult;
    /// One coherent runtime snapshot.
    RuntimeSnapshotGet, runtime_snapshot_get, "runtime.snapshot.get", Empty => RuntimeSnapshotGetResult;
    /// Store credentials for a provider.
    ProviderConnect, provider_connect, "provider.connect", ProviderConnectParams => ProviderConnectResult, secrets = true;
    /// Forget a provider's credentials.
    ProviderDisconnect, provider_disconnect, "provider.disconnect", ProviderDisconnectParams => ProviderDisconnectResult;
    /// Create a root session.
    SessionCreate, session_create, "session.create", SessionCreateParams => SessionResult;
    /// Root sessions, optionally filtered by cwd.
    SessionList, session_list, "session.list", SessionListParams => SessionListResult;
    /// One session's metadata.
    SessionGet, session_get, "session.get", SessionIdParams => SessionResult [encoded];
    /// The session's goal, or null.
    SessionGoalGet, session_goal_get, "session.goal.get", SessionIdParams => GoalGetResult;
    /// Activate a goal on a root session.
    SessionGoalSet, session_goal_set, "session.goal.set", GoalSetParams => GoalResult;
    /// Pause, resume or cancel the goal.
    SessionGoalLifecycle, session_goal_lifecycle, "session.goal.lifecycle", GoalLifecycleParams => GoalResult;
    /// Runtime producers and plugin recovery state.
    SessionProducers, session_producers, "session.producers", SessionIdParams => SessionProducersResult;
    /// Token and request rollup of one session.
    SessionUsage, session_usage, "session.usage", SessionIdParams => SessionUsageResult;
    /// Rollup across turns attributed to one agent.
    AgentUsage, agent_usage, "agent.usage", AgentUsageParams => AgentUsageResult;
    /// Rollup across all sessions.
    UsageGlobal, usage_global, "usage.global", Empty => GlobalUsageResult;
    /// Rollup of a session and every delegated session below it.
    SessionTreeUsage, session_tree_usage, "session.tree_usage", SessionIdParams => SessionTreeUsageResult;
    /// troupe extension: archive a root session (hidden from `session.list`) or bring it back.
    SessionArchive, session_archive, "session.archive", SessionArchiveParams => SessionResult;
    /// troupe extension: delete a root session and its whole tree, on disk and in every index.
    SessionDelete, session_delete, "session.delete", SessionIdParams => SessionDeleteResult;
    /// troupe extension: a run's file changes as unified diffs (the session's last run that changed files by default).
    SessionDiff, session_diff, "session.diff", SessionDiffParams => SessionDiffResult;
    /// troupe extension: put back the files a run changed as they were before it.
    SessionUndo, session_undo, "session.undo", SessionUndoParams => SessionUndoResult;
    /// troupe extension: the bytes of a file an input attached (`attachments[].path`), to show it.
    SessionAttachment, session_attachment, "session.attachment", SessionAttachmentParams => SessionAttachmentResult;
    /// troupe extension: a folder of the session's cwd, for completing `@path`.
    SessionFiles, session_files, "session.files", SessionFilesParams => SessionFilesResult;
    /// troupe extension: an image or a PDF of the session's cwd, read to attach it.
    SessionFile, session_file, "session.file", SessionFileParams => SessionFileResult;
    /// troupe extension: what the daemon is doing now (uptime, connections, sessions, runs, approvals).
    DaemonStatus, daemon_status, "daemon.status", Empty => DaemonStatusResult;
    /// troupe extension: a one-time sign-in code for the web console (`troupe open`), short-lived and single use.
    ConsoleLoginCode, console_login_code, "console.login_code", Empty => ConsoleLoginCodeResult;
    /// Direct children of a session.
    SessionChildren, session_children, "session.children", SessionIdParams => SessionChildrenResult;
    /// The recursive tree below a session.
    SessionTree, session_tree, "session.tree", SessionIdParams => SessionTreeResult;
    /// Load a session and return its metadata.
    SessionResume, session_resume, "session.resume", SessionIdParams => SessionResult;
    /// Set, clear or reset the title; idempotent by `client_rename_id`.
    SessionRename, session_rename, "session.rename", SessionRenameParams => SessionRenameResult;
    /// Set the runtime-only permission mode of a whole session tree.
    SessionSetPermissionMode, session_set_permission_mode, "session.set_permission_mode", SetPermissionModeParams => Empty;
    /// troupe extension: the connections subscribed to a session's events, then `session.presence_changed` to
    /// this connection whenever they change.
    SessionPresence, session_presence, "session.presence", SessionIdParams => SessionPresenceResult;
    /// troupe extension: stop this connection's `session.presence_changed` for a session.
    SessionPresenceUnsubscribe, session_presence_unsubscribe, "session.presence_unsubscribe", SessionIdParams => Empty;
    /// Discovered skills.
    SkillsList, skills_list, "skills.list", SessionIdParams => SkillsListResult;
    /// A rendered, permission-checked skill preview.
    SkillsGet, skills_get, "skills.get", SkillsGetParams => SkillsGetResult;
    /// Compact the session's context into a checkpoint.
    SessionCompact, session_compact, "session.compact", SessionCompactParams => SessionCompactResult;
    /// Revert the visible branch to a prefix of the log.
    SessionRevert, session_revert, "session.revert", SessionRevertParams => SessionResult;
    /// Copy a prefix of the log into a new session.
    SessionFork, session_fork, "session.fork", SessionForkParams => SessionForkResult;
    /// Start a run; idempotent by `client_run_id`.
    RunStart, run_start, "run.start", RunStartParams => RunStartResult;
    /// Queue input for the active run.
    RunSteer, run_steer, "run.steer", RunSteerParams => RunSteerResult;
    /// Take back the newest pending steer.
    RunRecallSteer, run_recall_steer, "run.recall_steer", RunIdParams => RunRecallSteerResult;
    /// Cancel a run.
    RunCancel, run_cancel, "run.cancel", RunIdParams => RunCancelResult;
    /// Write to a running tool's stdin.
    RunToolStdin, run_tool_stdin, "run.tool_stdin", RunToolStdinParams => RunToolStdinResult;
    /// Stored events after a cursor, then live notifications.
    EventsSubscribe, events_subscribe, "events.subscribe", EventsSubscribeParams => EventsSubscribeResult;
    /// The tools runs are offered, with the output channels each streams.
    ToolsList, tools_list, "tools.list", Empty => ToolsListResult;
    /// Bytes of a loud tool call's stored whole output (`PersistedToolResult.output_ref`).
    ToolOutputRead, tool_output_read, "tool_output.read", ToolOutputReadParams => ToolOutputReadResult;
    /// One tool call's output to this connection, under a name the client chose, from a byte offset.
    ToolOutputSubscribe, tool_output_subscribe, "tool_output.subscribe", ToolOutputSubscribeParams => ToolOutputSubscribeResult;
    /// End a named tool-output subscription.
    ToolOutputUnsubscribe, tool_output_unsubscribe, "tool_output.unsubscribe", ToolOutputUnsubscribeParams => ToolOutputUnsubscribeResult;
    /// Approval records and tree grants of a root session's tree.
    ApprovalList, approval_list, "approval.list", ApprovalListParams => ApprovalListResult;
    /// Answer a pending approval.
    ApprovalRespond, approval_respond, "approval.respond", ApprovalRespondParams => ApprovalRespondResult;
}

protocol_notifications! {
    /// The runtime snapshot changed.
    RuntimeChanged, "runtime.changed", RuntimeChangedParams;
    /// One stored event, or a gap.
    EventsSubscription, "events.subscription", EventsSubscriptionParams;
    /// A session-scoped, non-durable plugin event.
    EventsPlugin, "events.plugin", PluginEventParams;
    /// Retained output of a running tool, for late or lagging subscribers.
    ToolOutputSnapshot, "events.tool_output_snapshot", ToolOutputSnapshotParams;
    /// New bytes of a running tool's output.
    ToolOutputDelta, "events.tool_output_delta", ToolOutputDeltaParams;
    /// The subscriber missed output bytes.
    ToolOutputGap, "events.tool_output_gap", ToolOutputGapParams;
    /// A named tool-output subscription ended: its call ended and its output was offered.
    ToolOutputEnd, "events.tool_output_end", ToolOutputEndParams;
    /// troupe extension: the connections subscribed to a session changed (sent only to those that called
    /// `session.presence`).
    SessionPresenceChanged, "session.presence_changed", SessionPresenceChangedParams;
}
