//! Folders found clear of denied paths, remembered so that checking where a file lies walks only the folders not
//! seen lately.
//!
//! [`super::protected`] judges an opened file by every folder above its real location: the folder's identity
//! against the denied paths' (a bind mount) and its layout (another daemon's data dir). Walked afresh for every
//! open, that was about twenty `stat` calls for a file in a shallow cwd, twice per call, and a search walked every
//! folder above every file it read. So a folder found clear is remembered with its identity and mtime as clear
//! together with every folder above it, and a later walk that meets it stops there, after one `stat`, when:
//!
//! - its identity and mtime are unchanged. Every layout that makes a folder a data dir (its marker,
//!   `daemon/token`, `providers.json` beside `sessions/`) starts with an entry made in the folder itself, which
//!   changes its mtime, so a folder that becomes a data dir is judged again at once. A folder holding a `daemon`
//!   folder is never remembered: a token written into that folder changes no mtime of its own.
//! - its mtime was safely older than the check ([`mtime_margin`]): a change within the same tick of the file
//!   system's coarse clock may leave the mtime as it was.
//! - the folders above it were checked less than [`RECHECK_AFTER`] ago. Changes higher up (a data dir made
//!   around a folder that existed, a denied folder mounted over one) are therefore seen within that time rather
//!   than at once; what such a change exposes is a folder that existed before it, not the data dir's own files
//!   (`daemon/token` and the like are new entries, judged afresh).
//!
//! A new folder is never remembered yet, so a file in it is always judged by a full walk up to the first folder
//! that is.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// How long a check of the folders above a remembered folder is trusted.
pub(super) const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// The most folders remembered at once; the memory is emptied when full.
const MAX_REMEMBERED: usize = 4096;

/// A folder that a walk found clear, as it was then.
#[derive(Clone, Debug)]
pub(super) struct CheckedFolder {
    path: PathBuf,
    state: FolderState,
}

impl CheckedFolder {
    /// The folder at `path` as `metadata` (links followed) shows it.
    pub(super) fn new(path: &Path, metadata: &Metadata) -> CheckedFolder {
        CheckedFolder { path: path.to_path_buf(), state: FolderState::of(metadata) }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FolderState {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
}

impl FolderState {
    fn of(metadata: &Metadata) -> FolderState {
        FolderState { dev: metadata.dev(), ino: metadata.ino(), mtime: (metadata.mtime(), metadata.mtime_nsec()) }
    }
}

#[derive(Debug)]
struct Remembered {
    state: FolderState,
    /// When the oldest check of it and of the folders above it was made.
    chain_checked: Instant,
}

/// The folders remembered as clear, by their real absolute path.
#[derive(Debug, Default)]
pub(super) struct ClearFolders {
    folders: Mutex<HashMap<PathBuf, Remembered>>,
}

impl ClearFolders {
    /// When the folder at `path` (as `metadata` shows it now, links followed) and every folder above it were last
    /// found clear, if that is still to be trusted (see the module docs).
    pub(super) fn clear_since(&self, path: &Path, metadata: &Metadata) -> Option<Instant> {
        let folders = self.lock();
        let remembered = folders.get(path)?;
        let now = FolderState::of(metadata);
        (remembered.state == now && remembered.chain_checked.elapsed() < RECHECK_AFTER)
            .then_some(remembered.chain_checked)
    }

    /// Remembers the folders a walk found clear (each judged by its own entries), the folders above the highest
    /// of them having been found clear at `above_since` (a remembered folder's time, or the walk's start when it
    /// went up to `/`). `checked_at` is when the walk began, before any of its `stat` calls.
    pub(super) fn remember(&self, checked: Vec<CheckedFolder>, above_since: Instant, checked_at: SystemTime) {
        if checked.is_empty() {
            return;
        }
        let mut folders = self.lock();
        if folders.len() + checked.len() > MAX_REMEMBERED {
            folders.clear();
        }
        for folder in checked {
            let (seconds, nanoseconds) = folder.state.mtime;
            let modified = mtime_of(seconds, nanoseconds);
            if modified + mtime_margin(nanoseconds) >= checked_at {
                // Changed so recently that another change may keep the same mtime: judged again next time.
                continue;
            }
            folders.insert(folder.path, Remembered { state: folder.state, chain_checked: above_since });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Remembered>> {
        self.folders.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How much older than a check a folder's mtime must be for an unchanged mtime to mean an unchanged folder: a tick
/// of the kernel's coarse clock (at most 10 ms) plus the file system's granularity, which is a second or two
/// (FAT) where the mtime has no fraction of a second, and at most that tick otherwise.
fn mtime_margin(nanoseconds: i64) -> Duration {
    if nanoseconds == 0 { Duration::from_secs(3) } else { Duration::from_millis(50) }
}

fn mtime_of(seconds: i64, nanoseconds: i64) -> SystemTime {
    let seconds = u64::try_from(seconds).unwrap_or(0);
    let nanoseconds = u32::try_from(nanoseconds).unwrap_or(0).min(999_999_999);
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(seconds, nanoseconds)).unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backdate(path: &Path) {
        let file = std::fs::File::open(path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(10)).unwrap();
    }

    #[test]
    fn a_folder_is_trusted_while_its_mtime_and_identity_hold_and_only_when_its_mtime_was_old_enough() {
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().canonicalize().unwrap().join("f");
        std::fs::create_dir(&folder).unwrap();
        let clear = ClearFolders::default();
        let metadata = std::fs::metadata(&folder).unwrap();

        // Just made: its mtime is too recent to be trusted.
        clear.remember(vec![CheckedFolder::new(&folder, &metadata)], Instant::now(), SystemTime::now());
        assert_eq!(clear.clear_since(&folder, &metadata), None);

        backdate(&folder);
        let metadata = std::fs::metadata(&folder).unwrap();
        let since = Instant::now();
        clear.remember(vec![CheckedFolder::new(&folder, &metadata)], since, SystemTime::now());
        assert_eq!(clear.clear_since(&folder, &metadata), Some(since));

        // An entry made in it changes its mtime: judged again.
        std::fs::write(folder.join("troupe-data-dir"), "").unwrap();
        assert_eq!(clear.clear_since(&folder, &std::fs::metadata(&folder).unwrap()), None);

        // Replaced by another folder at the same path: another identity.
        std::fs::remove_dir_all(&folder).unwrap();
        std::fs::create_dir(&folder).unwrap();
        backdate(&folder);
        assert_eq!(clear.clear_since(&folder, &std::fs::metadata(&folder).unwrap()), None);
    }

    #[test]
    fn the_folders_above_are_trusted_for_a_limited_time() {
        let root = tempfile::tempdir().unwrap();
        let folder = root.path().canonicalize().unwrap();
        backdate(&folder);
        let metadata = std::fs::metadata(&folder).unwrap();
        let clear = ClearFolders::default();
        let long_ago = Instant::now().checked_sub(RECHECK_AFTER).unwrap();
        clear.remember(vec![CheckedFolder::new(&folder, &metadata)], long_ago, SystemTime::now());
        assert_eq!(clear.clear_since(&folder, &metadata), None);
    }
}
