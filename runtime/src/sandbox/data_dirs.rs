//! Every troupe data directory, not only this daemon's: found, denied to tools and its secrets masked.
//!
//! Another daemon's data directory (a `troupe serve --data-dir .troupe-dev` inside a project, a test daemon under
//! `/tmp`) holds a token that drives that daemon, which in turn reads everything its user can. So each one is a
//! denied path like this daemon's own, wherever it is and whichever daemon made it. Three ways find them:
//!
//! - **The registry** (`~/.troupe/known-data-dirs`, one absolute path a line): every daemon records its data dir
//!   there at start and drops the lines that no longer name a data dir. `~/.troupe` is a default denied path, so
//!   no tool can read or edit the list. It is read again whenever it changes.
//! - **By layout**, for data dirs of older daemons or of a daemon with another `$HOME`: a folder holding
//!   [`MARKER`] (written by every daemon since), or an older daemon's `daemon/token` or `daemon/lock`, or
//!   `providers.json` beside `sessions/`. Planning a command looks for them in the session's cwd (breadth first,
//!   at most [`MAX_SCANNED_DIRS`] folders and [`MAX_SCAN_DEPTH`] levels, cached for [`TREE_SCAN_TTL`]) and among
//!   the entries of the home folder and the system temp dir (cached until that folder changes).
//!
//!   A data dir once found stays denied while it is there ([`still_denied`]), whatever a later look finds: a
//!   command could otherwise push it out of the scan's bounds (thousands of folders in front of it) or make it
//!   unreadable (so its layout cannot be checked), and read it at its next call.
//! - **Above a file**: in-process file tools check every folder above the real location of what they open
//!   ([`holding_data_dir`]), a few `stat` calls that need no list at all.
//!
//! The tokens and provider keys of the data dirs found are added to the masked secrets ([`crate::redact`]), so
//! that what reaches a command anyway (a hard link made before) never reaches the model.

use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::data_dir::DEFAULT_DATA_DIR_NAME;
use crate::redact::Secrets;

/// The file every daemon writes into its data dir so that any daemon recognises the folder by layout.
pub const MARKER: &str = "troupe-data-dir";

/// What the marker says to a person who finds it.
const MARKER_TEXT: &str = "This folder is a troupe data directory. Tools of every troupe daemon may neither read nor \
                           write it.\n";

/// The registry's name inside `~/.troupe`.
pub const REGISTRY_FILE: &str = "known-data-dirs";

/// The most data dirs the registry keeps (the most recent); a registry written by hand may hold more lines, of
/// which this many are read.
const MAX_REGISTERED: usize = 256;

/// The largest registry, `providers.json` or token read, in bytes.
const MAX_READ_BYTES: u64 = 1 << 20;

/// The most folders one scan of a session's cwd visits, and how deep it goes below it.
pub const MAX_SCANNED_DIRS: usize = 4096;
pub const MAX_SCAN_DEPTH: usize = 6;

/// How long the scan of one cwd is reused. Data dirs that new daemons make are in the registry at once; only an
/// older daemon's data dir made inside the cwd meanwhile waits for the next scan.
pub const TREE_SCAN_TTL: Duration = Duration::from_secs(30);

/// The label prefix of the masked secrets of other data dirs.
/// Bounds of what the data dirs found add to the masked secrets (see `DataDirFinder::sync_secrets`).
const MAX_MASKED_DATA_DIRS: usize = 64;
const MAX_SECRETS_PER_DATA_DIR: usize = 32;
const MAX_SECRET_VALUE_BYTES: usize = 4096;

const SECRET_LABEL_PREFIX: &str = "troupe data dir ";

/// Whether `dir` is a troupe data directory, by its layout: the marker, or what older daemons left. Links are not
/// followed (a symlink named `daemon` makes nothing a data dir). A few `lstat` calls.
pub fn is_data_dir(dir: &Path) -> bool {
    matches!(data_dir_layout(dir), Layout::DataDir)
}

/// What [`data_dir_layout`] found in a folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    DataDir,
    /// Not a data dir. `by_own_entries`: judged by the folder's own entries alone (no `daemon` folder in it), so
    /// that it can only become one by a change of its entries, which changes its mtime.
    Other {
        by_own_entries: bool,
    },
}

/// Whether `dir` is a troupe data directory, as [`is_data_dir`] says, and whether a folder that is not one can
/// become one without its mtime changing (a `token` written into a `daemon` folder it already has).
pub(crate) fn data_dir_layout(dir: &Path) -> Layout {
    let is_file = |path: PathBuf| std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_file());
    let is_dir = |path: PathBuf| std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.is_dir());
    if is_file(dir.join(MARKER)) {
        return Layout::DataDir;
    }
    // Older daemons: the token and the lock are written at every start; the providers file lives beside the logs.
    let daemon_folder = is_dir(dir.join("daemon"));
    if (daemon_folder && (is_file(dir.join("daemon/token")) || is_file(dir.join("daemon/lock"))))
        || (is_file(dir.join(crate::provider_store::PROVIDERS_FILE_NAME)) && is_dir(dir.join("sessions")))
    {
        return Layout::DataDir;
    }
    Layout::Other { by_own_entries: !daemon_folder }
}

/// The data dir that `location` (absolute, real) is or lies in, nearest first, by layout. `/` is never one.
pub fn holding_data_dir(location: &Path) -> Option<PathBuf> {
    location.ancestors().filter(|dir| dir.parent().is_some()).find(|dir| is_data_dir(dir)).map(Path::to_path_buf)
}

/// Writes the marker into the data dir `root` when it is missing. Blocking I/O.
pub fn write_marker(root: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join(MARKER);
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
        Ok(mut file) => file.write_all(MARKER_TEXT.as_bytes()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

/// `<home>/.troupe/known-data-dirs`.
pub fn registry_path(home: &Path) -> PathBuf {
    home.join(DEFAULT_DATA_DIR_NAME).join(REGISTRY_FILE)
}

/// Records the data dir `own` (canonical) in the registry of `home`'s user, dropping the lines that no longer name
/// a data dir. Writers take an `flock` on a file beside it and replace the registry whole, so readers never see
/// half a list. Blocking I/O.
pub fn register(home: &Path, own: &Path) -> Result<(), crate::error::RuntimeError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let registry = registry_path(home);
    let folder = home.join(DEFAULT_DATA_DIR_NAME);
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |error| crate::error::RuntimeError::io(action, &path, error)
    };
    match std::fs::DirBuilder::new().mode(crate::data_dir::PRIVATE_DIR_MODE).create(&folder) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(io("create directory", &folder)(error)),
    }
    let lock_path = folder.join(format!("{REGISTRY_FILE}.lock"));
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&lock_path)
        .map_err(io("open", &lock_path))?;
    // SAFETY: flock on a descriptor this function owns; it is released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io("lock", &lock_path)(std::io::Error::last_os_error()));
    }
    let mut kept: Vec<PathBuf> =
        read_registry(&registry).into_iter().filter(|dir| dir != own && is_data_dir(dir)).collect();
    kept.push(own.to_path_buf());
    let skip = kept.len().saturating_sub(MAX_REGISTERED);
    let mut text = String::new();
    for dir in kept.iter().skip(skip) {
        text.push_str(&dir.to_string_lossy());
        text.push('\n');
    }
    if std::fs::read(&registry).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(());
    }
    crate::data_dir::replace_file(&registry, text.as_bytes(), crate::data_dir::Durability::Durable)
}

/// The absolute paths the registry names (lines that are not absolute, or hold a NUL, are skipped).
fn read_registry(registry: &Path) -> Vec<PathBuf> {
    let Some(text) = read_small(registry) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for line in text.lines().filter(|line| line.starts_with('/') && !line.contains('\0')) {
        let dir = PathBuf::from(line);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let skip = dirs.len().saturating_sub(MAX_REGISTERED);
    dirs.split_off(skip)
}

/// A regular file's text, at most [`MAX_READ_BYTES`], links not followed.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = crate::regular_file::open_regular(path, crate::regular_file::Links::Refuse).ok()?;
    let mut text = String::new();
    file.take(MAX_READ_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}

/// What a folder looked like when it was last read: a change of its entries changes its mtime or ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    len: u64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let metadata = std::fs::metadata(path).ok()?;
        Some(Stamp {
            ino: metadata.ino(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
            len: metadata.len(),
        })
    }
}

/// The system's account database, whose home folders hold the accounts' default data dirs.
const ACCOUNTS: &str = "/etc/passwd";

/// The most home folders looked at (a directory service can list many accounts; the first ones are the system's
/// and the local users').
const MAX_HOMES: usize = 256;

/// The distinct absolute home folders of the accounts in `passwd` (`name:x:uid:gid:gecos:home:shell`), at most
/// [`MAX_HOMES`]; the root folder is skipped (system accounts).
fn account_homes(passwd: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(passwd) else { return Vec::new() };
    let mut homes: Vec<PathBuf> = Vec::new();
    for home in text.lines().filter_map(home_of) {
        let home = PathBuf::from(home);
        if home.is_absolute() && home != Path::new("/") && !homes.contains(&home) {
            homes.push(home);
            if homes.len() == MAX_HOMES {
                break;
            }
        }
    }
    homes
}

/// The home field of an account line, when the line has the seven fields of one.
fn home_of(line: &str) -> Option<&str> {
    let fields: Vec<&str> = line.split(':').collect();
    (fields.len() == 7).then(|| fields[5])
}

/// The caches of the finder.
#[derive(Debug, Default)]
struct FinderState {
    registry: Option<(Option<Stamp>, Vec<PathBuf>)>,
    /// The data dirs among the entries of each shallow folder (home, temp dir), by the folder's stamp.
    shallow: HashMap<PathBuf, (Option<Stamp>, Vec<PathBuf>)>,
    /// The home folders of the system's accounts, by the stamp of the account database, and the data dirs found
    /// among their default ones, and when they were looked for.
    homes: Option<(Option<Stamp>, Vec<PathBuf>)>,
    home_data_dirs: Option<(Instant, Vec<PathBuf>)>,
    /// The data dirs below each scanned cwd, and when it was scanned.
    trees: HashMap<PathBuf, (Instant, Vec<PathBuf>)>,
    /// The secret files read per data dir, by their stamps, so unchanged ones are not read again.
    secret_stamps: HashMap<PathBuf, Vec<Option<Stamp>>>,
}

/// Finds the other data dirs a command could reach and keeps their secrets masked. Shared by every run.
#[derive(Debug)]
pub struct DataDirFinder {
    /// This daemon's own data dir (canonical): denied on its own, and its secrets are masked by the daemon.
    own: PathBuf,
    registry: Option<PathBuf>,
    /// The account database whose homes' default data dirs are found (`/etc/passwd`).
    accounts: PathBuf,
    /// Folders whose entries are checked one level deep: the home folder and the system temp dir.
    shallow_roots: Vec<PathBuf>,
    secrets: Mutex<Option<Secrets>>,
    state: Mutex<FinderState>,
}

impl DataDirFinder {
    /// A finder for the daemon of `own` (canonical) whose user's home is `home`.
    pub fn new(own: &Path, home: Option<&Path>) -> DataDirFinder {
        let canonical = |path: PathBuf| path.canonicalize().unwrap_or(path);
        let mut shallow_roots: Vec<PathBuf> = home.map(Path::to_path_buf).into_iter().map(canonical).collect();
        let temp = canonical(std::env::temp_dir());
        if !shallow_roots.contains(&temp) {
            shallow_roots.push(temp);
        }
        DataDirFinder {
            own: own.to_path_buf(),
            registry: home.map(registry_path),
            accounts: PathBuf::from(ACCOUNTS),
            shallow_roots,
            secrets: Mutex::new(None),
            state: Mutex::new(FinderState::default()),
        }
    }

    /// Masks the secrets of every data dir found from now on in `secrets`, starting with those found without a
    /// cwd (the registry, the home folder, the temp dir). Blocking I/O.
    pub fn mask_secrets_in(&self, secrets: Secrets) {
        *self.secrets.lock().unwrap_or_else(PoisonError::into_inner) = Some(secrets);
        let found = self.everywhere_but_trees();
        self.sync_secrets(&found);
    }

    /// Masks the secrets of data dirs that appeared since the last look: the registry and the entries of the home
    /// folder and the temp dir, each read again only when it changed. For the end of a long tool call: a daemon
    /// started meanwhile (it registers its data dir) has its secrets masked in that call's result. Blocking I/O.
    pub fn refresh_secrets(&self) {
        let found = self.everywhere_but_trees();
        self.sync_secrets(&found);
    }

    /// The other data dirs (canonical, this daemon's excluded) that a command started in `cwd` could reach: the
    /// registered ones, those among the entries of the home folder and the temp dir, and those inside `cwd` (or
    /// `cwd` itself, or a folder above it). Their secrets are added to the masked ones before this returns.
    /// Blocking I/O, cached.
    pub fn around(&self, cwd: &Path) -> Vec<PathBuf> {
        let mut found = self.everywhere_but_trees();
        if let Some(holder) = holding_data_dir(cwd) {
            push_new(&mut found, holder);
        }
        for dir in self.tree(cwd) {
            push_new(&mut found, dir);
        }
        found.retain(|dir| *dir != self.own);
        self.sync_secrets(&found);
        found
    }

    fn everywhere_but_trees(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(registry) = &self.registry {
            let stamp = Stamp::of(registry);
            if state.registry.as_ref().is_none_or(|(known, _)| *known != stamp) {
                // A registry that is there but cannot be read (made unreadable since) keeps the list it had.
                let unreadable = registry.symlink_metadata().is_ok() && read_small(registry).is_none();
                if !unreadable || state.registry.is_none() {
                    let dirs =
                        read_registry(registry).into_iter().map(|dir| dir.canonicalize().unwrap_or(dir)).collect();
                    state.registry = Some((stamp, dirs));
                }
            }
            if let Some((_, dirs)) = &state.registry {
                found.extend(dirs.iter().filter(|dir| still_denied(dir)).cloned());
            }
        }
        // Every account's default data dir (`~/.troupe`): another user's daemon, or one started with another
        // `HOME`, registers in its own home, not in this one's registry.
        let stamp = Stamp::of(&self.accounts);
        if state.homes.as_ref().is_none_or(|(known, _)| *known != stamp) {
            state.homes = Some((stamp, account_homes(&self.accounts)));
            state.home_data_dirs = None;
        }
        if state.home_data_dirs.as_ref().is_none_or(|(when, _)| when.elapsed() >= TREE_SCAN_TTL) {
            let homes = state.homes.as_ref().map(|(_, homes)| homes.as_slice()).unwrap_or_default();
            let dirs = homes
                .iter()
                .map(|home| home.join(DEFAULT_DATA_DIR_NAME))
                .filter(|dir| is_data_dir(dir))
                .map(|dir| dir.canonicalize().unwrap_or(dir))
                .collect();
            state.home_data_dirs = Some((Instant::now(), dirs));
        }
        if let Some((_, dirs)) = &state.home_data_dirs {
            for dir in dirs {
                push_new(&mut found, dir.clone());
            }
        }
        for root in &self.shallow_roots {
            let stamp = Stamp::of(root);
            let cached = state.shallow.get(root).filter(|(known, _)| *known == stamp);
            let dirs = match cached {
                Some((_, dirs)) => dirs.clone(),
                None => {
                    let before = state.shallow.get(root).map(|(_, dirs)| dirs.as_slice()).unwrap_or_default();
                    let dirs = with_those_still_denied(data_dirs_among_entries(root), before);
                    state.shallow.insert(root.clone(), (stamp, dirs.clone()));
                    dirs
                }
            };
            for dir in dirs {
                push_new(&mut found, dir);
            }
        }
        found.retain(|dir| *dir != self.own);
        found
    }

    /// The data dirs below `cwd`, from a scan at most [`TREE_SCAN_TTL`] old.
    fn tree(&self, cwd: &Path) -> Vec<PathBuf> {
        {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((scanned, dirs)) = state.trees.get(cwd)
                && scanned.elapsed() < TREE_SCAN_TTL
            {
                return dirs.clone();
            }
        }
        let scanned = scan_tree(cwd);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // What an earlier scan found stays denied while it is there: a command must not push a data dir out of
        // the scan's bounds (thousands of new folders in front of it) and then read it.
        let before = state.trees.get(cwd).map(|(_, dirs)| dirs.as_slice()).unwrap_or_default();
        let dirs = with_those_still_denied(scanned, before);
        // Sessions come and go; a few hundred cwds are plenty to remember, and those where a data dir was found
        // are forgotten last.
        if state.trees.len() >= 256 {
            state.trees.retain(|_, (scanned, dirs)| !dirs.is_empty() || scanned.elapsed() < TREE_SCAN_TTL);
        }
        if state.trees.len() >= 1024 {
            state.trees.retain(|_, (scanned, _)| scanned.elapsed() < TREE_SCAN_TTL);
        }
        state.trees.insert(cwd.to_path_buf(), (Instant::now(), dirs.clone()));
        dirs
    }

    /// Reads the token and the provider keys of each data dir whose secret files changed, into the masked secrets.
    /// A data dir inside a session's cwd may have been laid out by a tool, so what it adds is bounded: at most
    /// [`MAX_MASKED_DATA_DIRS`] data dirs, each with at most [`MAX_SECRETS_PER_DATA_DIR`] values of at most
    /// [`MAX_SECRET_VALUE_BYTES`], so planted folders cannot grow the set every output chunk is scanned against.
    fn sync_secrets(&self, dirs: &[PathBuf]) {
        let Some(secrets) = self.secrets.lock().unwrap_or_else(PoisonError::into_inner).clone() else {
            return;
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for dir in dirs {
            let files = secret_files(dir);
            let stamps: Vec<Option<Stamp>> = files.iter().map(|path| Stamp::of(path)).collect();
            if state.secret_stamps.get(dir) == Some(&stamps) {
                continue;
            }
            if !state.secret_stamps.contains_key(dir) && state.secret_stamps.len() >= MAX_MASKED_DATA_DIRS {
                tracing::warn!(data_dir = %dir.display(), "too many data dirs found to mask the secrets of another");
                continue;
            }
            for (label, value) in secrets_of(dir) {
                secrets.set(label, value);
            }
            state.secret_stamps.insert(dir.clone(), stamps);
        }
    }
}

/// The files of a data dir that hold secrets.
fn secret_files(dir: &Path) -> [PathBuf; 2] {
    [dir.join("daemon/token"), dir.join(crate::provider_store::PROVIDERS_FILE_NAME)]
}

/// The labelled secrets of the data dir `dir`: its token and every provider credential in its `providers.json`
/// (read as plain JSON, so a file of another version still gives up its keys).
fn secrets_of(dir: &Path) -> Vec<(String, String)> {
    let [token_path, providers_path] = secret_files(dir);
    let mut found = Vec::new();
    let mut push = |label: String, value: &str| {
        if found.len() < MAX_SECRETS_PER_DATA_DIR && value.len() <= MAX_SECRET_VALUE_BYTES {
            found.push((label, value.to_owned()));
        }
    };
    if let Some(token) = read_small(&token_path) {
        push(format!("{SECRET_LABEL_PREFIX}token ({})", dir.display()), token.trim());
    }
    let providers = read_small(&providers_path).and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok());
    if let Some(serde_json::Value::Object(connections)) = providers.as_ref().and_then(|value| value.get("connections"))
    {
        for (provider, connection) in connections {
            let Some(serde_json::Value::Object(values)) = connection.get("auth_values") else { continue };
            for (name, value) in values {
                if let Some(value) = value.as_str() {
                    let label = format!("{SECRET_LABEL_PREFIX}{provider} {name} ({})", dir.display());
                    push(label, value);
                }
            }
        }
    }
    found
}

/// Whether a data dir found before is still denied: it still is one by layout, or it is still a folder whose layout
/// cannot be read (one made unreadable since: hiding it must not open it). Gone, it is not.
fn still_denied(dir: &Path) -> bool {
    is_data_dir(dir)
        || (dir.symlink_metadata().is_ok_and(|metadata| metadata.is_dir()) && std::fs::read_dir(dir).is_err())
}

/// The most data dirs remembered for one folder: those found now, then those found before that are still denied.
const MAX_REMEMBERED: usize = 256;

/// `found`, and those of `before` still denied ([`still_denied`]), at most [`MAX_REMEMBERED`].
fn with_those_still_denied(mut found: Vec<PathBuf>, before: &[PathBuf]) -> Vec<PathBuf> {
    for dir in before {
        if found.len() >= MAX_REMEMBERED {
            break;
        }
        if !found.contains(dir) && still_denied(dir) {
            found.push(dir.clone());
        }
    }
    found
}

/// The entries of `root` that are data dirs (canonical), links not followed.
fn data_dirs_among_entries(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .filter(|path| is_data_dir(path))
        .collect()
}

/// The data dirs inside `cwd`, breadth first (the shallow ones, where people put them, are found first), at most
/// [`MAX_SCANNED_DIRS`] folders and [`MAX_SCAN_DEPTH`] levels deep; links are not followed, and a data dir found
/// is not entered.
fn scan_tree(cwd: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = VecDeque::from([(cwd.to_path_buf(), 0usize)]);
    let mut visited = 0usize;
    while let Some((dir, depth)) = pending.pop_front() {
        visited += 1;
        if visited > MAX_SCANNED_DIRS {
            tracing::debug!(cwd = %cwd.display(), limit = MAX_SCANNED_DIRS, "stopped looking for data dirs in a big cwd");
            break;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                continue;
            }
            let path = entry.path();
            if is_data_dir(&path) {
                found.push(path);
            } else if depth + 1 < MAX_SCAN_DEPTH {
                pending.push_back((path, depth + 1));
            }
        }
    }
    found
}

fn push_new(paths: &mut Vec<PathBuf>, path: PathBuf) {
    if !paths.contains(&path) {
        paths.push(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy_data_dir(path: &Path) {
        std::fs::create_dir_all(path.join("daemon")).unwrap();
        std::fs::create_dir_all(path.join("sessions")).unwrap();
        std::fs::write(path.join("daemon/token"), "legacy-token-0123456789").unwrap();
        std::fs::write(path.join("config.toml"), "").unwrap();
    }

    #[test]
    fn a_data_dir_found_once_stays_denied_when_a_scan_no_longer_reaches_it() {
        let cwd = tempfile::tempdir().unwrap();
        let dir = cwd.path().join("sub/a/.olddata");
        legacy_data_dir(&dir);
        let first = scan_tree(cwd.path());
        assert_eq!(first, std::slice::from_ref(&dir));
        // Folders in front of it, more than a scan visits.
        for index in 0..MAX_SCANNED_DIRS + 10 {
            std::fs::create_dir(cwd.path().join(format!("p{index}"))).unwrap();
        }
        let later = scan_tree(cwd.path());
        assert!(later.is_empty(), "the scan stops before it: {later:?}");
        assert_eq!(with_those_still_denied(later, &first), std::slice::from_ref(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(with_those_still_denied(Vec::new(), &first).is_empty(), "gone, it is forgotten");
    }

    #[test]
    fn every_accounts_home_is_read_once_and_bounded() {
        let base = tempfile::tempdir().unwrap();
        let passwd = base.path().join("passwd");
        let mut text = String::from("root:x:0:0:root:/root:/bin/bash\nbin:x:1:1::/:/usr/sbin/nologin\n");
        text.push_str(
            "u:x:1000:1000::/home/u:/bin/sh\nagain:x:1001:1001::/home/u:/bin/sh\nodd:x:2:2::relative:/bin/sh\n",
        );
        text.push_str("short:line:/home/short\n");
        for index in 0..300 {
            text.push_str(&format!("user{index}:x:{}:100::/home/user{index}:/bin/sh\n", 2000 + index));
        }
        std::fs::write(&passwd, text).unwrap();
        let homes = account_homes(&passwd);
        assert_eq!(&homes[..3], [PathBuf::from("/root"), PathBuf::from("/home/u"), PathBuf::from("/home/user0")]);
        assert_eq!(homes.len(), MAX_HOMES);
        assert!(account_homes(&base.path().join("missing")).is_empty());
    }

    #[test]
    fn data_dirs_are_recognised_by_marker_and_by_an_older_daemons_layout() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let marked = base.join("marked");
        std::fs::create_dir(&marked).unwrap();
        assert!(!is_data_dir(&marked));
        write_marker(&marked).unwrap();
        write_marker(&marked).unwrap();
        assert!(is_data_dir(&marked));

        let legacy = base.join("legacy");
        legacy_data_dir(&legacy);
        assert!(is_data_dir(&legacy));
        let providers_only = base.join("providers-only");
        std::fs::create_dir_all(providers_only.join("sessions")).unwrap();
        std::fs::write(providers_only.join("providers.json"), "{}").unwrap();
        assert!(is_data_dir(&providers_only));

        // A symlink named like the layout makes nothing a data dir.
        let linked = base.join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::os::unix::fs::symlink(legacy.join("daemon"), linked.join("daemon")).unwrap();
        assert!(!is_data_dir(&linked));

        assert_eq!(holding_data_dir(&legacy.join("sessions/x/events.jsonl")), Some(legacy.clone()));
        assert_eq!(holding_data_dir(&linked.join("daemon/token")), None);
    }

    #[test]
    fn a_planted_data_dir_adds_a_bounded_number_of_bounded_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().canonicalize().unwrap();
        legacy_data_dir(&dir);
        let values: serde_json::Map<String, serde_json::Value> =
            (0..1000).map(|index| (format!("key{index}"), format!("planted-value-{index:04}").into())).collect();
        let mut values = values;
        values.insert("huge".into(), "x".repeat(MAX_SECRET_VALUE_BYTES + 1).into());
        let providers = serde_json::json!({"connections": {"openai": {"auth_values": values}}});
        std::fs::write(dir.join("providers.json"), providers.to_string()).unwrap();
        let found = secrets_of(&dir);
        assert_eq!(found.len(), MAX_SECRETS_PER_DATA_DIR, "the token and the first keys only");
        assert!(found.iter().all(|(_, value)| value.len() <= MAX_SECRET_VALUE_BYTES));
        assert_eq!(found[0].1, "legacy-token-0123456789", "the token comes first");
    }

    #[test]
    fn the_registry_keeps_live_data_dirs_and_the_finder_finds_them_and_masks_their_secrets() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let elsewhere = elsewhere.path().canonicalize().unwrap();
        let own = elsewhere.join("own");
        let other = elsewhere.join("other");
        for dir in [&own, &other] {
            std::fs::create_dir(dir).unwrap();
            write_marker(dir).unwrap();
        }
        let gone = elsewhere.join("gone");
        std::fs::create_dir(&gone).unwrap();
        write_marker(&gone).unwrap();
        register(&home, &gone).unwrap();
        register(&home, &other).unwrap();
        std::fs::remove_dir_all(&gone).unwrap();
        std::fs::create_dir_all(other.join("daemon")).unwrap();
        std::fs::write(other.join("daemon/token"), "other-daemon-token-42\n").unwrap();
        let providers =
            serde_json::json!({"connections": {"openai": {"auth_values": {"api_key": "sk-other-1234567"}}}});
        std::fs::write(other.join("providers.json"), providers.to_string()).unwrap();
        register(&home, &own).unwrap();
        assert_eq!(read_registry(&registry_path(&home)), vec![other.clone(), own.clone()], "the gone one is dropped");

        let finder = DataDirFinder::new(&own, Some(&home));
        let secrets = Secrets::new();
        finder.mask_secrets_in(secrets.clone());
        let masked = secrets.redact("other-daemon-token-42 sk-other-1234567");
        assert!(!masked.text.contains("other-daemon-token-42") && !masked.text.contains("sk-other-1234567"));
        assert_eq!(masked.labels.len(), 2, "{:?}", masked.labels);

        // Another account's default data dir (its daemon registers in its own home): found through its home.
        let user_home = elsewhere.join("home-b");
        std::fs::create_dir_all(user_home.join(".troupe")).unwrap();
        write_marker(&user_home.join(".troupe")).unwrap();
        let accounts = elsewhere.join("passwd");
        std::fs::write(&accounts, format!("b:x:1001:1001::{}:/bin/sh\n", user_home.display())).unwrap();
        let finder_with_accounts = DataDirFinder { accounts, ..DataDirFinder::new(&own, Some(&home)) };
        assert!(finder_with_accounts.around(&elsewhere.join("nowhere")).contains(&user_home.join(".troupe")));
        assert!(!finder.around(&elsewhere.join("nowhere")).contains(&user_home.join(".troupe")), "not in /etc/passwd");

        // Inside a cwd: a data dir of an older daemon, two levels down, is found; the cwd's own folders are not.
        let cwd = elsewhere.join("project");
        std::fs::create_dir_all(cwd.join("src/deep")).unwrap();
        legacy_data_dir(&cwd.join("src/.troupe-dev"));
        let found = finder.around(&cwd);
        assert!(found.contains(&other) && found.contains(&cwd.join("src/.troupe-dev")), "{found:?}");
        assert!(!found.contains(&own), "{found:?}");
        assert!(secrets.redact("legacy-token-0123456789").labels.len() == 1);
        // A cwd inside a data dir: that data dir is found.
        assert!(finder.around(&cwd.join("src/.troupe-dev/sessions")).contains(&cwd.join("src/.troupe-dev")));
    }
}
