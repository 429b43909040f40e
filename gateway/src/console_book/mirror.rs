//! The sessions a book knows: the live ones, bounded, and the digests of the latest ended ones. Remembering those
//! keeps a cluster node from bringing a signed-out session back: a lookup the cluster answered just before the
//! sign-out, applied just after the follow told of it, finds it ended here and is dropped. It also spares the
//! cluster a lookup for every request of a browser that signed out.

use std::collections::{HashMap, VecDeque};

use super::share::{Digest, SharedSession};

/// Signed-in browsers at once; signing in another forgets the one that expires first (in a cluster, a forgotten
/// one is looked up in the cluster again when its browser comes back).
pub(super) const MAX_SESSIONS: usize = 256;
/// Ended sessions remembered; older ones are forgotten (a lookup of one reads the cluster's delete marker).
const MAX_ENDED: usize = 1024;

#[derive(Debug, Default)]
pub(super) struct Sessions {
    live: HashMap<Digest, SharedSession>,
    ended: VecDeque<Digest>,
}

impl Sessions {
    /// Sessions loaded from a file, as they were kept (at most [`MAX_SESSIONS`] were).
    pub(super) fn of(live: HashMap<Digest, SharedSession>) -> Sessions {
        Sessions { live, ended: VecDeque::new() }
    }

    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    pub(super) fn get(&self, session: &Digest) -> Option<SharedSession> {
        self.live.get(session).copied()
    }

    /// Whether this book has heard of the session at all, live or ended.
    pub(super) fn knows(&self, session: &Digest) -> bool {
        self.live.contains_key(session) || self.ended.contains(session)
    }

    /// Adds a live session, unless it ended already; forgets expired ones and, at [`MAX_SESSIONS`], the one that
    /// expires first.
    pub(super) fn start(&mut self, session: Digest, live: SharedSession, now_unix: u64) {
        if self.ended.contains(&session) {
            return;
        }
        self.live.retain(|_, live| live.expires_unix > now_unix);
        if self.live.len() >= MAX_SESSIONS
            && !self.live.contains_key(&session)
            && let Some(soonest) = self.live.iter().min_by_key(|(_, live)| live.expires_unix).map(|(hash, _)| *hash)
        {
            self.live.remove(&soonest);
        }
        self.live.insert(session, live);
    }

    /// Ends a session: it is refused from now on, and never started again. Returns it if it was live here.
    pub(super) fn end(&mut self, session: Digest) -> Option<SharedSession> {
        if !self.ended.contains(&session) {
            if self.ended.len() >= MAX_ENDED {
                self.ended.pop_front();
            }
            self.ended.push_back(session);
        }
        self.live.remove(&session)
    }

    /// The sessions still live at `now_unix`.
    pub(super) fn live_at(&self, now_unix: u64) -> Vec<(Digest, SharedSession)> {
        self.live.iter().filter(|(_, live)| live.expires_unix > now_unix).map(|(hash, live)| (*hash, *live)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(expires_unix: u64) -> SharedSession {
        SharedSession { key: Digest::of(b"key"), expires_unix }
    }

    #[test]
    fn an_ended_session_is_never_started_again() {
        let mut sessions = Sessions::default();
        let session = Digest::of(b"cookie");
        sessions.start(session, live(200), 100);
        assert_eq!(sessions.end(session), Some(live(200)));
        // A lookup answered before the sign-out, applied after it.
        sessions.start(session, live(200), 100);
        assert_eq!(sessions.get(&session), None);
        assert!(sessions.knows(&session), "no lookup for it either");
    }

    #[test]
    fn live_and_ended_sessions_are_bounded() {
        let mut sessions = Sessions::default();
        for index in 0..(MAX_SESSIONS as u64 + 10) {
            sessions.start(Digest::of(&index.to_le_bytes()), live(1_000 + index), 100);
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert_eq!(sessions.get(&Digest::of(&0u64.to_le_bytes())), None, "the one expiring first went");
        // Later, those expired by then are forgotten before any live one.
        sessions.start(Digest::of(b"fresh"), live(5_000), 1_100);
        assert_eq!(sessions.len(), MAX_SESSIONS + 10 - 101 + 1);
        assert!(sessions.live_at(1_100).iter().all(|(_, live)| live.expires_unix > 1_100));
        for index in 0..(MAX_ENDED as u64 + 10) {
            sessions.end(Digest::of(&index.to_be_bytes()));
        }
        assert_eq!(sessions.ended.len(), MAX_ENDED);
        assert!(!sessions.knows(&Digest::of(&0u64.to_be_bytes())), "the oldest ended one is forgotten");
    }
}
