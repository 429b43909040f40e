//! `plugin/emit` in the session: the durable `plugin_event_added`, then the live `events.plugin` notification to
//! every connection subscribed to the session, once the event is durable (a client never sees a plugin event
//! the log could lose).

use actix::prelude::*;
use troupe_protocol::jsonrpc::encode_notification;
use troupe_protocol::notification::EventsPlugin;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::plugin::PluginEventParams;

use super::SessionActor;
use crate::error::EngineError;

/// Appends `plugin_event_added` and, once durable, sends `events.plugin` to the live subscribers. Replies with
/// the event's `seq`.
#[derive(Message)]
#[rtype(result = "Result<u64, EngineError>")]
pub struct EmitPluginEvent {
    pub plugin: String,
    pub name: String,
    pub payload: serde_json::Value,
}

impl Handler<EmitPluginEvent> for SessionActor {
    type Result = ResponseActFuture<Self, Result<u64, EngineError>>;

    fn handle(&mut self, message: EmitPluginEvent, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.ready_state().map(|_| ()).and_then(|()| {
            let payload = EventPayload::PluginEventAdded {
                plugin: message.plugin.clone(),
                name: message.name.clone(),
                payload: message.payload.clone(),
            };
            self.append(ctx, None, Some(Origin::plugin(&message.plugin)), payload)
        });
        let seq = match accepted {
            Ok(seq) => seq,
            Err(error) => return Box::pin(fut::ready(Err(error))),
        };
        let durable = self.when_durable(seq);
        let session_id = self.session_id.clone();
        Box::pin(durable.into_actor(self).map(move |durable, actor, _| {
            match durable {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(error),
                Err(_) => {
                    return Err(EngineError::Unavailable { session_id, detail: "the session stopped".into() });
                }
            }
            let params = PluginEventParams {
                session_id: actor.session_id.clone(),
                plugin: message.plugin,
                name: message.name,
                payload: message.payload,
            };
            match encode_notification::<EventsPlugin>(&params) {
                Ok(frame) => {
                    // Not a stored event: a subscriber whose queue is full misses it, and keeps its subscription
                    // (the durable `plugin_event_added` reaches it through `events.subscription` regardless).
                    actor.subscribers.offer_transient(&frame);
                }
                Err(error) => tracing::error!(%error, "could not encode events.plugin"),
            }
            Ok(seq)
        }))
    }
}
