//! How the engine and the plugin hosts reach sessions: the live session's actor, or the supervisor to open it, and
//! a request that meets a closed mailbox (the actor hibernated or crashed, so it was not processed) is sent again to
//! a fresh actor, loaded from the log.

use actix::prelude::*;
use dashmap::mapref::one::Ref;

use crate::error::EngineError;
use crate::ports::SessionPort;
use crate::session_actor::SessionActor;
use crate::session_supervisor::{LiveSession, LiveSessions, OpenSessionActor, SessionGone, SessionSupervisor};

const ATTEMPTS: usize = 3;

/// Routes requests to session actors. Cheap to clone.
#[derive(Clone)]
pub struct SessionRouter {
    pub supervisor: Addr<SessionSupervisor>,
    pub live: LiveSessions,
}

impl SessionRouter {
    /// The session's actor, started by the supervisor when it is not live.
    pub async fn addr(&self, session_id: &str) -> Result<Addr<SessionActor>, EngineError> {
        Ok(self.live_session(session_id).await?.0)
    }

    /// The session's entry in the live map while its actor's mailbox is open. A guard on the map: never held
    /// across an await.
    pub fn live(&self, session_id: &str) -> Option<Ref<'_, String, LiveSession>> {
        self.live.get(session_id).filter(|live| live.addr.connected())
    }

    /// The live actor's address, and its port to name it in `SessionGone` (not its published metadata).
    async fn live_session(&self, session_id: &str) -> Result<(Addr<SessionActor>, SessionPort), EngineError> {
        match self.live(session_id).map(|live| (live.addr.clone(), live.port.clone())) {
            Some(live) => Ok(live),
            None => self.open(session_id).await,
        }
    }

    /// The session's actor from the supervisor, which starts it when it is not live.
    async fn open(&self, session_id: &str) -> Result<(Addr<SessionActor>, SessionPort), EngineError> {
        let opened = self.supervisor.send(OpenSessionActor { session_id: session_id.to_owned() }).await;
        let live = opened.map_err(|_| EngineError::ShuttingDown)??;
        Ok((live.addr, live.port))
    }

    /// Sends `message()` to the session's actor, starting it when needed.
    pub async fn ask<M, R>(&self, session_id: &str, mut message: impl FnMut() -> M) -> Result<R, EngineError>
    where
        M: Message<Result = Result<R, EngineError>> + Send + 'static,
        R: Send + 'static,
        SessionActor: Handler<M>,
    {
        for _ in 0..ATTEMPTS {
            // A live actor's message is queued through the map's own address, not a clone of it (cloning an
            // address allocates twice, on every request's path). Its mailbox has no bound
            // (`unbounded_mailbox.rs`), so that address is never parked.
            let sent = self.live(session_id).map(|live| (live.addr.send(message()), live.port.clone()));
            let (request, port) = match sent {
                Some(sent) => sent,
                None => {
                    let (addr, port) = self.open(session_id).await?;
                    (addr.send(message()), port)
                }
            };
            match request.await {
                Ok(result) => return result,
                Err(_) => self.supervisor.do_send(SessionGone { session_id: session_id.to_owned(), port }),
            }
        }
        Err(EngineError::Unavailable {
            session_id: session_id.to_owned(),
            detail: "the session stopped while answering; it restarts from its log on the next request".into(),
        })
    }
}
