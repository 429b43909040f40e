//! Requests a ready plugin sends the daemon: `plugin/emit`, `plugin/recovery/complete`, `plugin/ping` and the
//! producer requests. Each is checked in the host's turn (parameters, limits) and answered by a future that
//! does the rest, so the host never waits on a session.

use std::time::Instant;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use troupe_protocol::RpcError;
use troupe_protocol::types::plugin::{
    ExtensionRecoveryCompleteParams, ExtensionRecoveryStatus, PluginEmitParams, PluginEmitResult, methods,
};

use super::host::PluginHost;
use super::limits::{EmitRefusal, check_shape};
use crate::error::EngineError;
use crate::session_actor::EmitPluginEvent;

type Answer = BoxFuture<'static, Result<Value, RpcError>>;

fn ready(answer: Result<Value, RpcError>) -> Answer {
    Box::pin(futures::future::ready(answer))
}

pub(super) fn parse<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|error| {
        RpcError::from(EngineError::InvalidPluginParams { method: method.to_owned(), detail: error.to_string() })
    })
}

fn refusal(refusal: EmitRefusal) -> RpcError {
    RpcError::from(EngineError::EmitRefused(refusal))
}

/// Answers one request of the plugin of `generation`.
pub(super) fn handle(host: &mut PluginHost, generation: u64, method: &str, params: Value) -> Answer {
    match method {
        methods::EMIT => emit(host, params),
        methods::RECOVERY_COMPLETE => match parse::<ExtensionRecoveryCompleteParams>(method, params) {
            Ok(params) => {
                let ok = params.outcome.status == ExtensionRecoveryStatus::Ready;
                host.recovery_completed(generation, ok, params.outcome.detail.as_deref());
                ready(Ok(json!({})))
            }
            Err(error) => ready(Err(error)),
        },
        methods::PING => ready(Ok(json!({}))),
        methods::PRODUCER_REGISTER
        | methods::PRODUCER_SEND
        | methods::PRODUCER_DISCARD
        | methods::PRODUCER_UNREGISTER => super::producers::handle(host, method, params),
        other => ready(Err(EngineError::UnknownPluginMethod { method: other.to_owned() }.into())),
    }
}

fn emit(host: &mut PluginHost, params: Value) -> Answer {
    let params: PluginEmitParams = match parse(methods::EMIT, params) {
        Ok(params) => params,
        Err(error) => return ready(Err(error)),
    };
    let bytes = serde_json::to_string(&params.payload).map(|text| text.len()).unwrap_or(usize::MAX);
    if let Err(refused) =
        check_shape(&params.name, bytes).and_then(|()| host.limiter.admit(&params.session_id, bytes, Instant::now()))
    {
        tracing::debug!(plugin = %host.name(), %refused, "plugin/emit refused");
        return ready(Err(refusal(refused)));
    }
    let sessions = host.context.sessions.clone();
    let plugin = host.name().to_owned();
    Box::pin(async move {
        let PluginEmitParams { session_id, name, payload, .. } = params;
        let seq = sessions
            .ask(&session_id, || EmitPluginEvent {
                plugin: plugin.clone(),
                name: name.clone(),
                payload: payload.clone(),
            })
            .await
            .map_err(RpcError::from)?;
        Ok(serde_json::to_value(PluginEmitResult { seq }).unwrap_or_default())
    })
}
