//! Who is signed in to the web console: one-time sign-in codes and the browser sessions they were exchanged for.
//!
//! A code is minted for a user who already holds the token (`troupe open`, or `troupe serve` on a terminal) and
//! is good for one `POST /login` within [`CODE_TTL`]. The browser then gets two random values: the session's value
//! in an `HttpOnly` cookie, which the page's script cannot read, and a page key in the redirect's fragment, which the
//! page keeps in its origin's `localStorage`. `/ws` wants both. Browsers send a host's cookies to every port of it,
//! so a web server on another port of the same machine receives the cookie; it never sees the page key, which is
//! scoped to the console's origin. The page never sees the token. Only SHA-256 digests of codes, session values and
//! keys are kept, so neither the memory nor the stores below hold a credential.
//!
//! Where sign-ins are kept:
//! - a single daemon keeps its sessions in `<data_dir>/daemon/console-sessions.json` (`file.rs`), so a browser left
//!   open reconnects to a restarted daemon without signing in again; its codes live in memory only;
//! - a cluster node keeps codes and sessions in the cluster ([`ConsoleShare`], `share.rs`), so a code minted on one
//!   node signs in on another, once cluster-wide, and a session works on every node. Each node mirrors the
//!   cluster's sessions in memory, fed by a follow of the store: a check is a read of the mirror, which still works
//!   while the cluster cannot be reached; a cookie the mirror does not know yet (a sign-in on another node a
//!   moment ago) is looked up in the store before it is refused. A sign-in the cluster cannot record is refused.

mod file;
mod mirror;
pub mod share;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;

use self::file::SessionsFile;
use self::mirror::Sessions;
use self::share::{ConsoleShare, Digest, ShareChange, ShareError, SharedSession};
use crate::token::Token;

/// How long a sign-in code is accepted.
pub const CODE_TTL: Duration = Duration::from_secs(5 * 60);
/// Codes minted and not yet used at once; minting more forgets the oldest (a loop minting codes cannot grow memory).
const MAX_OPEN_CODES: usize = 64;

/// Which browser session something belongs to (the digest of its cookie value), without being a credential.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey(Digest);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SessionKey({}…)", &self.0.hex()[..8])
    }
}

/// A sign-in code, as `console.login_code` hands it out.
#[derive(Clone, Debug)]
pub struct LoginCode {
    pub code: String,
    pub expires_at: SystemTime,
}

/// A browser session just created by a sign-in: the cookie's value, the page key and how long they live.
pub(crate) struct NewSession {
    pub(crate) value: String,
    pub(crate) key: String,
    pub(crate) max_age: Duration,
}

/// What is told of a session another node ended: the gateway closes this node's sockets of it.
type EndedHook = Box<dyn Fn(SessionKey) + Send + Sync>;

/// Where the book keeps what must outlive it or reach other nodes.
#[derive(Debug)]
enum Store {
    /// Memory only (tests, and a daemon without a data dir's file).
    Memory,
    /// A single daemon's sessions file.
    File(SessionsFile),
    /// The cluster's store; this book mirrors its sessions.
    Shared(Arc<dyn ConsoleShare>),
}

/// Codes and sessions of one daemon. Shared by every worker; checks never block on I/O, and the methods that reach
/// the cluster are async.
pub struct ConsoleBook {
    codes: Mutex<HashMap<Digest, Instant>>,
    /// Shared with the cluster's follow, which mirrors other nodes' sign-ins into it.
    sessions: Arc<Mutex<Sessions>>,
    store: Store,
    session_ttl: Duration,
    /// The scope of this token's sign-ins: the file's owner, the cluster store's namespace.
    token_id: String,
    /// The cookie's name: `troupe_console_<id>`, distinct per token, because browsers share cookies between the
    /// ports of one host and two daemons on one machine must not sign each other's browsers out.
    cookie_name: String,
    ended: Arc<OnceLock<EndedHook>>,
}

impl std::fmt::Debug for ConsoleBook {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ConsoleBook")
            .field("open_codes", &self.codes.lock().len())
            .field("sessions", &self.sessions.lock().len())
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl ConsoleBook {
    /// A single daemon's book for `token`, loading the sessions kept in `file` (if any); see `file.rs`.
    pub fn open(token: &Token, file: Option<PathBuf>, session_ttl: Duration) -> Self {
        let store = file.map_or(Store::Memory, |path| Store::File(SessionsFile::new(path)));
        let book = ConsoleBook::with_store(token, store, session_ttl);
        if let Store::File(file) = &book.store {
            *book.sessions.lock() = Sessions::of(file.load(&book.token_id, unix_now()));
        }
        book
    }

    /// A cluster node's book for `token`: codes and sessions are kept in `share`, and the cluster's sessions are
    /// mirrored here from now on.
    pub fn shared(token: &Token, share: Arc<dyn ConsoleShare>, session_ttl: Duration) -> Self {
        let book = ConsoleBook::with_store(token, Store::Shared(share.clone()), session_ttl);
        let (sessions, ended) = (book.sessions.clone(), book.ended.clone());
        share.follow(
            &book.token_id,
            Arc::new(move |change| match change {
                ShareChange::Started { session, live } => {
                    let now = unix_now();
                    if live.expires_unix > now {
                        sessions.lock().start(session, live, now);
                    }
                }
                ShareChange::Ended { session } => {
                    let known = sessions.lock().end(session).is_some();
                    if known && let Some(hook) = ended.get() {
                        hook(SessionKey(session));
                    }
                }
            }),
        );
        book
    }

    fn with_store(token: &Token, store: Store, session_ttl: Duration) -> Self {
        let token_id =
            Digest::of(format!("troupe console sessions\0{}", token.expose()).as_bytes()).hex()[..16].to_owned();
        let cookie_name = format!("troupe_console_{}", &token_id[..10]);
        ConsoleBook {
            codes: Mutex::new(HashMap::new()),
            sessions: Arc::default(),
            store,
            session_ttl: session_ttl.max(Duration::from_secs(60)),
            token_id,
            cookie_name,
            ended: Arc::default(),
        }
    }

    pub(crate) fn cookie_name(&self) -> &str {
        &self.cookie_name
    }

    /// Tells `hook` of every session another node ended, so this node closes its sockets too. The first call wins.
    pub(crate) fn on_ended_elsewhere(&self, hook: EndedHook) {
        let _ = self.ended.set(hook);
    }

    /// A new single-use code. In a cluster it is recorded there first, so that any node accepts it; an error means
    /// the cluster could not record it (no code is handed out).
    pub async fn mint_code(&self) -> Result<LoginCode, ShareError> {
        let code = random_value();
        let digest = Digest::of(code.as_bytes());
        let expires_at = SystemTime::now() + CODE_TTL;
        if let Store::Shared(share) = &self.store {
            share.add_code(&self.token_id, digest, unix_of(expires_at)).await?;
            return Ok(LoginCode { code, expires_at });
        }
        let now = Instant::now();
        let mut codes = self.codes.lock();
        codes.retain(|_, expires| *expires > now);
        if codes.len() >= MAX_OPEN_CODES
            && let Some(oldest) = codes.iter().min_by_key(|(_, expires)| **expires).map(|(hash, _)| *hash)
        {
            codes.remove(&oldest);
        }
        codes.insert(digest, now + CODE_TTL);
        Ok(LoginCode { code, expires_at })
    }

    /// Uses `code` up: a new browser session when it was minted (on any node of a cluster), unused and unexpired.
    /// An error: the cluster could not take the code or record the session, and nobody is signed in. Call
    /// [`ConsoleBook::persist`] afterwards.
    pub(crate) async fn redeem(&self, code: &str) -> Result<Option<NewSession>, ShareError> {
        let digest = Digest::of(code.as_bytes());
        let accepted = match &self.store {
            Store::Shared(share) => {
                share.take_code(&self.token_id, digest).await?.is_some_and(|expires| expires > unix_now())
            }
            Store::Memory | Store::File(_) => {
                self.codes.lock().remove(&digest).is_some_and(|expires| expires > Instant::now())
            }
        };
        if !accepted {
            return Ok(None);
        }
        let (value, key) = (random_value(), random_value());
        let session = Digest::of(value.as_bytes());
        let live =
            SharedSession { key: Digest::of(key.as_bytes()), expires_unix: unix_now() + self.session_ttl.as_secs() };
        if let Store::Shared(share) = &self.store {
            share.add_session(&self.token_id, session, live).await?;
        }
        self.sessions.lock().start(session, live, unix_now());
        Ok(Some(NewSession { value, key, max_age: self.session_ttl }))
    }

    /// The session of this cookie value and when it ends, if it is a live one this node knows. `key`: the page key
    /// too must match (`None` checks the cookie alone, for what a cookie alone may see: the page's static files,
    /// sign-out).
    pub(crate) fn check(&self, value: &str, key: Option<&str>) -> Option<(SessionKey, SystemTime)> {
        let digest = Digest::of(value.as_bytes());
        let live = self.sessions.lock().get(&digest)?;
        if let Some(key) = key
            && !live.key.matches(&Digest::of(key.as_bytes()))
        {
            return None;
        }
        (live.expires_unix > unix_now())
            .then(|| (SessionKey(digest), UNIX_EPOCH + Duration::from_secs(live.expires_unix)))
    }

    /// [`ConsoleBook::check`], and in a cluster, for a cookie this node does not know, the cluster's entry: a
    /// browser that signed in on another node a moment ago, before the mirror heard of it. A cluster that cannot
    /// be asked refuses such a cookie (logged), never one the mirror knows.
    pub(crate) async fn check_anywhere(&self, value: &str, key: Option<&str>) -> Option<(SessionKey, SystemTime)> {
        if let Some(found) = self.check(value, key) {
            return Some(found);
        }
        let Store::Shared(share) = &self.store else { return None };
        let digest = Digest::of(value.as_bytes());
        if self.sessions.lock().knows(&digest) {
            // Live here and refused for its key or its age, or ended: the cluster knows no better.
            return None;
        }
        match share.session(&self.token_id, digest).await {
            Ok(Some(live)) if live.expires_unix > unix_now() => {
                // Not if it ended meanwhile: `start` keeps an ended session ended.
                self.sessions.lock().start(digest, live, unix_now());
                self.check(value, key)
            }
            Ok(_) => None,
            Err(error) => {
                tracing::info!(%error, "refused a console cookie this node does not know: the cluster cannot be asked");
                None
            }
        }
    }

    /// Ends a session, on every node of a cluster; call [`ConsoleBook::persist`] afterwards. An error: this node
    /// refuses it from now on, the cluster was not told (the implementation keeps trying).
    pub(crate) async fn end(&self, session: &SessionKey) -> Result<(), ShareError> {
        let ended = self.sessions.lock().end(session.0);
        let Store::Shared(share) = &self.store else { return Ok(()) };
        let until = ended.map_or_else(|| unix_now() + self.session_ttl.as_secs(), |live| live.expires_unix);
        share.end_session(&self.token_id, session.0, until).await
    }

    /// Writes the live sessions to the file, durably, for a single daemon (a cluster node keeps no file). Blocking:
    /// run it on a blocking thread.
    pub(crate) fn persist(&self) -> std::io::Result<()> {
        let Store::File(file) = &self.store else { return Ok(()) };
        file.write(&self.token_id, || self.sessions.lock().live_at(unix_now()))
    }
}

/// 32 random bytes, base64url: a code or a session value.
#[allow(
    clippy::expect_used,
    reason = "getrandom(2) blocks until the kernel's pool is seeded and cannot fail afterwards on a kernel this daemon \
              runs on (it needs Landlock, Linux 5.13; getrandom is 3.17); the callers have no error to return for it"
)]
fn random_value() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    URL_SAFE_NO_PAD.encode(bytes)
}

fn unix_of(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0)
}

fn unix_now() -> u64 {
    unix_of(SystemTime::now())
}

#[cfg(test)]
mod tests;
