//! The session of a run the run registry does not hold (it ended before this daemon started, or is older than
//! the registry's recently finished runs), found in the logs: the reference answers a request about any ended run
//! as the run's session does (`run_not_active`, `cancelled: false`), and only an id no session started is
//! `run_not_found`.
//!
//! The index narrows the search to sessions alive when the run id (a UUIDv7) was made, newest first; their logs
//! are then read on a blocking thread (`event_log::log_started_run`), so the supervisor keeps serving meanwhile.

use actix::prelude::*;
use troupe_runtime::event_log;

use super::SessionSupervisor;

/// The session whose log holds the `run_started` of `run_id`, if any.
#[derive(Message)]
#[rtype(result = "Option<String>")]
pub struct FindRunSession {
    pub run_id: String,
}

impl Handler<FindRunSession> for SessionSupervisor {
    type Result = ResponseFuture<Option<String>>;

    fn handle(&mut self, message: FindRunSession, _: &mut Context<Self>) -> Self::Result {
        let Some((earliest, latest)) = event_log::run_time_window(&message.run_id) else {
            return Box::pin(async { None });
        };
        // A session created after the run started, or quiet since before it, cannot have started it.
        let mut candidates: Vec<_> = self
            .index
            .values()
            .filter(|meta| meta.created_at <= latest && meta.last_activity_at >= earliest)
            .map(|meta| (meta.created_at.clone(), meta.session_id.clone()))
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        let candidates: Vec<_> = candidates
            .into_iter()
            .map(|(_, session_id)| {
                let dir = self.data_dir.session_dir(&session_id);
                (session_id, dir)
            })
            .collect();
        let run_id = message.run_id;
        Box::pin(async move {
            let search = tokio::task::spawn_blocking(move || {
                for (session_id, dir) in candidates {
                    match event_log::log_started_run(&dir, &run_id) {
                        Ok(true) => return Some(session_id),
                        Ok(false) => {}
                        Err(error) => tracing::warn!(%session_id, %error, "could not search a log for a run"),
                    }
                }
                None
            });
            search.await.ok().flatten()
        })
    }
}
