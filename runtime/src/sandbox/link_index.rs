//! What lies beneath the denied paths, by identity: their folders, which a bind mount can show under another path,
//! and their files with several names, which a hard link can give another path.
//!
//! [`super::protected`] refuses a file that is one of the second, and a location whose folders include one of the
//! first where the kernel cannot say which folders are mount roots (before Linux 5.8; elsewhere a bind mount is
//! found in the mount table, [`super::mount_roots`], and the folders are never walked). Both need a walk of the
//! denied paths, and a daemon's own data directory grows with every session (a folder and a few files each), so
//! the two are kept apart and each is walked only when needed:
//!
//! - **Folders**, at the first location check that needs them: a walk of folders alone. Each folder's entries
//!   say which are folders (`d_type`), so no file is looked at; and on file systems that keep the Unix convention
//!   that a folder's link count is two plus its subfolders (ext2/3/4, XFS, tmpfs), a folder counting two has none
//!   and is not even read. A session's folder is one `stat`. Folders cannot be linked, only mounted, so this walk is not made
//!   again; a walk for files (below) meets every folder and records them afresh, a folder made since included.
//! - **Files with several names**, at the first opened file that has several names (a file with one name is
//!   judged by where it lies): a walk of everything, recording the files with more than one name, built again
//!   when such a file's ctime (which `link(2)` updates) is not safely older than the last walk. A file beneath a
//!   denied path that gets a second name later has its ctime changed by that, so the rule covers it.
//!
//! Both walks stop at [`MAX_WALKED`] entries: a denied path holding more is still refused by location, and
//! another name for the rest is not recognized (a warning says so).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::Metadata;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, RawMode, StatxFlags};

/// How much older than the last walk a file's ctime must be for the walk to be trusted for it. File system
/// timestamps come from a coarse clock, so a change just before a walk may carry a slightly later time.
const CTIME_MARGIN: Duration = Duration::from_secs(1);

/// The most entries one walk looks at.
const MAX_WALKED: usize = 200_000;

/// A file's identity: the device it is on and its inode there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Identity {
    pub(super) dev: u64,
    pub(super) ino: u64,
}

impl Identity {
    pub(super) fn of(metadata: &Metadata) -> Identity {
        Identity { dev: metadata.dev(), ino: metadata.ino() }
    }
}

/// A denied path to walk, and its position among the denied paths (what a refusal names).
#[derive(Debug)]
pub(super) struct WalkRoot {
    pub(super) path: PathBuf,
    pub(super) position: usize,
}

/// What one walk looked at, for the tests and the warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Walked {
    /// Entries whose metadata was read.
    entries: usize,
    /// Folders whose entries were read.
    folders_read: usize,
    /// Whether the walk stopped at [`MAX_WALKED`] before the end.
    capped: bool,
}

/// The identities beneath the denied paths, each with the position of the denied path it is beneath.
#[derive(Debug, Default)]
pub(super) struct LinkIndex {
    /// Every folder, once the first location check needed them.
    folders: Option<HashMap<Identity, usize>>,
    /// The files with several names, as of `files_walked_at`.
    files: HashMap<Identity, usize>,
    /// When the last walk for files started; `None` before the first.
    files_walked_at: Option<SystemTime>,
}

impl LinkIndex {
    /// The denied path beneath which the folder `identity` lies, walking the folders first if no check needed them
    /// before.
    pub(super) fn folder(&mut self, roots: &[WalkRoot], identity: Identity) -> Option<usize> {
        self.folders.get_or_insert_with(|| walk(roots, Wanted::Folders).folders).get(&identity).copied()
    }

    /// The denied path beneath which the regular file `metadata` has another name, walking everything again when
    /// the last walk may be older than the file's last change of names.
    pub(super) fn linked_file(&mut self, roots: &[WalkRoot], metadata: &Metadata) -> Option<usize> {
        if !metadata.is_file() || metadata.nlink() <= 1 {
            // A file's only name is where it was opened, which the location check has judged.
            return None;
        }
        let identity = Identity::of(metadata);
        if let Some(&position) = self.files.get(&identity) {
            return Some(position);
        }
        if self.files_walked_at.is_some_and(|walked| changed_at(metadata) + CTIME_MARGIN < walked) {
            return None;
        }
        let walked_at = SystemTime::now();
        let Found { folders, files, walked } = walk(roots, Wanted::LinkedFiles);
        record_folders(&mut self.folders, folders, walked.capped);
        self.files = files;
        self.files_walked_at = Some(walked_at);
        self.files.get(&identity).copied()
    }

    /// Whether the folders beneath the denied paths were walked.
    #[cfg(test)]
    pub(super) fn folders_walked(&self) -> bool {
        self.folders.is_some()
    }

    /// The denied path beneath which `identity` is already known to lie (a folder, or a file with several names),
    /// without walking anything.
    pub(super) fn known(&self, identity: Identity) -> Option<usize> {
        self.folders.as_ref().and_then(|folders| folders.get(&identity)).or_else(|| self.files.get(&identity)).copied()
    }
}

/// Records the folders a walk for files met (it meets every folder, so a folder made since the last walk of folders
/// is recorded by the way). A complete walk replaces what was known; one stopped at its limit only adds to it, and is
/// never taken for the folders' index when none was walked yet: a walk of folders alone reads far fewer entries
/// (no file, no folder without subfolders), so it goes further before the limit, and is made when a check needs it.
fn record_folders(known: &mut Option<HashMap<Identity, usize>>, met: HashMap<Identity, usize>, capped: bool) {
    match (known.as_mut(), capped) {
        (Some(known), true) => known.extend(met),
        (None, true) => {}
        (_, false) => *known = Some(met),
    }
}

/// What a walk is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wanted {
    /// Every folder, reading only folders that may hold folders.
    Folders,
    /// Every regular file with more than one name (and every folder, which that walk meets anyway).
    LinkedFiles,
}

/// What a walk recorded: each identity with the position of the denied path it is beneath.
struct Found {
    folders: HashMap<Identity, usize>,
    files: HashMap<Identity, usize>,
    walked: Walked,
}

/// Walks beneath each root, links not followed, recording what `wanted` asks for. Each entry is looked at relative
/// to its opened folder (no path resolved again from `/`), and a folder is opened without following a symlink, so
/// one swapped for a link meanwhile is skipped rather than followed.
fn walk(roots: &[WalkRoot], wanted: Wanted) -> Found {
    let (mut folders, mut files) = (HashMap::new(), HashMap::new());
    let mut walked = Walked::default();
    'roots: for root in roots {
        let counts = counts_subfolders(&root.path);
        // The root's device once looked at: where folders' link counts say how many subfolders they hold.
        let mut counted = None;
        let Ok(root_name) = CString::new(root.path.as_os_str().as_bytes()) else { continue };
        // Each pending entry: the open folder it is in (none for the root, whose path is absolute), and its name.
        let mut pending: Vec<(Option<Rc<Dir>>, CString)> = vec![(None, root_name)];
        while let Some((parent, name)) = pending.pop() {
            if walked.entries >= MAX_WALKED {
                tracing::warn!(
                    limit = MAX_WALKED,
                    "too many entries below the denied paths to index them all; another name for the rest is not \
                     recognized"
                );
                walked.capped = true;
                break 'roots;
            }
            let at = match &parent {
                Some(parent) => match parent.fd() {
                    Ok(fd) => fd,
                    Err(_) => continue,
                },
                None => CWD,
            };
            let Some(entry) = Seen::at(at, &name) else { continue };
            walked.entries += 1;
            if parent.is_none() && counts {
                counted = Some(entry.identity.dev);
            }
            if entry.kind == FileType::RegularFile && entry.nlink > 1 && wanted == Wanted::LinkedFiles {
                files.entry(entry.identity).or_insert(root.position);
            }
            if entry.kind != FileType::Directory {
                continue;
            }
            folders.entry(entry.identity).or_insert(root.position);
            // A folder counting two links has no subfolder where the count is kept (and on the root's own device:
            // one mounted inside may be of another kind).
            if wanted == Wanted::Folders && counted == Some(entry.identity.dev) && entry.nlink == 2 {
                continue;
            }
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let Ok(folder) = rustix::fs::openat(at, &*name, flags, Mode::empty()) else { continue };
            let Ok(mut folder) = Dir::new(folder) else { continue };
            walked.folders_read += 1;
            let mut children = Vec::new();
            for child in folder.by_ref().flatten() {
                let child_name = child.file_name();
                if matches!(child_name.to_bytes(), b"." | b"..") {
                    continue;
                }
                // `d_type`; a file system that does not fill it in says `Unknown`, and the entry is looked at.
                let kind = child.file_type();
                if wanted == Wanted::LinkedFiles || matches!(kind, FileType::Directory | FileType::Unknown) {
                    children.push(child_name.to_owned());
                }
            }
            let folder = Rc::new(folder);
            pending.extend(children.into_iter().map(|child| (Some(Rc::clone(&folder)), child)));
        }
    }
    Found { folders, files, walked }
}

/// What a walk needs of an entry.
struct Seen {
    identity: Identity,
    kind: FileType,
    nlink: u64,
}

impl Seen {
    /// The entry `name` of the folder `at` (or the absolute path `name`), its link not followed.
    fn at(at: BorrowedFd<'_>, name: &CStr) -> Option<Seen> {
        let wanted = StatxFlags::TYPE | StatxFlags::INO | StatxFlags::NLINK;
        let stat = rustix::fs::statx(at, name, AtFlags::SYMLINK_NOFOLLOW, wanted).ok()?;
        Some(Seen {
            // As `std` makes a `Metadata`'s device of the same fields, so the identities compare.
            identity: Identity { dev: rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor), ino: stat.stx_ino },
            kind: FileType::from_raw_mode(RawMode::from(stat.stx_mode)),
            nlink: u64::from(stat.stx_nlink),
        })
    }
}

/// Whether the file system of `root` counts a folder's subfolders in its link count (two plus one per subfolder):
/// ext2/3/4, XFS and tmpfs do; Btrfs and overlayfs report one, FUSE file systems whatever they like.
fn counts_subfolders(root: &Path) -> bool {
    super::pseudo_fs::file_system_is(root, &[libc::EXT4_SUPER_MAGIC, libc::XFS_SUPER_MAGIC, libc::TMPFS_MAGIC])
}

/// When a file's inode last changed (ctime), which creating, linking, unlinking or renaming it updates.
fn changed_at(metadata: &Metadata) -> SystemTime {
    let seconds = u64::try_from(metadata.ctime()).unwrap_or(0);
    let nanoseconds = u32::try_from(metadata.ctime_nsec()).unwrap_or(0).min(999_999_999);
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(seconds, nanoseconds)).unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data directory's shape: `sessions/<id>/` with a log and a cache each, one session with stored outputs.
    fn data_dir(base: &Path) -> PathBuf {
        let data = base.join("data");
        for id in ["a", "b", "c"] {
            let session = data.join("sessions").join(id);
            std::fs::create_dir_all(&session).unwrap();
            std::fs::write(session.join("events.jsonl"), "{}\n").unwrap();
            std::fs::write(session.join("meta.json"), "{}").unwrap();
        }
        std::fs::create_dir_all(data.join("sessions/c/outputs/call-1")).unwrap();
        std::fs::write(data.join("sessions/c/outputs/call-1/output"), "o").unwrap();
        std::fs::create_dir(data.join("daemon")).unwrap();
        std::fs::write(data.join("daemon/token"), "t").unwrap();
        data
    }

    fn identity(path: &Path) -> Identity {
        Identity::of(&std::fs::symlink_metadata(path).unwrap())
    }

    #[test]
    fn a_walk_for_files_stopped_at_its_limit_never_stands_for_the_folders_index() {
        let identity = |ino| Identity { dev: 1, ino };
        let met = |inos: &[u64]| inos.iter().map(|&ino| (identity(ino), 0)).collect::<HashMap<_, _>>();
        let mut known = None;
        record_folders(&mut known, met(&[1]), true);
        assert_eq!(known, None, "a capped walk is no index of folders: the walk of folders alone goes further");
        record_folders(&mut known, met(&[1, 2]), false);
        assert_eq!(known, Some(met(&[1, 2])));
        record_folders(&mut known, met(&[3]), true);
        assert_eq!(known, Some(met(&[1, 2, 3])), "a capped walk adds to what is known");
        record_folders(&mut known, met(&[4]), false);
        assert_eq!(known, Some(met(&[4])), "a complete walk replaces it");
    }

    #[test]
    fn the_folder_walk_records_every_folder_and_no_file() {
        let base = tempfile::tempdir().unwrap();
        let data = data_dir(base.path());
        let roots = [WalkRoot { path: data.clone(), position: 0 }];
        let Found { folders, files, walked } = walk(&roots, Wanted::Folders);
        assert!(files.is_empty());

        let expected = ["", "daemon", "sessions", "sessions/a", "sessions/b", "sessions/c", "sessions/c/outputs"]
            .into_iter()
            .chain(["sessions/c/outputs/call-1"])
            .map(|relative| identity(&data.join(relative)))
            .collect::<Vec<_>>();
        assert_eq!(folders.len(), expected.len(), "{folders:?}");
        for folder in expected {
            assert_eq!(folders.get(&folder), Some(&0));
        }
        assert!(!folders.contains_key(&identity(&data.join("daemon/token"))));

        // Where the file system counts subfolders, the folders without any (two sessions, `daemon`, the output's
        // folder) are not read: a stat each.
        let folder_count = 8;
        if counts_subfolders(&data) {
            assert_eq!(
                walked,
                Walked { entries: folder_count, folders_read: 4, capped: false },
                "data, sessions, c, outputs"
            );
        } else {
            assert_eq!(walked, Walked { entries: folder_count, folders_read: folder_count, capped: false });
        }
    }

    #[test]
    fn the_file_walk_records_only_files_with_several_names() {
        let base = tempfile::tempdir().unwrap();
        let data = data_dir(base.path());
        std::fs::hard_link(data.join("daemon/token"), base.path().join("innocent.txt")).unwrap();
        let roots = [WalkRoot { path: data.clone(), position: 3 }];
        let Found { folders, files, walked } = walk(&roots, Wanted::LinkedFiles);
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(folders.len(), 8, "and every folder, met on the way");
        assert_eq!(files.get(&identity(&data.join("daemon/token"))), Some(&3));
        assert_eq!(walked.folders_read, 8, "every folder");
        assert_eq!(walked.entries, 8 + 8, "every folder and file");
    }

    #[test]
    fn a_linked_file_is_found_and_a_link_made_after_the_walk_makes_it_walk_again() {
        let base = tempfile::tempdir().unwrap();
        let data = data_dir(base.path());
        let roots = [WalkRoot { path: data.clone(), position: 0 }];
        let mut index = LinkIndex::default();

        // A file with one name is judged by location: nothing is walked for it.
        let single = std::fs::metadata(data.join("sessions/a/meta.json")).unwrap();
        assert_eq!(index.linked_file(&roots, &single), None);
        assert_eq!(index.files_walked_at, None);

        std::fs::hard_link(data.join("daemon/token"), base.path().join("first.txt")).unwrap();
        let first = std::fs::metadata(base.path().join("first.txt")).unwrap();
        assert_eq!(index.linked_file(&roots, &first), Some(0));
        assert_eq!(index.known(Identity::of(&first)), Some(0));

        // Linked after that walk: its ctime is not older than the walk, so the index is walked again.
        std::fs::hard_link(data.join("sessions/b/events.jsonl"), base.path().join("second.txt")).unwrap();
        let second = std::fs::metadata(base.path().join("second.txt")).unwrap();
        assert_eq!(index.linked_file(&roots, &second), Some(0));

        // A folder made since the folders were walked is recorded by the next walk for files, which meets it.
        assert_eq!(index.folder(&roots, identity(&data.join("daemon"))), Some(0));
        std::fs::create_dir(data.join("sessions/d")).unwrap();
        assert_eq!(index.known(identity(&data.join("sessions/d"))), None);
        std::fs::hard_link(data.join("sessions/a/meta.json"), base.path().join("third.txt")).unwrap();
        let third = std::fs::metadata(base.path().join("third.txt")).unwrap();
        assert_eq!(index.linked_file(&roots, &third), Some(0));
        assert_eq!(index.known(identity(&data.join("sessions/d"))), Some(0));

        // A file with several names elsewhere is not beneath the denied path.
        std::fs::write(base.path().join("mine.txt"), "m").unwrap();
        std::fs::hard_link(base.path().join("mine.txt"), base.path().join("also-mine.txt")).unwrap();
        let mine = std::fs::metadata(base.path().join("mine.txt")).unwrap();
        assert_eq!(index.linked_file(&roots, &mine), None);
    }

    #[test]
    fn folders_are_walked_once_at_the_first_need() {
        let base = tempfile::tempdir().unwrap();
        let data = data_dir(base.path());
        let roots = [WalkRoot { path: data.clone(), position: 1 }];
        let mut index = LinkIndex::default();
        assert_eq!(index.known(identity(&data.join("sessions/c/outputs"))), None, "nothing walked yet");
        assert_eq!(index.folder(&roots, identity(&data.join("sessions/c/outputs"))), Some(1));
        assert_eq!(index.folder(&roots, identity(base.path())), None);
        assert_eq!(index.known(identity(&data.join("sessions/a"))), Some(1));
        assert_eq!(index.files_walked_at, None, "no file was needed");
    }
}
