//! `session.presence` and `session.presence_unsubscribe` (troupe extensions): the engine's side of the
//! [`PresenceActor`](crate::presence_actor::PresenceActor), which owns who follows which session.
//!
//! Neither method loads the session: its existence is read from the supervisor's index, so watching the presence
//! of an idle session leaves it hibernated (see the actor's module docs).

use troupe_protocol::RpcError;
use troupe_protocol::server::ServerContext;
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::presence::SessionPresenceResult;

use super::Engine;
use crate::error::EngineError;
use crate::presence_actor::{UnwatchPresence, WatchPresence};
use crate::session_supervisor::IndexedMeta;

impl Engine {
    pub(super) async fn watch_presence(
        &self,
        ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<SessionPresenceResult, RpcError> {
        self.supervisor_ask(IndexedMeta { session_id: params.session_id.clone() }).await??;
        let list = self
            .presence
            .send(WatchPresence { session_id: params.session_id.clone(), notifier: ctx.connection_notifier() })
            .await
            .map_err(|_| EngineError::ShuttingDown)??;
        Ok(SessionPresenceResult { session_id: params.session_id, clients: list.clients, you: list.you })
    }

    pub(super) async fn unwatch_presence(
        &self,
        ctx: &ServerContext,
        params: SessionIdParams,
    ) -> Result<Empty, RpcError> {
        let watched = self
            .presence
            .send(UnwatchPresence { session_id: params.session_id.clone(), connection_id: ctx.connection_id() })
            .await
            .map_err(|_| EngineError::ShuttingDown)?;
        if !watched {
            // Nothing to stop: still, a session that does not exist is named as such, as every session method does.
            self.supervisor_ask(IndexedMeta { session_id: params.session_id }).await??;
        }
        Ok(Empty {})
    }
}
