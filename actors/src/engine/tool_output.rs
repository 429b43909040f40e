//! `tool_output.read`: bytes of a loud tool call's stored whole output (`PersistedToolResult.output_ref`); and
//! `tool_output.subscribe`/`tool_output.unsubscribe`, named subscriptions to one call's live output (served by the
//! session actor, `session_actor::named_output`, or in a cluster, for a session another node hosts, by this node:
//! `engine::remote_named_follow`; the connection keeps the sinks and bounds their number).
//!
//! The session is looked up in the supervisor's index (an unknown id is `session_not_found`, and only a known id,
//! a UUID, becomes a path); the file is read on a blocking thread, at most
//! [`MAX_TOOL_OUTPUT_READ_BYTES`] a call. The session's actor is not involved: a stored output is complete and
//! immutable once a result names it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use troupe_protocol::RpcError;
use troupe_protocol::server::{OutputSinkRefused, ServerContext};
use troupe_protocol::types::tool_output::{
    MAX_TOOL_OUTPUT_READ_BYTES, MAX_TOOL_OUTPUT_SUBSCRIPTIONS, ToolOutputReadParams, ToolOutputReadResult,
    ToolOutputSubscribeParams, ToolOutputSubscribeResult, ToolOutputUnsubscribeParams, ToolOutputUnsubscribeResult,
    is_output_ref, is_subscription_id,
};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::stored_output::{StoredOutputError, read_stored_output};

use super::Engine;
use crate::error::EngineError;
use crate::session_actor::SubscribeToolOutput;
use crate::session_supervisor::IndexedMeta;

impl Engine {
    pub(super) async fn read_tool_output(
        &self,
        params: ToolOutputReadParams,
    ) -> Result<ToolOutputReadResult, RpcError> {
        if !is_output_ref(&params.output_ref) {
            return Err(EngineError::InvalidOutputRef { output_ref: params.output_ref }.into());
        }
        self.supervisor_ask(IndexedMeta { session_id: params.session_id.clone() }).await??;
        let session_dir = DataDir::new(self.services.data_dir.clone()).session_dir(&params.session_id);
        let limit = params.limit.unwrap_or(MAX_TOOL_OUTPUT_READ_BYTES).min(MAX_TOOL_OUTPUT_READ_BYTES);
        let (output_ref, stream, offset) = (params.output_ref.clone(), params.stream, params.offset);
        let read =
            tokio::task::spawn_blocking(move || read_stored_output(&session_dir, &output_ref, stream, offset, limit))
                .await
                .map_err(|error| EngineError::Internal { detail: format!("reading a stored output: {error}") })?;
        let read = match read {
            Ok(read) => read,
            Err(StoredOutputError::MalformedRef) => {
                return Err(EngineError::InvalidOutputRef { output_ref: params.output_ref }.into());
            }
            Err(StoredOutputError::NotFound) => {
                let ToolOutputReadParams { session_id, output_ref, .. } = params;
                return Err(EngineError::OutputRefNotFound { session_id, output_ref }.into());
            }
            Err(StoredOutputError::Io(error)) => {
                return Err(EngineError::Internal { detail: format!("reading a stored output: {error}") }.into());
            }
        };
        let next_offset = params.offset + read.data.len() as u64;
        Ok(ToolOutputReadResult {
            data: BASE64.encode(&read.data),
            offset: params.offset,
            next_offset,
            eof: next_offset >= read.stored_bytes,
            stored_bytes: read.stored_bytes,
            total_bytes: read.total_bytes,
        })
    }

    pub(super) async fn subscribe_tool_output(
        &self,
        ctx: &ServerContext,
        params: ToolOutputSubscribeParams,
    ) -> Result<ToolOutputSubscribeResult, RpcError> {
        if !is_subscription_id(&params.subscription_id) {
            return Err(EngineError::InvalidSubscriptionId { subscription_id: params.subscription_id }.into());
        }
        let subscription_id = params.subscription_id.clone();
        let sink = match ctx.output_sink(&subscription_id, MAX_TOOL_OUTPUT_SUBSCRIPTIONS) {
            Ok(sink) => sink,
            Err(OutputSinkRefused::TooMany { limit }) => {
                return Err(EngineError::TooManyToolOutputSubscriptions { limit }.into());
            }
            Err(OutputSinkRefused::Closed) => {
                return Err(EngineError::Internal { detail: "the connection closed".into() }.into());
            }
        };
        let subscribed = self
            .ask_session(&params.session_id, || SubscribeToolOutput {
                sink: sink.clone(),
                subscription_id: subscription_id.clone(),
                tool_call_id: params.tool_call_id.clone(),
                stream: params.stream,
                from_offset: params.from_offset,
            })
            .await;
        let subscribed = match subscribed {
            // In a cluster, another node's session is served here (`engine/remote_named_follow.rs`).
            Err(refused @ EngineError::SessionHostedElsewhere { .. }) => {
                self.subscribe_remote_tool_output(sink, params, refused).await
            }
            subscribed => subscribed,
        };
        match subscribed {
            Ok(running) => Ok(ToolOutputSubscribeResult { subscription_id, running }),
            Err(error) => {
                // The refused subscription must not hold a slot of the connection's bound.
                ctx.end_output_sink(&subscription_id);
                Err(error.into())
            }
        }
    }

    pub(super) fn unsubscribe_tool_output(
        &self,
        ctx: &ServerContext,
        params: ToolOutputUnsubscribeParams,
    ) -> Result<ToolOutputUnsubscribeResult, RpcError> {
        if !is_subscription_id(&params.subscription_id) {
            return Err(EngineError::InvalidSubscriptionId { subscription_id: params.subscription_id }.into());
        }
        Ok(ToolOutputUnsubscribeResult { unsubscribed: ctx.end_output_sink(&params.subscription_id) })
    }
}
