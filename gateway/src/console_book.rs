//! Who is signed in to the web console: one-time sign-in codes and the browser sessions they were exchanged for.
//!
//! A code is minted for a user who already holds the token (`troupe open`, or `troupe serve` on a terminal) and
//! is good for one `POST /login` within [`CODE_TTL`]. The browser then gets two random values: the session's value
//! in an `HttpOnly` cookie, which the page's script cannot read, and a page key in the redirect's fragment, which the
//! page keeps in its origin's `localStorage`. `/ws` wants both. Browsers send a host's cookies to every port of it,
//! so a web server on another port of the same machine receives the cookie; it never sees the page key, which is
//! scoped to the console's origin. The page never sees the token. Only SHA-256 hashes of codes, session values and
//! keys are kept, so neither the memory nor the file below is a credential.
//!
//! Sessions survive a daemon restart (a browser left open reconnects to the restarted daemon without signing in
//! again): they are kept in `<data_dir>/daemon/console-sessions.json`, mode 0600, written whole to a temporary file,
//! fsynced and renamed. The file records which token it belongs to (a hash of it), so replacing the token signs
//! every browser out.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::token::Token;

/// How long a sign-in code is accepted.
pub const CODE_TTL: Duration = Duration::from_secs(5 * 60);
/// Codes minted and not yet used at once; minting more forgets the oldest (a loop minting codes cannot grow memory).
const MAX_OPEN_CODES: usize = 64;
/// Signed-in browsers at once; signing in another forgets the one that expires first.
const MAX_SESSIONS: usize = 256;
/// The file's format; another value is ignored (everyone signs in again), never misread.
const FILE_FORMAT: u32 = 2;

type Hash = [u8; 32];

/// Which browser session something belongs to (the hash of its cookie value), without being a credential.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey(Hash);

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SessionKey({}…)", &hex(&self.0)[..8])
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

/// A live session: when it ends and the hash of its page key.
#[derive(Clone, Copy)]
struct Live {
    expires_unix: u64,
    key: Hash,
}

/// Codes and sessions of one daemon. Shared by every worker; every method is quick and never blocks on I/O
/// except [`ConsoleBook::persist`], which callers run on a blocking thread.
pub struct ConsoleBook {
    codes: Mutex<HashMap<Hash, Instant>>,
    sessions: Mutex<HashMap<Hash, Live>>,
    /// Serializes writers of the file, so an older snapshot can never replace a newer one.
    file_lock: Mutex<()>,
    file: Option<PathBuf>,
    session_ttl: Duration,
    token_id: String,
    /// The cookie's name: `troupe_console_<id>`, distinct per token, because browsers share cookies between the
    /// ports of one host and two daemons on one machine must not sign each other's browsers out.
    cookie_name: String,
}

impl std::fmt::Debug for ConsoleBook {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ConsoleBook")
            .field("open_codes", &self.codes.lock().len())
            .field("sessions", &self.sessions.lock().len())
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct SessionsFile {
    format: u32,
    token_id: String,
    sessions: Vec<StoredSession>,
}

#[derive(Serialize, Deserialize)]
struct StoredSession {
    hash: String,
    key_hash: String,
    expires_unix: u64,
}

impl ConsoleBook {
    /// A book for `token`, loading the sessions kept in `file` (if any). A missing, unreadable or foreign file
    /// means nobody is signed in; the reason is logged, never fatal.
    pub fn open(token: &Token, file: Option<PathBuf>, session_ttl: Duration) -> Self {
        let token_id = hex(&sha256(format!("troupe console sessions\0{}", token.expose()).as_bytes()))[..16].to_owned();
        let cookie_name = format!("troupe_console_{}", &token_id[..10]);
        let sessions = file.as_deref().map(|path| load(path, &token_id)).unwrap_or_default();
        ConsoleBook {
            codes: Mutex::new(HashMap::new()),
            sessions: Mutex::new(sessions),
            file_lock: Mutex::new(()),
            file,
            session_ttl: session_ttl.max(Duration::from_secs(60)),
            token_id,
            cookie_name,
        }
    }

    pub(crate) fn cookie_name(&self) -> &str {
        &self.cookie_name
    }

    /// A new single-use code.
    pub fn mint_code(&self) -> LoginCode {
        let code = random_value();
        let now = Instant::now();
        let mut codes = self.codes.lock();
        codes.retain(|_, expires| *expires > now);
        if codes.len() >= MAX_OPEN_CODES
            && let Some(oldest) = codes.iter().min_by_key(|(_, expires)| **expires).map(|(hash, _)| *hash)
        {
            codes.remove(&oldest);
        }
        codes.insert(sha256(code.as_bytes()), now + CODE_TTL);
        LoginCode { code, expires_at: SystemTime::now() + CODE_TTL }
    }

    /// Uses `code` up: a new browser session when it was minted here, unused and unexpired. Call
    /// [`ConsoleBook::persist`] afterwards.
    pub(crate) fn redeem(&self, code: &str) -> Option<NewSession> {
        let expires = self.codes.lock().remove(&sha256(code.as_bytes()))?;
        if expires <= Instant::now() {
            return None;
        }
        let (value, key) = (random_value(), random_value());
        let now = unix_now();
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, live| live.expires_unix > now);
        if sessions.len() >= MAX_SESSIONS
            && let Some(soonest) = sessions.iter().min_by_key(|(_, live)| live.expires_unix).map(|(hash, _)| *hash)
        {
            sessions.remove(&soonest);
        }
        let live = Live { expires_unix: now + self.session_ttl.as_secs(), key: sha256(key.as_bytes()) };
        sessions.insert(sha256(value.as_bytes()), live);
        Some(NewSession { value, key, max_age: self.session_ttl })
    }

    /// The session of this cookie value and when it ends, if it is a live one. `key`: the page key too must match
    /// (`None` checks the cookie alone, for what a cookie alone may see: the page's static files, sign-out).
    pub(crate) fn check(&self, value: &str, key: Option<&str>) -> Option<(SessionKey, SystemTime)> {
        let hash = sha256(value.as_bytes());
        let live = *self.sessions.lock().get(&hash)?;
        if let Some(key) = key
            && !bool::from(subtle::ConstantTimeEq::ct_eq(&sha256(key.as_bytes())[..], &live.key[..]))
        {
            return None;
        }
        (live.expires_unix > unix_now())
            .then(|| (SessionKey(hash), UNIX_EPOCH + Duration::from_secs(live.expires_unix)))
    }

    /// Ends a session; call [`ConsoleBook::persist`] afterwards.
    pub(crate) fn end_key(&self, session: &SessionKey) {
        self.sessions.lock().remove(&session.0);
    }

    /// Writes the live sessions to the file, durably. Blocking: run it on a blocking thread.
    pub(crate) fn persist(&self) -> std::io::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let _writer = self.file_lock.lock();
        let now = unix_now();
        let sessions = self
            .sessions
            .lock()
            .iter()
            .filter(|(_, live)| live.expires_unix > now)
            .map(|(hash, live)| StoredSession {
                hash: hex(hash),
                key_hash: hex(&live.key),
                expires_unix: live.expires_unix,
            })
            .collect();
        let contents = SessionsFile { format: FILE_FORMAT, token_id: self.token_id.clone(), sessions };
        let bytes = serde_json::to_vec(&contents).map_err(std::io::Error::other)?;
        write_durably(path, &bytes)
    }
}

fn load(path: &Path, token_id: &str) -> HashMap<Hash, Live> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot read the console's sessions; browsers sign in again");
            return HashMap::new();
        }
    };
    let Ok(file) = serde_json::from_slice::<SessionsFile>(&bytes) else {
        tracing::warn!(path = %path.display(), "the console's sessions file is not readable; browsers sign in again");
        return HashMap::new();
    };
    if file.format != FILE_FORMAT || file.token_id != token_id {
        tracing::info!("the console's sessions belong to another token or format; browsers sign in again");
        return HashMap::new();
    }
    let now = unix_now();
    file.sessions
        .into_iter()
        .filter(|session| session.expires_unix > now)
        .filter_map(|session| {
            Some((unhex(&session.hash)?, Live { expires_unix: session.expires_unix, key: unhex(&session.key_hash)? }))
        })
        .collect()
}

fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let directory = path.parent().unwrap_or(Path::new("."));
    let temporary = directory.join(format!(".console-sessions.{}.tmp", std::process::id()));
    {
        let mut file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(directory)?.sync_all()
}

/// 32 random bytes, base64url: a code or a session value.
#[allow(
    clippy::expect_used,
    reason = "getrandom(2) blocks until the kernel's pool is seeded and cannot fail afterwards on a kernel this daemon \
              runs on (it needs Landlock, Linux 5.13; getrandom is 3.17); the minter's signature \
              (troupe_actors::ConsoleCodeMinter) has no error to return"
)]
fn random_value() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    URL_SAFE_NO_PAD.encode(bytes)
}

fn sha256(bytes: &[u8]) -> Hash {
    Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Option<Hash> {
    let mut hash = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (index, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(hash)
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(file: Option<PathBuf>) -> ConsoleBook {
        ConsoleBook::open(&Token::new("t0ken"), file, Duration::from_secs(3600))
    }

    #[test]
    fn a_code_signs_in_once() {
        let book = book(None);
        let code = book.mint_code();
        let session = book.redeem(&code.code).expect("a fresh code is accepted");
        assert!(book.check(&session.value, Some(&session.key)).is_some());
        assert!(book.check(&session.value, None).is_some(), "the cookie alone, for static files");
        assert!(book.check(&session.value, Some("another key")).is_none(), "the cookie without its page key");
        assert!(book.check(&session.key, Some(&session.value)).is_none());
        assert!(book.redeem(&code.code).is_none(), "a code is single use");
        assert!(book.redeem("made-up").is_none());
        let (key, _) = book.check(&session.value, None).unwrap();
        book.end_key(&key);
        assert!(book.check(&session.value, Some(&session.key)).is_none(), "a signed-out session is refused");
    }

    #[test]
    fn open_codes_are_bounded() {
        let book = book(None);
        let first = book.mint_code();
        for _ in 0..MAX_OPEN_CODES {
            book.mint_code();
        }
        assert!(book.codes.lock().len() <= MAX_OPEN_CODES);
        assert!(book.redeem(&first.code).is_none(), "the oldest code was forgotten");
    }

    #[test]
    fn sessions_survive_a_restart_but_not_a_new_token() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("console-sessions.json");
        let first = book(Some(path.clone()));
        let session = first.redeem(&first.mint_code().code).unwrap();
        first.persist().unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        let stored = std::fs::read_to_string(&path).unwrap();
        assert!(!stored.contains(&session.value) && !stored.contains(&session.key), "only hashes are stored");

        let restarted = book(Some(path.clone()));
        assert!(restarted.check(&session.value, Some(&session.key)).is_some(), "a restart keeps browsers signed in");
        let rotated = ConsoleBook::open(&Token::new("another"), Some(path), Duration::from_secs(3600));
        assert!(rotated.check(&session.value, None).is_none(), "a new token signs every browser out");
        assert_ne!(rotated.cookie_name(), restarted.cookie_name());
    }
}
