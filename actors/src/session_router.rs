//! How the engine and the plugin hosts reach sessions: the live session's actor, or the supervisor to open it, and
//! a request that meets a closed mailbox (the actor hibernated or crashed, so it was not processed) is sent again to
//! a fresh actor, loaded from the log.

use actix::prelude::*;

use crate::error::EngineError;
use crate::ports::SessionPort;
use crate::session_actor::SessionActor;
use crate::session_supervisor::{LiveSessions, OpenSessionActor, SessionGone, SessionSupervisor};

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

    /// The live actor's address, and its port to name it in `SessionGone` (not its published metadata: this is
    /// every request's path).
    async fn live_session(&self, session_id: &str) -> Result<(Addr<SessionActor>, SessionPort), EngineError> {
        if let Some(live) = self.live.get(session_id)
            && live.addr.connected()
        {
            return Ok((live.addr.clone(), live.port.clone()));
        }
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
            let (addr, port) = self.live_session(session_id).await?;
            match addr.send(message()).await {
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
