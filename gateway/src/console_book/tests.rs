use std::collections::HashMap;

use super::share::{ShareFuture, ShareSink};
use super::*;

fn book(file: Option<PathBuf>) -> ConsoleBook {
    ConsoleBook::open(&Token::new("t0ken"), file, Duration::from_secs(3600))
}

#[tokio::test]
async fn a_code_signs_in_once() {
    let book = book(None);
    let code = book.mint_code().await.unwrap();
    let session = book.redeem(&code.code).await.unwrap().expect("a fresh code is accepted");
    assert!(book.check(&session.value, Some(&session.key)).is_some());
    assert!(book.check(&session.value, None).is_some(), "the cookie alone, for static files");
    assert!(book.check(&session.value, Some("another key")).is_none(), "the cookie without its page key");
    assert!(book.check(&session.key, Some(&session.value)).is_none());
    assert!(book.redeem(&code.code).await.unwrap().is_none(), "a code is single use");
    assert!(book.redeem("made-up").await.unwrap().is_none());
    let (key, _) = book.check(&session.value, None).unwrap();
    book.end(&key).await.unwrap();
    assert!(book.check(&session.value, Some(&session.key)).is_none(), "a signed-out session is refused");
}

#[tokio::test]
async fn open_codes_are_bounded() {
    let book = book(None);
    let first = book.mint_code().await.unwrap();
    for _ in 0..MAX_OPEN_CODES {
        book.mint_code().await.unwrap();
    }
    assert!(book.codes.lock().len() <= MAX_OPEN_CODES);
    assert!(book.redeem(&first.code).await.unwrap().is_none(), "the oldest code was forgotten");
}

#[tokio::test]
async fn sessions_survive_a_restart_but_not_a_new_token() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("console-sessions.json");
    let first = book(Some(path.clone()));
    let session = first.redeem(&first.mint_code().await.unwrap().code).await.unwrap().unwrap();
    first.persist().unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let stored = std::fs::read_to_string(&path).unwrap();
    assert!(!stored.contains(&session.value) && !stored.contains(&session.key), "only digests are stored");

    let restarted = book(Some(path.clone()));
    assert!(restarted.check(&session.value, Some(&session.key)).is_some(), "a restart keeps browsers signed in");
    let rotated = ConsoleBook::open(&Token::new("another"), Some(path), Duration::from_secs(3600));
    assert!(rotated.check(&session.value, None).is_none(), "a new token signs every browser out");
    assert_ne!(rotated.cookie_name(), restarted.cookie_name());
}

/// An in-memory cluster store: what `troupe-cluster` keeps in its bucket, with the follow fed synchronously unless
/// `quiet` (a node whose mirror has not heard of a change yet).
#[derive(Debug, Default)]
struct FakeShare {
    state: Mutex<FakeState>,
    reachable_off: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct FakeState {
    codes: HashMap<(String, Digest), u64>,
    sessions: HashMap<(String, Digest), SharedSession>,
    sinks: Vec<(String, ShareSink)>,
    quiet: bool,
}

impl std::fmt::Debug for FakeState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("FakeState").finish_non_exhaustive()
    }
}

impl FakeShare {
    fn reachable(&self) -> Result<(), ShareError> {
        if self.reachable_off.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ShareError::Unreachable("no NATS".to_owned()));
        }
        Ok(())
    }

    fn tell(&self, scope: &str, change: ShareChange) {
        let state = self.state.lock();
        if state.quiet {
            return;
        }
        let sinks: Vec<ShareSink> =
            state.sinks.iter().filter(|(of, _)| of == scope).map(|(_, sink)| sink.clone()).collect();
        drop(state);
        for sink in sinks {
            sink(change);
        }
    }
}

impl ConsoleShare for FakeShare {
    fn add_code(&self, scope: &str, code: Digest, expires_unix: u64) -> ShareFuture<()> {
        let done = self.reachable().map(|()| {
            self.state.lock().codes.insert((scope.to_owned(), code), expires_unix);
        });
        Box::pin(async move { done })
    }

    fn take_code(&self, scope: &str, code: Digest) -> ShareFuture<Option<u64>> {
        let taken = self.reachable().map(|()| self.state.lock().codes.remove(&(scope.to_owned(), code)));
        Box::pin(async move { taken })
    }

    fn add_session(&self, scope: &str, session: Digest, live: SharedSession) -> ShareFuture<()> {
        let done = self.reachable().map(|()| {
            self.state.lock().sessions.insert((scope.to_owned(), session), live);
            self.tell(scope, ShareChange::Started { session, live });
        });
        Box::pin(async move { done })
    }

    fn end_session(&self, scope: &str, session: Digest, _until_unix: u64) -> ShareFuture<()> {
        let done = self.reachable().map(|()| {
            self.state.lock().sessions.remove(&(scope.to_owned(), session));
            self.tell(scope, ShareChange::Ended { session });
        });
        Box::pin(async move { done })
    }

    fn session(&self, scope: &str, session: Digest) -> ShareFuture<Option<SharedSession>> {
        let found = self.reachable().map(|()| self.state.lock().sessions.get(&(scope.to_owned(), session)).copied());
        Box::pin(async move { found })
    }

    fn follow(&self, scope: &str, sink: ShareSink) {
        let current: Vec<(Digest, SharedSession)> = {
            let state = self.state.lock();
            state
                .sessions
                .iter()
                .filter(|((of, _), _)| of == scope)
                .map(|((_, session), live)| (*session, *live))
                .collect()
        };
        for (session, live) in current {
            sink(ShareChange::Started { session, live });
        }
        self.state.lock().sinks.push((scope.to_owned(), sink));
    }
}

fn nodes(share: &Arc<FakeShare>) -> (ConsoleBook, ConsoleBook) {
    let token = Token::new("t0ken");
    let ttl = Duration::from_secs(3600);
    (ConsoleBook::shared(&token, share.clone(), ttl), ConsoleBook::shared(&token, share.clone(), ttl))
}

#[tokio::test]
async fn a_code_minted_on_one_node_signs_in_once_on_any() {
    let share = Arc::new(FakeShare::default());
    let (a, b) = nodes(&share);
    let code = a.mint_code().await.unwrap();
    assert!(a.codes.lock().is_empty(), "a cluster node keeps its codes in the cluster only");
    let session = b.redeem(&code.code).await.unwrap().expect("another node accepts the code");
    assert!(a.redeem(&code.code).await.unwrap().is_none(), "once, cluster-wide");
    assert!(a.check(&session.value, Some(&session.key)).is_some(), "mirrored on the node that minted it");
    let (key, _) = a.check(&session.value, None).unwrap();
    a.end(&key).await.unwrap();
    assert!(b.check(&session.value, None).is_none(), "ended on every node");
    assert!(b.check_anywhere(&session.value, None).await.is_none());
}

#[tokio::test]
async fn a_cookie_the_mirror_has_not_heard_of_is_looked_up() {
    let share = Arc::new(FakeShare::default());
    let (a, b) = nodes(&share);
    share.state.lock().quiet = true;
    let session = a.redeem(&a.mint_code().await.unwrap().code).await.unwrap().unwrap();
    assert!(b.check(&session.value, None).is_none(), "b's mirror has not heard of it");
    assert!(b.check_anywhere(&session.value, Some(&session.key)).await.is_some(), "but the cluster has");
    assert!(b.check(&session.value, Some(&session.key)).is_some(), "and b remembers it");
    assert!(b.check_anywhere(&session.value, Some("another key")).await.is_none());
    assert!(b.check_anywhere("made-up", None).await.is_none());
}

#[tokio::test]
async fn without_the_cluster_a_sign_in_is_refused_and_a_mirrored_session_still_works() {
    let share = Arc::new(FakeShare::default());
    let (a, b) = nodes(&share);
    let session = a.redeem(&a.mint_code().await.unwrap().code).await.unwrap().unwrap();
    let code = a.mint_code().await.unwrap();
    share.reachable_off.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(a.mint_code().await, Err(ShareError::Unreachable(_))));
    assert!(matches!(b.redeem(&code.code).await, Err(ShareError::Unreachable(_))));
    assert!(b.check_anywhere(&session.value, Some(&session.key)).await.is_some(), "read from b's mirror");
}

#[tokio::test]
async fn another_nodes_sign_out_reaches_this_nodes_sockets() {
    let share = Arc::new(FakeShare::default());
    let (a, b) = nodes(&share);
    let told = Arc::new(Mutex::new(Vec::new()));
    let heard = told.clone();
    a.on_ended_elsewhere(Box::new(move |session| heard.lock().push(session)));
    let session = a.redeem(&a.mint_code().await.unwrap().code).await.unwrap().unwrap();
    let (key, _) = b.check(&session.value, None).unwrap();
    b.end(&key).await.unwrap();
    assert_eq!(*told.lock(), [key]);
    assert!(a.check(&session.value, None).is_none());
}

#[tokio::test]
async fn a_new_token_does_not_see_the_old_ones_sessions() {
    let share = Arc::new(FakeShare::default());
    let (a, _) = nodes(&share);
    let session = a.redeem(&a.mint_code().await.unwrap().code).await.unwrap().unwrap();
    let rotated = ConsoleBook::shared(&Token::new("another"), share.clone(), Duration::from_secs(3600));
    assert!(rotated.check_anywhere(&session.value, None).await.is_none());
}
