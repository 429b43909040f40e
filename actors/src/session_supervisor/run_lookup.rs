//! The session of a run the run registry does not hold (it ended before this daemon started, or is older than
//! the registry's recently finished runs), found in the logs: the reference answers a request about any ended run
//! as the run's session does (`run_not_active`, `cancelled: false`), and only an id no session started is
//! `run_not_found`.
//!
//! The index narrows the search to sessions alive when the run id (a UUIDv7) was made, newest first; their logs
//! are then read on a blocking thread (`event_log::log_started_run`), so the supervisor keeps serving meanwhile.
//!
//! A client can name run ids that look like this daemon's but were never handed out, each costing a read of every
//! log alive at its time. So searches run one at a time (a second waits for the first: one blocking thread at
//! most, whatever the number of clients), and an id found in no log is remembered ([`NOT_FOUND_KEPT`] ids, for
//! [`NOT_FOUND_FOR`]): asking again answers at once. Only ids older than their clock slack are remembered, since a
//! session of their time cannot start them any more; a session folder put back into the sessions directory is
//! searched again once the memory expires.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::Semaphore;
use troupe_runtime::event_log;

use super::SessionSupervisor;

/// How many run ids found in no log are remembered.
const NOT_FOUND_KEPT: usize = 4096;
/// How long an id found in no log is remembered.
const NOT_FOUND_FOR: Duration = Duration::from_secs(300);

/// The session whose log holds the `run_started` of `run_id`, if any.
#[derive(Message)]
#[rtype(result = "Option<String>")]
pub struct FindRunSession {
    pub run_id: String,
}

/// The supervisor's state of log searches: the one permit to search, and the ids no log held.
pub(crate) struct RunLookups {
    search: Arc<Semaphore>,
    not_found: NotFound,
}

impl Default for RunLookups {
    fn default() -> Self {
        RunLookups { search: Arc::new(Semaphore::new(1)), not_found: NotFound::new(NOT_FOUND_KEPT, NOT_FOUND_FOR) }
    }
}

/// Run ids found in no log, oldest first, each until its expiry; at most `capacity` (the oldest go first).
struct NotFound {
    capacity: usize,
    keep_for: Duration,
    order: VecDeque<(String, Instant)>,
    expiries: HashMap<String, Instant>,
}

impl NotFound {
    fn new(capacity: usize, keep_for: Duration) -> Self {
        NotFound { capacity, keep_for, order: VecDeque::new(), expiries: HashMap::new() }
    }

    fn contains(&mut self, run_id: &str, now: Instant) -> bool {
        self.expire(now);
        self.expiries.contains_key(run_id)
    }

    fn insert(&mut self, run_id: String, now: Instant) {
        self.expire(now);
        if self.expiries.contains_key(&run_id) {
            // Two searches for one id ran at once: the first one's memory stands.
            return;
        }
        let expiry = now + self.keep_for;
        self.expiries.insert(run_id.clone(), expiry);
        self.order.push_back((run_id, expiry));
        while self.order.len() > self.capacity {
            if let Some((oldest, _)) = self.order.pop_front() {
                self.expiries.remove(&oldest);
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((run_id, expiry)) = self.order.front() {
            if *expiry > now {
                break;
            }
            self.expiries.remove(run_id);
            self.order.pop_front();
        }
    }
}

impl Handler<FindRunSession> for SessionSupervisor {
    type Result = ResponseActFuture<Self, Option<String>>;

    fn handle(&mut self, message: FindRunSession, _: &mut Context<Self>) -> Self::Result {
        let run_id = message.run_id;
        let Some((earliest, latest)) = event_log::run_time_window(&run_id) else {
            return Box::pin(fut::ready(None));
        };
        if self.run_lookups.not_found.contains(&run_id, Instant::now()) {
            return Box::pin(fut::ready(None));
        }
        // Past its window no session can start this run any more: a search that finds nothing stays true.
        let settled = latest < troupe_runtime::clock::now_rfc3339();
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
        let permit = self.run_lookups.search.clone();
        let searched_id = run_id.clone();
        let search = async move {
            // Closed never: the supervisor owns the semaphore for its whole life.
            let _permit = permit.acquire_owned().await.ok()?;
            let search = tokio::task::spawn_blocking(move || {
                for (session_id, dir) in candidates {
                    match event_log::log_started_run(&dir, &searched_id) {
                        Ok(true) => return Some(session_id),
                        Ok(false) => {}
                        Err(error) => tracing::warn!(%session_id, %error, "could not search a log for a run"),
                    }
                }
                None
            });
            search.await.ok().flatten()
        };
        Box::pin(search.into_actor(self).map(move |found, actor, _| {
            if found.is_none() && settled {
                actor.run_lookups.not_found.insert(run_id, Instant::now());
            }
            found
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_found_nowhere_are_remembered_for_a_while_and_the_oldest_go_first() {
        let start = Instant::now();
        let mut not_found = NotFound::new(2, Duration::from_secs(10));
        not_found.insert("a".into(), start);
        not_found.insert("b".into(), start + Duration::from_secs(1));
        assert!(not_found.contains("a", start + Duration::from_secs(2)));
        not_found.insert("c".into(), start + Duration::from_secs(2));
        assert!(!not_found.contains("a", start + Duration::from_secs(2)), "over capacity, the oldest goes");
        assert!(not_found.contains("b", start + Duration::from_secs(2)));
        assert!(!not_found.contains("b", start + Duration::from_secs(11)), "expired");
        assert!(not_found.contains("c", start + Duration::from_secs(11)));
        assert!(!not_found.contains("c", start + Duration::from_secs(12)));
        assert!(not_found.order.is_empty() && not_found.expiries.is_empty());
    }

    #[test]
    fn remembering_an_id_twice_keeps_one_entry() {
        let start = Instant::now();
        let mut not_found = NotFound::new(8, Duration::from_secs(10));
        not_found.insert("a".into(), start);
        not_found.insert("a".into(), start + Duration::from_secs(1));
        assert_eq!(not_found.order.len(), 1);
    }
}
