//! The engine's producer API: what plugin requests (`plugin/producer/register|send|discard|unregister`) and the
//! engine's own producers call, and `session.producers`.
//!
//! - [`Engine::register_producer`]`(session_id, owner) -> producer_id`: a runtime registration (never
//!   persisted; gone after a restart, or after [`Engine::unregister_producers_of`] when a plugin reconnects).
//! - [`Engine::unregister_producer`]`(session_id, producer_id) -> bool`.
//! - [`Engine::send_producer_message`]`(session_id, producer_id, mode, idempotency_key, body) -> ProducerReceipt
//!   {message_id, seq, replayed}`: replies only once `producer_message_accepted` is durable; a retry with the same
//!   (session, owner, key) and content returns the original receipt (`replayed: true`), other content is
//!   `idempotency_conflict`.
//! - [`Engine::discard_producer_message`]`(session_id, owner, message_id) -> DiscardOutcome`: idempotent, and
//!   needs no registration (it works after unregister).
//! - [`Engine::set_plugin_recovery_source`]: the plugin hosts' report of each plugin's recovery handshake, shown
//!   in `session.producers` as `plugin_recovery`.

use std::sync::Arc;

use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner, SessionProducersResult};

use super::Engine;
use crate::error::EngineError;
use crate::producers::PluginRecoverySource;
use crate::session_actor::{DiscardOutcome, DiscardProducerMessage, ProducerReceipt, SendProducerMessage};
use crate::session_supervisor::IndexedMeta;

impl Engine {
    /// Fails unless the session exists (live or on disk).
    async fn require_session(&self, session_id: &str) -> Result<(), EngineError> {
        self.supervisor_ask(IndexedMeta { session_id: session_id.to_owned() }).await??;
        Ok(())
    }

    /// Registers `owner` as a producer of `session_id`; returns the producer id to send with.
    pub async fn register_producer(&self, session_id: &str, owner: ProducerOwner) -> Result<String, EngineError> {
        self.require_session(session_id).await?;
        self.producers.register(session_id, owner)
    }

    /// Removes a registration. Returns whether it existed; its accepted messages stay and are still delivered.
    pub fn unregister_producer(&self, session_id: &str, producer_id: &str) -> bool {
        self.producers.unregister(session_id, producer_id)
    }

    /// Removes every registration of `owner` (a plugin restarted or reconnected); how many there were.
    pub fn unregister_producers_of(&self, owner: &ProducerOwner) -> usize {
        self.producers.unregister_owner(owner)
    }

    /// Sends a message as the registered producer `producer_id` of `session_id`. Replies once the message is
    /// durable; see the module docs for retries.
    pub async fn send_producer_message(
        &self,
        session_id: &str,
        producer_id: &str,
        mode: ProducerMessageMode,
        idempotency_key: &str,
        body: &str,
    ) -> Result<ProducerReceipt, EngineError> {
        crate::producers::check_message(idempotency_key, body, self.max_input_bytes)?;
        let registration = self.producers.get(session_id, producer_id)?;
        self.ask_session(session_id, || SendProducerMessage {
            owner: registration.owner.clone(),
            mode,
            idempotency_key: idempotency_key.to_owned(),
            body: body.to_owned(),
        })
        .await
    }

    /// Withdraws `owner`'s message `message_id` if no run has claimed it yet.
    pub async fn discard_producer_message(
        &self,
        session_id: &str,
        owner: &ProducerOwner,
        message_id: &str,
    ) -> Result<DiscardOutcome, EngineError> {
        self.ask_session(session_id, || DiscardProducerMessage {
            owner: owner.clone(),
            message_id: message_id.to_owned(),
        })
        .await
    }

    /// Installs the plugin hosts' recovery reports for `session.producers`.
    pub fn set_plugin_recovery_source(&self, source: Arc<dyn PluginRecoverySource>) {
        self.producers.set_recovery_source(source);
    }

    /// `session.producers`: the session's registrations (with their age) and the plugins' recovery states.
    pub(super) async fn producers_of(&self, session_id: &str) -> Result<SessionProducersResult, EngineError> {
        self.require_session(session_id).await?;
        Ok(SessionProducersResult {
            producers: self.producers.for_session(session_id),
            plugin_recovery: self.producers.recovery_states(session_id),
        })
    }
}
