//! The data directory: where every durable file of the daemon lives, and how its private directories are made.
//!
//! Layout under the root (default `~/.troupe`, else `TROUPE_HOME`, else `--data-dir`):
//!
//! ```text
//! config.toml                        optional settings (see `config`)
//! troupe-data-dir                    marks the folder as a data dir for every daemon (see `sandbox::data_dirs`)
//! daemon/token                       the bearer token, mode 0600 (see `token`)
//! daemon/lock                        flocked by the running daemon; holds its pid, written as it reads its config
//! daemon/url                         the URL the running daemon listens on, mode 0600, removed at a clean stop
//! daemon/console-sessions.json       the web console's sign-ins (see the gateway's console book)
//! providers.json                     connected providers and their keys (see `provider_store`)
//! sessions/<session_id>/events.jsonl the session's append-only log (see `event_log`)
//! sessions/<session_id>/meta.json    a cache of the session's metadata (see `meta_cache`)
//! ```
//!
//! Every directory the daemon creates is mode 0700, because the logs hold user prompts, tool output and file
//! contents. A directory that already exists is left as it is: the operator may have chosen its mode on purpose.
//! Creating an entry is only durable once its parent directory is fsynced, so the helpers here do that. A file of
//! the layout found as a directory (or anything but a file) is reported at start ([`DataDir::misplaced_files`]).

use std::ffi::OsString;
use std::fs::{DirBuilder, File};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::error::RuntimeError;

mod misplaced;

pub use misplaced::{Consequence, FoundKind, LayoutFile, Misplaced};

/// The environment variable that names the data directory when `--data-dir` is not given.
pub const DATA_DIR_ENV: &str = "TROUPE_HOME";

/// The data directory's name in a home folder (`~/.troupe`), when neither a flag nor `TROUPE_HOME` names one.
pub const DEFAULT_DATA_DIR_NAME: &str = ".troupe";

/// The mode of every directory the daemon creates: owner only.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// The resolved, absolute root of the data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Resolves the root from, in order: `explicit` (the `--data-dir` flag), the `TROUPE_HOME` environment
    /// variable, then `$HOME/.troupe`. Empty values count as unset. A relative path is made absolute against the
    /// current directory, so that later changes of the current directory cannot move the data.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<DataDir, RuntimeError> {
        resolve_from(explicit, std::env::var_os(DATA_DIR_ENV), std::env::var_os("HOME"))
    }

    /// Uses `root` as it is, without consulting the environment.
    pub fn new(root: PathBuf) -> DataDir {
        DataDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/daemon`: files that belong to the daemon process rather than to a session.
    pub fn daemon_dir(&self) -> PathBuf {
        self.root.join("daemon")
    }

    /// `<root>/daemon/token`.
    pub fn token_path(&self) -> PathBuf {
        self.daemon_dir().join("token")
    }

    /// `<root>/daemon/lock`: the running daemon holds an exclusive `flock` on it and writes its pid into it
    /// right before it reads `config.toml`, so the file's mtime is when the daemon's config was read.
    pub fn lock_path(&self) -> PathBuf {
        self.daemon_dir().join("lock")
    }

    /// `<root>/daemon/url`: the URL the running daemon actually listens on (after `--listen` and port 0), so that
    /// clients of this data dir find it; only trusted while the lock is held.
    pub fn url_path(&self) -> PathBuf {
        self.daemon_dir().join("url")
    }

    /// `<root>/daemon/console-sessions.json`: the web console's sign-ins, kept across restarts.
    pub fn console_sessions_path(&self) -> PathBuf {
        self.daemon_dir().join("console-sessions.json")
    }

    /// `<root>/daemon/session-index.jsonl`: every session's metadata cache, written by a daemon as it stops cleanly
    /// and removed by the next start as it reads it (`session_index`).
    pub fn session_index_path(&self) -> PathBuf {
        self.daemon_dir().join(crate::session_index::SESSION_INDEX_FILE_NAME)
    }

    /// `<root>/config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// `<root>/sessions`.
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// `<root>/sessions/<session_id>`. The caller has validated `session_id` (a UUID), so it cannot climb out
    /// of the sessions directory.
    pub fn session_dir(&self, session_id: &str) -> PathBuf {
        self.sessions_dir().join(session_id)
    }

    /// Creates the root, `daemon/` and `sessions/` with mode 0700 where they are missing. Existing directories
    /// keep their mode. Safe to call from two processes at once.
    pub fn ensure_layout(&self) -> Result<(), RuntimeError> {
        if !self.root.is_dir() {
            // The root's parents may be missing too (a fresh `--data-dir /srv/troupe/a`); they get the same
            // private mode, which is the safe choice for directories nobody asked for by name.
            match DirBuilder::new().recursive(true).mode(PRIVATE_DIR_MODE).create(&self.root) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(RuntimeError::io("create directory", &self.root, error)),
            }
            sync_parent(&self.root)?;
        }
        for dir in [self.daemon_dir(), self.sessions_dir()] {
            if dir.is_dir() {
                continue;
            }
            match create_private_dir(&dir) {
                Ok(()) => {}
                // Another process created it between the check and the creation; that is the same outcome, unless
                // what is there is not a directory (a file of that name), which nothing here can work with.
                Err(RuntimeError::Io { source, .. })
                    if source.kind() == io::ErrorKind::AlreadyExists && !dir.is_dir() =>
                {
                    return Err(RuntimeError::io(
                        "use as a directory (it is something else: move it away and start again)",
                        &dir,
                        source,
                    ));
                }
                Err(RuntimeError::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
}

/// The environment-free core of [`DataDir::resolve`], so tests need not mutate the process environment.
fn resolve_from(
    explicit: Option<PathBuf>,
    troupe_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<DataDir, RuntimeError> {
    let chosen = match explicit.filter(|path| !path.as_os_str().is_empty()) {
        Some(path) => path,
        None => match troupe_home.filter(|value| !value.is_empty()) {
            Some(value) => PathBuf::from(value),
            None => match home.filter(|value| !value.is_empty()) {
                Some(home) => PathBuf::from(home).join(DEFAULT_DATA_DIR_NAME),
                None => return Err(RuntimeError::HomeNotSet),
            },
        },
    };
    let root = if chosen.is_absolute() {
        chosen
    } else {
        std::path::absolute(&chosen).map_err(|source| RuntimeError::AbsolutePath { path: chosen.clone(), source })?
    };
    Ok(DataDir { root })
}

/// Creates one directory with mode 0700 and fsyncs its parent, so the new entry survives a crash. Fails when
/// the directory already exists (with an [`io::ErrorKind::AlreadyExists`] source) or its parent is missing:
/// callers that need a fresh directory rely on both.
pub fn create_private_dir(path: &Path) -> Result<(), RuntimeError> {
    DirBuilder::new()
        .mode(PRIVATE_DIR_MODE)
        .create(path)
        .map_err(|error| RuntimeError::io("create directory", path, error))?;
    sync_parent(path)
}

/// Fsyncs the directory that holds `path`, making a new entry for `path` durable.
fn sync_parent(path: &Path) -> Result<(), RuntimeError> {
    match path.parent() {
        // `Path::new("name").parent()` is `Some("")`, which means the current directory.
        Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new(".")),
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Whether a file replaced by [`replace_file`] must survive a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The file and the rename are fsynced: after a crash it is the old file or the new one, whole.
    Durable,
    /// A cache, checked against what it derives from when read: no fsync, a crash may lose the replacement.
    Cache,
}

/// Replaces the file at `path` with `bytes` (mode 0600) through a uniquely named temporary file beside it, renamed
/// over it, so a reader sees the old file or the new one, and two writers never share a temporary file. A failed
/// write removes its temporary file.
pub fn replace_file(path: &Path, bytes: &[u8], durability: Durability) -> Result<(), RuntimeError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (Some(dir), Some(file_name)) = (path.parent(), path.file_name()) else {
        let refused = std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file in a directory");
        return Err(RuntimeError::io("replace", path, refused));
    };
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(file_name);
    temporary_name.push(format!(".{}.tmp", crate::clock::new_id()));
    let temporary_path = dir.join(temporary_name);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary_path)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            if durability == Durability::Durable { file.sync_all() } else { Ok(()) }
        })
        .map_err(|error| RuntimeError::io("write", &temporary_path, error))
        .and_then(|()| {
            std::fs::rename(&temporary_path, path).map_err(|error| RuntimeError::io("replace", path, error))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary_path);
    }
    written?;
    match durability {
        // An empty parent is the current directory.
        Durability::Durable => sync_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }),
        Durability::Cache => Ok(()),
    }
}

/// Fsyncs a directory, making the creation, rename or removal of its entries durable.
pub fn sync_dir(path: &Path) -> Result<(), RuntimeError> {
    File::open(path)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| RuntimeError::io("sync directory", path, error))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn replace_file_swaps_the_whole_file_privately_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old and longer").unwrap();
        for durability in [Durability::Durable, Durability::Cache] {
            replace_file(&path, b"new", durability).unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
            assert_eq!(mode_of(&path), 0o600);
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
        assert_eq!(names, ["state.json"], "no temporary file is left behind");
        let missing = dir.path().join("no-such-dir").join("state.json");
        assert!(replace_file(&missing, b"x", Durability::Durable).is_err());
        assert!(replace_file(Path::new("/"), b"x", Durability::Durable).is_err(), "a path that names no file");
    }

    #[test]
    fn explicit_path_wins_over_environment() {
        let resolved =
            resolve_from(Some(PathBuf::from("/srv/explicit")), Some("/srv/env".into()), Some("/home/user".into()))
                .unwrap();
        assert_eq!(resolved.root(), Path::new("/srv/explicit"));
    }

    #[test]
    fn troupe_home_wins_over_home() {
        let resolved = resolve_from(None, Some("/srv/env".into()), Some("/home/user".into())).unwrap();
        assert_eq!(resolved.root(), Path::new("/srv/env"));
    }

    #[test]
    fn home_is_the_fallback_and_empty_values_count_as_unset() {
        let resolved = resolve_from(Some(PathBuf::new()), Some("".into()), Some("/home/user".into())).unwrap();
        assert_eq!(resolved.root(), Path::new("/home/user/.troupe"));
    }

    #[test]
    fn missing_home_is_a_clear_error() {
        let error = resolve_from(None, None, None).unwrap_err();
        assert!(matches!(error, RuntimeError::HomeNotSet));
        assert!(error.to_string().contains("HOME is not set"));
    }

    #[test]
    fn relative_paths_become_absolute() {
        let resolved = resolve_from(Some(PathBuf::from("relative/data")), None, None).unwrap();
        assert!(resolved.root().is_absolute());
        assert!(resolved.root().ends_with("relative/data"));
        assert_eq!(resolved.root(), std::env::current_dir().unwrap().join("relative/data"));
    }

    #[test]
    fn paths_follow_the_layout() {
        let data_dir = DataDir::new(PathBuf::from("/data"));
        assert_eq!(data_dir.daemon_dir(), Path::new("/data/daemon"));
        assert_eq!(data_dir.token_path(), Path::new("/data/daemon/token"));
        assert_eq!(data_dir.config_path(), Path::new("/data/config.toml"));
        assert_eq!(data_dir.sessions_dir(), Path::new("/data/sessions"));
        assert_eq!(data_dir.session_dir("abc"), Path::new("/data/sessions/abc"));
    }

    #[test]
    fn ensure_layout_creates_private_directories_and_is_idempotent() {
        let temp = tempfile::tempdir().unwrap();
        let data_dir = DataDir::new(temp.path().join("nested/root"));
        data_dir.ensure_layout().unwrap();
        for dir in [data_dir.root().to_path_buf(), data_dir.daemon_dir(), data_dir.sessions_dir()] {
            assert!(dir.is_dir());
            assert_eq!(mode_of(&dir), 0o700, "{}", dir.display());
        }
        // An operator's own mode on an existing directory is left alone.
        std::fs::set_permissions(data_dir.sessions_dir(), std::fs::Permissions::from_mode(0o750)).unwrap();
        data_dir.ensure_layout().unwrap();
        assert_eq!(mode_of(&data_dir.sessions_dir()), 0o750);
    }

    #[test]
    fn create_private_dir_refuses_an_existing_directory() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("fresh");
        create_private_dir(&path).unwrap();
        assert_eq!(mode_of(&path), 0o700);
        match create_private_dir(&path).unwrap_err() {
            RuntimeError::Io { source, .. } => {
                assert_eq!(source.kind(), io::ErrorKind::AlreadyExists)
            }
            other => panic!("unexpected error {other:?}"),
        }
    }
}
