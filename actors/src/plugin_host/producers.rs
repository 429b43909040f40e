//! Producer messaging for plugins: `plugin/producer/register|send|discard|unregister`, on the engine's producer
//! registry and the session actors' producer messages (`crate::producers`, `session_actor::producers`), with the
//! same checks as the engine's producer API (`engine/producers.rs`). Every registration of a plugin is dropped
//! when its process exits: the restarted plugin registers again during its recovery handshake.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use troupe_protocol::RpcError;
use troupe_protocol::types::plugin::{
    ExtensionProducerDiscardParams, ExtensionProducerRegisterParams, ExtensionProducerRegisterResult,
    ExtensionProducerSendParams, ExtensionProducerSendResult, ExtensionProducerUnregisterParams, methods,
};
use troupe_protocol::types::producers::ProducerOwner;

use super::host::PluginHost;
use super::requests::parse;
use crate::error::EngineError;
use crate::session_actor::{DiscardOutcome, DiscardProducerMessage, SendProducerMessage};
use crate::session_supervisor::IndexedMeta;

type Answer = BoxFuture<'static, Result<Value, RpcError>>;

fn owner(host: &PluginHost) -> ProducerOwner {
    ProducerOwner::Plugin { plugin: host.name().to_owned() }
}

pub(super) fn handle(host: &mut PluginHost, method: &str, params: Value) -> Answer {
    let context = host.context.clone();
    let owner = owner(host);
    let method = method.to_owned();
    Box::pin(async move {
        match method.as_str() {
            methods::PRODUCER_REGISTER => {
                let params: ExtensionProducerRegisterParams = parse(&method, params)?;
                context
                    .sessions
                    .supervisor
                    .send(IndexedMeta { session_id: params.session_id.clone() })
                    .await
                    .map_err(|_| EngineError::ShuttingDown)??;
                let producer_id = context.producers.register(&params.session_id, owner)?;
                Ok(json!(ExtensionProducerRegisterResult { producer_id }))
            }
            methods::PRODUCER_SEND => {
                let params: ExtensionProducerSendParams = parse(&method, params)?;
                crate::producers::check_message(&params.idempotency_key, &params.body, context.max_body_bytes)?;
                let registration = context.producers.get(&params.session_id, &params.producer_id)?;
                let receipt = context
                    .sessions
                    .ask(&params.session_id, || SendProducerMessage {
                        owner: registration.owner.clone(),
                        mode: params.mode,
                        idempotency_key: params.idempotency_key.clone(),
                        body: params.body.clone(),
                    })
                    .await?;
                Ok(json!(ExtensionProducerSendResult { message_id: receipt.message_id }))
            }
            methods::PRODUCER_DISCARD => {
                let params: ExtensionProducerDiscardParams = parse(&method, params)?;
                let outcome = context
                    .sessions
                    .ask(&params.session_id, || DiscardProducerMessage {
                        owner: owner.clone(),
                        message_id: params.message_id.clone(),
                    })
                    .await?;
                let outcome = match outcome {
                    DiscardOutcome::Discarded => "discarded",
                    DiscardOutcome::AlreadyDiscarded => "already_discarded",
                    DiscardOutcome::AlreadyDelivered => "already_delivered",
                };
                Ok(json!({"outcome": outcome}))
            }
            methods::PRODUCER_UNREGISTER => {
                let params: ExtensionProducerUnregisterParams = parse(&method, params)?;
                let existed = context.producers.unregister(&params.session_id, &params.producer_id);
                Ok(json!({"unregistered": existed}))
            }
            other => Err(EngineError::UnknownPluginMethod { method: other.to_owned() }.into()),
        }
    })
}

/// The plugin's process is gone: its registrations go with it.
pub(super) fn plugin_exited(host: &PluginHost) {
    let dropped = host.context.producers.unregister_owner(&owner(host));
    if dropped > 0 {
        tracing::info!(plugin = %host.name(), dropped, "dropped the producer registrations of an exited plugin");
    }
}
