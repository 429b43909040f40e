//! The session methods that are more than one message: `session.create`, `session.list` and `session.get`.

use std::path::Path;

use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::session::{
    SessionCreateParams, SessionListParams, SessionListResult, SessionRenameParams, SessionRenameResult, SessionResult,
};
use troupe_protocol::{Encoded, RpcError};
use troupe_runtime::catalog::validate_selection;

use super::Engine;
use crate::error::{EngineError, check_idempotency_key};
use crate::runtime_actor::GetSnapshot;
use crate::session_actor::{GetMeta, Rename};
use crate::session_supervisor::{CreateSession, IndexedMeta, ListRootSessions};

impl Engine {
    /// `session.create`: a new root session in a resolved working directory, with a selection the catalog has.
    pub(super) async fn create_session(&self, params: SessionCreateParams) -> Result<SessionResult, RpcError> {
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| RpcError::from(EngineError::ShuttingDown))?;
        validate_selection(&snapshot, &params.selection).map_err(EngineError::InvalidSelection)?;
        let cwd = self.resolve_cwd(params.cwd.as_deref()).await?;
        let session = self.supervisor_ask(CreateSession { selection: params.selection, cwd }).await??;
        Ok(SessionResult { session })
    }

    /// `session.list`: the root sessions, optionally of one working directory.
    pub(super) async fn list_sessions(&self, params: SessionListParams) -> Result<SessionListResult, RpcError> {
        // Filter by the same canonical form that `session.create` stored; a path that does not resolve can
        // still match sessions whose directory has since been removed. Resolving walks the file system: on a
        // blocking thread.
        let cwd = match params.cwd {
            None => None,
            Some(cwd) => Some(
                tokio::task::spawn_blocking(move || {
                    let canonical = Path::new(&cwd).canonicalize().ok();
                    canonical.and_then(|path| path.into_os_string().into_string().ok()).unwrap_or(cwd)
                })
                .await
                .map_err(|error| EngineError::Internal { detail: format!("resolving the cwd failed: {error}") })?,
            ),
        };
        let include_archived = params.include_archived;
        let sessions = self.supervisor_ask(ListRootSessions { cwd, include_archived }).await?;
        Ok(SessionListResult { sessions })
    }

    /// Sets, clears or resets a session's title; answers once the change is durable, with the session after it.
    pub(super) async fn rename_session(&self, params: SessionRenameParams) -> Result<SessionRenameResult, RpcError> {
        check_idempotency_key("client_rename_id", &params.client_rename_id)?;
        let rename = || Rename { client_rename_id: params.client_rename_id.clone(), change: params.change.clone() };
        // The session answers once the rename is accepted; its metadata holds once the event is durable.
        let (session, durable) = self.ask_session(&params.session_id, rename).await?.into_parts();
        durable.wait(&params.session_id).await?;
        Ok(SessionRenameResult { client_rename_id: params.client_rename_id, session })
    }

    /// `session.get`, without loading a hibernated session.
    pub(super) async fn get_session(&self, params: SessionIdParams) -> Result<Encoded<SessionResult>, RpcError> {
        // A live session answers from what it published at its newest durable batch (`published_meta`, encoded
        // once per publication), or from its actor while it loads; a hibernated one from the index, without loading:
        // the engine's view of it (`index_view`), else the supervisor.
        let live = self.router.live.get(&params.session_id).map(|live| (live.addr.clone(), live.meta.result()));
        let session = match live {
            Some((_, Some(published))) => return published.map_err(encoding_failed),
            Some((addr, None)) => match addr.send(GetMeta).await {
                Ok(reply) => Some(reply?),
                Err(_) => None,
            },
            None => None,
        };
        let session = match session {
            Some(session) => session,
            None => {
                if let Some(indexed) = self.index_view.result(&params.session_id) {
                    return indexed.map_err(encoding_failed);
                }
                self.supervisor_ask(IndexedMeta { session_id: params.session_id }).await??
            }
        };
        Encoded::new(&SessionResult { session }).map_err(encoding_failed)
    }
}

/// A result that could not be encoded (a bug: every wire type encodes).
fn encoding_failed(error: serde_json::Error) -> RpcError {
    EngineError::Internal { detail: format!("failed to encode the result: {error}") }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `call` returns, without an engine to call it on.
    fn future_size<P, Fut>(_: impl Fn(&'static Engine, P) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    #[test]
    fn a_rename_is_a_small_allocation() {
        // The protocol's dispatch boxes each request's future: a chunk of 1,024 bytes or more (1,009 asked for and
        // up) is a large request to glibc, which consolidates its fast bins first. The method's own future adds a
        // few words around this one.
        let size = future_size(|engine, params: SessionRenameParams| engine.rename_session(params)) + 64;
        assert!(size < 1_009, "a rename's future would be a large allocation: {size} bytes");
    }
}
