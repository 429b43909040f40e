//! A single daemon's sessions on disk: `<data_dir>/daemon/console-sessions.json`, mode 0600, written whole to a
//! temporary file, fsynced and renamed. The file records which token it belongs to (a digest of it), so replacing
//! the token signs every browser out. A cluster node keeps none: the cluster's store is its file.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::share::{Digest, SharedSession};

/// The file's format; another value is ignored (everyone signs in again), never misread.
const FILE_FORMAT: u32 = 2;

/// The sessions file of one book.
#[derive(Debug)]
pub(super) struct SessionsFile {
    path: PathBuf,
    /// Serializes writers, so an older snapshot can never replace a newer one.
    lock: Mutex<()>,
}

#[derive(Serialize, Deserialize)]
struct Contents {
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

impl SessionsFile {
    pub(super) fn new(path: PathBuf) -> SessionsFile {
        SessionsFile { path, lock: Mutex::new(()) }
    }

    /// The live sessions kept for `token_id`. A missing, unreadable or foreign file means nobody is signed in; the
    /// reason is logged, never fatal.
    pub(super) fn load(&self, token_id: &str, now_unix: u64) -> HashMap<Digest, SharedSession> {
        let path = &self.path;
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the console's sessions; browsers sign in again");
                return HashMap::new();
            }
        };
        let Ok(file) = serde_json::from_slice::<Contents>(&bytes) else {
            tracing::warn!(path = %path.display(), "the console's sessions file is not readable; browsers sign in again");
            return HashMap::new();
        };
        if file.format != FILE_FORMAT || file.token_id != token_id {
            tracing::info!("the console's sessions belong to another token or format; browsers sign in again");
            return HashMap::new();
        }
        file.sessions
            .into_iter()
            .filter(|session| session.expires_unix > now_unix)
            .filter_map(|session| {
                let live =
                    SharedSession { key: Digest::from_hex(&session.key_hash)?, expires_unix: session.expires_unix };
                Some((Digest::from_hex(&session.hash)?, live))
            })
            .collect()
    }

    /// Writes `sessions` durably. Blocking: run it on a blocking thread. `snapshot` is taken under the writers'
    /// lock, so the newest snapshot is the one written last.
    pub(super) fn write(
        &self,
        token_id: &str,
        snapshot: impl FnOnce() -> Vec<(Digest, SharedSession)>,
    ) -> std::io::Result<()> {
        let _writer = self.lock.lock();
        let sessions = snapshot()
            .into_iter()
            .map(|(hash, live)| StoredSession {
                hash: hash.hex(),
                key_hash: live.key.hex(),
                expires_unix: live.expires_unix,
            })
            .collect();
        let contents = Contents { format: FILE_FORMAT, token_id: token_id.to_owned(), sessions };
        let bytes = serde_json::to_vec(&contents).map_err(std::io::Error::other)?;
        write_durably(&self.path, &bytes)
    }
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
