//! Denied paths by file identity, for in-process file tools.
//!
//! The permission policy compares path strings, which a hard link, a bind mount or a symlinked folder leads
//! around. So the file tools check the file they actually opened: its device and inode, where the kernel says the
//! descriptor really is (`/proc/self/fd`), and the device and inode of every folder above that location, against
//! the denied paths (the daemon's data directory first, then `~/.ssh` and the like). Paths are compared too, by
//! prefix, which covers a denied path created after the daemon started. Every other troupe data directory is
//! refused too, wherever it is: each folder above the real location is checked for a data dir's layout
//! ([`super::data_dirs::holding_data_dir`]), so no list of them is needed and one made a moment ago counts.
//!
//! A hard link has no location of its own to give it away: it is another name for the same inode, anywhere on the
//! same file system; and a bind mount shows a folder beneath a denied path under another one. So a folder above a
//! location that is the root of a mount is looked up in the kernel's mount table ([`super::mount_roots`]: a bind
//! mount of a folder at or beneath a denied path is refused), and a regular file with more than one name among the
//! files beneath the denied paths ([`super::link_index`]: walked at the first such file opened and again when its
//! ctime, which `link(2)` and `rename(2)` update, is not safely older than that walk, so a link made since is never
//! missed). Where the kernel does not say which folders are mount roots, the folders beneath the denied paths are
//! walked and looked up by identity instead.
//!
//! The walk up from a file stops at the first folder remembered as clear ([`super::clear_folders`]: unchanged
//! identity and mtime, the folders above it checked less than a second ago), so a file in a folder seen lately
//! costs one `stat` there; the identities of the denied paths themselves are looked at again at most every
//! [`RECHECK_AFTER`], a denied path made since then being refused by its path meanwhile.
//!
//! Every check here does blocking I/O (a few `stat` calls, sometimes a walk of the denied paths): call it from
//! a blocking thread, as the file tools do.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use super::clear_folders::{CheckedFolder, ClearFolders, RECHECK_AFTER};
use super::data_dirs::{Layout, data_dir_layout};
use super::link_index::{Identity, LinkIndex, WalkRoot};
use super::mount_roots::{MountPlace, MountTable, Shown, mount_place, mount_place_of};

/// One denied path, with its identity when it existed at construction.
#[derive(Debug)]
struct Entry {
    path: PathBuf,
    /// The first entry is the daemon's data directory, which the refusal names as such.
    data_dir: bool,
    identity: Option<Identity>,
    /// The device of a denied path that is the root of a pseudo file system (`/proc`): everything on it is beneath
    /// the path, refused by device and never indexed ([`super::pseudo_fs`]).
    whole_device: Option<u64>,
}

/// The identity of each denied path when it was last looked at.
#[derive(Debug)]
struct Roots {
    identities: Vec<Option<Identity>>,
    taken: Instant,
}

/// Why a location is refused.
enum LocationRefusal {
    /// It is, or lies beneath, the denied path at this position.
    Denied(usize),
    /// It lies in another troupe data dir, found by its layout.
    OtherDataDir(PathBuf),
}

/// The denied paths, with the device and inode of each that exists.
#[derive(Debug)]
pub struct ProtectedPaths {
    paths: Vec<PathBuf>,
    entries: Vec<Entry>,
    /// The entries walked for the link index: all but those refused by their device.
    walk_roots: Vec<WalkRoot>,
    index: Mutex<LinkIndex>,
    roots: Mutex<Option<Roots>>,
    clear: ClearFolders,
}

impl ProtectedPaths {
    /// Protects `paths` (absolute; the first is the daemon's data directory, as [`super::Sandbox::denied`] gives
    /// them). Each path that exists is canonicalized and its identity recorded; the others are protected by path
    /// until they exist.
    pub fn new(paths: Vec<PathBuf>) -> ProtectedPaths {
        let entries: Vec<Entry> = paths
            .iter()
            .enumerate()
            .map(|(position, path)| {
                let path = path.canonicalize().unwrap_or_else(|_| path.clone());
                let identity = std::fs::symlink_metadata(&path).ok().map(|metadata| Identity::of(&metadata));
                let whole_device = super::pseudo_fs::whole_device(&path);
                Entry { path, data_dir: position == 0, identity, whole_device }
            })
            .collect();
        // An entry refused by its device is never walked.
        let walk_roots = (entries.iter().enumerate())
            .filter(|(_, entry)| entry.whole_device.is_none())
            .map(|(position, entry)| WalkRoot { path: entry.path.clone(), position })
            .collect();
        ProtectedPaths {
            paths,
            entries,
            walk_roots,
            index: Mutex::new(LinkIndex::default()),
            roots: Mutex::new(None),
            clear: ClearFolders::default(),
        }
    }

    /// The denied paths as given, the data directory first.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// True when nothing is protected (an unconfined sandbox): every check passes without touching the disk.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Why the opened `file` must not be read or written, or `None`. `requested` is the path as the model wrote
    /// it, for the refusal. Refused: the file or folder is a denied path or lies beneath one (by path, or by the
    /// identity of a folder above its real location, which catches bind mounts), or it is another name (a hard
    /// link) for something beneath one.
    pub fn refusal_for_open(&self, file: &File, requested: &str) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        self.judge_open(file, file.metadata().ok().as_ref(), requested)
    }

    /// [`ProtectedPaths::refusal_for_open`] of a file whose `metadata` the caller has read already.
    pub fn refusal_for_opened(&self, file: &File, metadata: &Metadata, requested: &str) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        self.judge_open(file, Some(metadata), requested)
    }

    fn judge_open(&self, file: &File, metadata: Option<&Metadata>, requested: &str) -> Option<String> {
        let roots = self.current_roots();
        if let Some(metadata) = metadata
            && let Some(position) =
                self.on_denied_device(metadata).or_else(|| self.root_matching(&roots, Identity::of(metadata)))
        {
            return Some(self.refusal(position, requested, false));
        }
        if let Some(Ok(location)) = descriptor_path(file)
            && let Some(refusal) = self.location_refusal(&roots, &location, metadata, Some(file))
        {
            return Some(self.location_refusal_text(refusal, requested));
        }
        let position = self.linked_entry(metadata?)?;
        Some(self.refusal(position, requested, true))
    }

    /// Why the resolved absolute `path` (which need not exist yet) must not be read, written or created, or
    /// `None`: it is a denied path or beneath one, by path or by the identity of itself or an existing folder
    /// above it, or it names an existing file that is another name for something beneath one.
    pub fn refusal_for_path(&self, path: &Path, requested: &str) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let roots = self.current_roots();
        let own = std::fs::symlink_metadata(path).ok();
        // The walk follows a final symlink, as a `stat` of the path would; the resolved paths hold none.
        let own_for_walk = own.as_ref().filter(|metadata| !metadata.file_type().is_symlink());
        if let Some(refusal) = self.location_refusal(&roots, path, own_for_walk, None) {
            return Some(self.location_refusal_text(refusal, requested));
        }
        let metadata = own?;
        if let Some(position) = self.root_matching(&roots, Identity::of(&metadata)) {
            return Some(self.refusal(position, requested, false));
        }
        let position = self.linked_entry(&metadata)?;
        Some(self.refusal(position, requested, true))
    }

    /// Whether a walker's entry at `path` (with its own `metadata`, links not followed) is a denied path, lies
    /// beneath one by path, is a troupe data directory (by its layout) or a bind mount of a folder beneath a denied
    /// path (a folder remembered as clear and unchanged is not looked at again for either), or is already known to
    /// be another name for something beneath one. Cheap: it never walks for the link index, so a walker must still
    /// check each file it opens with [`ProtectedPaths::refusal_for_open`].
    pub fn is_protected_entry(&self, path: &Path, metadata: &Metadata) -> bool {
        if self.is_empty() {
            return false;
        }
        let identity = Identity::of(metadata);
        self.entries.iter().any(|entry| path.starts_with(&entry.path) || entry.identity == Some(identity))
            || self.on_denied_device(metadata).is_some()
            || (metadata.is_dir()
                && self.clear.clear_since(path, metadata).is_none()
                && (data_dir_layout(path) == Layout::DataDir
                    || self.mount_refusal(mount_place(path), identity, Lookup::NeverWalk).is_some()))
            || self.lock_index().known(identity).is_some()
    }

    /// The identity of each entry: it may have been created (or replaced) since construction, so it is looked at
    /// again when the last look is older than [`RECHECK_AFTER`].
    fn current_roots(&self) -> Vec<Option<Identity>> {
        let mut roots = self.roots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(roots) = roots.as_ref()
            && roots.taken.elapsed() < RECHECK_AFTER
        {
            return roots.identities.clone();
        }
        let taken = Instant::now();
        let identities: Vec<Option<Identity>> = self
            .entries
            .iter()
            .map(|entry| std::fs::metadata(&entry.path).ok().map(|metadata| Identity::of(&metadata)))
            .collect();
        *roots = Some(Roots { identities: identities.clone(), taken });
        identities
    }

    /// The entry that is the root of the pseudo file system `metadata`'s file is on.
    fn on_denied_device(&self, metadata: &Metadata) -> Option<usize> {
        let device = metadata.dev();
        self.entries.iter().position(|entry| entry.whole_device == Some(device))
    }

    /// The entry whose identity, at construction or now, is `identity`.
    fn root_matching(&self, roots: &[Option<Identity>], identity: Identity) -> Option<usize> {
        self.entries
            .iter()
            .zip(roots)
            .position(|(entry, now)| entry.identity == Some(identity) || *now == Some(identity))
    }

    /// Why the real, absolute `location` (`own`: its metadata, when already known; `opened`: the file there, when
    /// it is open) is refused: it lies at or
    /// beneath an entry by path prefix, or it or a folder above it has the identity of an entry or is a bind mount
    /// of a folder beneath one, or is a troupe data dir by its layout. The walk up stops at the first folder
    /// remembered as clear ([`super::clear_folders`]), and remembers the folders it found clear.
    fn location_refusal(
        &self,
        roots: &[Option<Identity>],
        location: &Path,
        own: Option<&Metadata>,
        opened: Option<&File>,
    ) -> Option<LocationRefusal> {
        if let Some(position) = self.entries.iter().position(|entry| location.starts_with(&entry.path)) {
            return Some(LocationRefusal::Denied(position));
        }
        let (started, started_at) = (Instant::now(), SystemTime::now());
        let mut above_since = started;
        let mut checked = Vec::new();
        for (depth, ancestor) in location.ancestors().enumerate() {
            let looked_up;
            let metadata = match own {
                Some(own) if depth == 0 => own,
                _ => match std::fs::metadata(ancestor) {
                    Ok(metadata) => {
                        looked_up = metadata;
                        &looked_up
                    }
                    Err(_) => continue,
                },
            };
            if let Some(position) = self.on_denied_device(metadata) {
                return Some(LocationRefusal::Denied(position));
            }
            if metadata.is_dir()
                && let Some(since) = self.clear.clear_since(ancestor, metadata)
            {
                above_since = since;
                break;
            }
            let identity = Identity::of(metadata);
            if let Some(position) = self.root_matching(roots, identity) {
                return Some(LocationRefusal::Denied(position));
            }
            // The file opened is asked by its descriptor: its path, resolved again, may lead elsewhere by now.
            let place = match opened {
                Some(opened) if depth == 0 => mount_place_of(opened),
                _ => mount_place(ancestor),
            };
            if !metadata.is_dir() {
                // A file can be a mount's root too: a file beneath a denied path bind-mounted on one elsewhere has
                // one name on each side, so no folder above it and no count of links gives it away.
                if let Some(refusal) = self.mount_refusal(place, identity, Lookup::NeverWalk) {
                    return Some(refusal);
                }
                continue;
            }
            if let Some(refusal) = self.mount_refusal(place, identity, Lookup::MayWalk) {
                return Some(refusal);
            }
            // `/` is never a data dir.
            if ancestor.parent().is_none() {
                continue;
            }
            match data_dir_layout(ancestor) {
                Layout::DataDir => return Some(LocationRefusal::OtherDataDir(ancestor.to_path_buf())),
                Layout::Other { by_own_entries: true } => checked.push(CheckedFolder::new(ancestor, metadata)),
                Layout::Other { by_own_entries: false } => {}
            }
        }
        self.clear.remember(checked, above_since, started_at);
        None
    }

    /// The refusal of a location, for the model.
    fn location_refusal_text(&self, refusal: LocationRefusal, requested: &str) -> String {
        match refusal {
            LocationRefusal::Denied(position) => self.refusal(position, requested, false),
            LocationRefusal::OtherDataDir(data_dir) => other_data_dir_refusal(&data_dir, requested),
        }
    }

    /// Why the folder or file `identity`, standing at `place` among the mounts, is refused as another name for
    /// something it is not: it is the root of a bind mount of something at or beneath a denied path, or inside
    /// another daemon's data dir (known by the layout of the folders above where it lies, [`super::mount_roots`]).
    /// Where the kernel or the mount table cannot say, the folders beneath the denied paths are looked up by
    /// identity instead, walked at the first such need when `lookup` allows it.
    fn mount_refusal(&self, place: Option<MountPlace>, identity: Identity, lookup: Lookup) -> Option<LocationRefusal> {
        let unknown = || {
            let position = match lookup {
                Lookup::MayWalk => self.lock_index().folder(&self.walk_roots, identity),
                Lookup::NeverWalk => self.lock_index().known(identity),
            };
            position.map(LocationRefusal::Denied)
        };
        let mount = match place {
            Some(MountPlace::Inside(_)) => return None,
            Some(MountPlace::Root(mount)) => mount,
            None => return unknown(),
        };
        let Ok(table) = MountTable::read() else { return unknown() };
        let shown = match table.shown_by(mount) {
            Some(Shown::Deleted) => return None,
            Some(Shown::Folder(shown)) => shown,
            None => return unknown(),
        };
        for root in &self.walk_roots {
            let denied = match mount_place(&root.path) {
                Some(MountPlace::Root(id) | MountPlace::Inside(id)) => table.sources_within(id, &root.path),
                // A denied path that does not exist has nothing beneath it to mount.
                None if !root.path.exists() => continue,
                None => None,
            };
            match denied {
                Some(denied) if denied.iter().any(|denied| shown.within(denied)) => {
                    return Some(LocationRefusal::Denied(root.position));
                }
                Some(_) => {}
                None => return unknown(),
            }
        }
        // Where what the mount shows lies, through the other mounts of its file system: in a folder laid out as a
        // data dir there, it is in another daemon's data dir, whatever path led to it here.
        table.paths_showing(&shown, mount).iter().find_map(|lies| {
            lies.ancestors()
                .filter(|folder| folder.parent().is_some())
                .find(|folder| data_dir_layout(folder) == Layout::DataDir)
                .map(|data_dir| LocationRefusal::OtherDataDir(data_dir.to_path_buf()))
        })
    }

    /// The entry beneath which a regular file with several names has another one.
    fn linked_entry(&self, metadata: &Metadata) -> Option<usize> {
        self.lock_index().linked_file(&self.walk_roots, metadata)
    }

    fn lock_index(&self) -> std::sync::MutexGuard<'_, LinkIndex> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The refusal for the model: which kind of denied path, never anything read from it.
    fn refusal(&self, position: usize, requested: &str, linked: bool) -> String {
        let Some(entry) = self.entries.get(position) else {
            return format!(
                "refused by the sandbox: {requested} is in a denied path; tools may never read or write it"
            );
        };
        let place = if entry.data_dir {
            "the daemon's data directory".to_owned()
        } else {
            format!("a denied path ({})", entry.path.display())
        };
        if linked {
            format!(
                "refused by the sandbox: {requested} is another name (a hard link) for a file in {place}; tools may \
                 never read or write it"
            )
        } else if entry.data_dir {
            format!("refused by the sandbox: {requested} is {place} or inside it; tools may never read or write it")
        } else {
            format!("refused by the sandbox: {requested} is in {place}; tools may never read or write it")
        }
    }
}

/// Whether a check may walk the denied paths when the mount table cannot answer it.
#[derive(Clone, Copy)]
enum Lookup {
    MayWalk,
    /// A walker's entry: cheap, only what is already known.
    NeverWalk,
}

/// The refusal for a path in another daemon's data directory: which one, never anything read from it.
fn other_data_dir_refusal(data_dir: &Path, requested: &str) -> String {
    format!(
        "refused by the sandbox: {requested} is in a troupe data directory ({}); tools may never read or write any \
         troupe data directory, whichever daemon it belongs to",
        data_dir.display()
    )
}

/// Where the kernel says an open descriptor really is, or `None` where there is no `/proc` to ask.
#[cfg(target_os = "linux")]
pub(crate) fn descriptor_path(file: &File) -> Option<io::Result<PathBuf>> {
    use std::os::fd::AsRawFd;
    Some(std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())))
}

/// Where the kernel says an open descriptor really is, or `None` where there is no `/proc` to ask.
#[cfg(not(target_os = "linux"))]
pub(crate) fn descriptor_path(_file: &File) -> Option<io::Result<PathBuf>> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn nothing_protected_refuses_nothing() {
        let protected = ProtectedPaths::new(Vec::new());
        assert!(protected.is_empty());
        assert_eq!(protected.refusal_for_path(Path::new("/etc/passwd"), "/etc/passwd"), None);
    }

    #[test]
    fn paths_are_refused_by_prefix_even_before_they_exist_and_entries_by_identity() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let data_dir = base.join("data");
        let missing = base.join("later");
        std::fs::create_dir(&data_dir).unwrap();
        let protected = ProtectedPaths::new(vec![data_dir.clone(), missing.clone()]);
        assert_eq!(protected.paths(), [data_dir.clone(), missing.clone()]);

        let refusal = protected.refusal_for_path(&data_dir.join("x/y"), "x/y").unwrap();
        assert!(refusal.contains("the daemon's data directory"), "{refusal}");
        let refusal = protected.refusal_for_path(&missing.join("z"), "z").unwrap();
        assert!(refusal.contains(&format!("a denied path ({})", missing.display())), "{refusal}");
        assert_eq!(protected.refusal_for_path(&base.join("ok"), "ok"), None);

        let metadata = std::fs::symlink_metadata(&data_dir).unwrap();
        assert!(protected.is_protected_entry(Path::new("/elsewhere/mount"), &metadata));
        let other = std::fs::symlink_metadata(&base).unwrap();
        assert!(!protected.is_protected_entry(&base, &other));
        assert!(protected.is_protected_entry(&data_dir.join("f"), &other));
    }

    #[test]
    fn proc_is_refused_by_its_device_under_any_path_and_not_indexed() {
        // The file tools need `/proc` (descriptor checks), so a machine that runs them has it mounted.
        assert!(super::super::pseudo_fs::whole_device(Path::new("/proc")).is_some(), "/proc is not procfs here");
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir(base.join("denied")).unwrap();
        std::fs::write(base.join("denied/secret"), "s").unwrap();
        let protected = ProtectedPaths::new(vec![base.join("denied"), PathBuf::from("/proc")]);

        // A file of /proc as a walker meets it under another path (a bind mount): refused by its device, before
        // any index was built.
        let status = std::fs::symlink_metadata("/proc/self/status").unwrap();
        assert!(protected.is_protected_entry(Path::new("/elsewhere/status"), &status));
        let file = File::open("/proc/self/status").unwrap();
        let refusal = protected.refusal_for_open(&file, "status").unwrap();
        assert!(refusal.contains("a denied path (/proc)"), "{refusal}");

        // Only the ordinary denied folder is walked for the link index, never /proc.
        assert_eq!(protected.walk_roots.len(), 1);
        assert_eq!(
            (protected.walk_roots[0].path.as_path(), protected.walk_roots[0].position),
            (&*base.join("denied"), 0)
        );
        assert_eq!(protected.refusal_for_path(&base.join("ok"), "ok"), None);
    }

    #[test]
    fn checking_a_location_walks_nothing_beneath_the_denied_paths() {
        // Bind mounts are found in the mount table (`mount_roots`), so a data dir with many sessions costs the file
        // tools' first check nothing.
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        for session in ["a", "b"] {
            std::fs::create_dir_all(base.join("data/sessions").join(session)).unwrap();
        }
        std::fs::create_dir_all(base.join("project/sub")).unwrap();
        std::fs::write(base.join("project/sub/notes.txt"), "n").unwrap();
        let protected = ProtectedPaths::new(vec![base.join("data")]);
        let notes = File::open(base.join("project/sub/notes.txt")).unwrap();
        assert_eq!(protected.refusal_for_open(&notes, "sub/notes.txt"), None);
        assert_eq!(protected.refusal_for_path(&base.join("project/new.txt"), "new.txt"), None);
        let dir = std::fs::symlink_metadata(base.join("project/sub")).unwrap();
        assert!(!protected.is_protected_entry(&base.join("project/sub"), &dir));
        assert!(protected.refusal_for_path(&base.join("data/sessions/a/x"), "x").is_some());
        assert!(!protected.lock_index().folders_walked());
    }

    #[test]
    fn a_folder_remembered_as_clear_is_judged_again_at_once_when_it_becomes_a_data_dir() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let protected = ProtectedPaths::new(vec![base.join("own")]);
        let project = base.join("project");
        std::fs::create_dir_all(project.join("sub")).unwrap();
        std::fs::write(project.join("notes.txt"), "n").unwrap();
        std::fs::write(project.join("sub/more.txt"), "m").unwrap();
        // Old enough for an unchanged mtime to be trusted.
        let long_ago = SystemTime::now() - Duration::from_secs(10);
        for folder in [&base, &project, &project.join("sub")] {
            File::open(folder).unwrap().set_modified(long_ago).unwrap();
        }
        let notes = File::open(project.join("notes.txt")).unwrap();
        let more = File::open(project.join("sub/more.txt")).unwrap();
        // Twice: the second check stops at the folders remembered by the first.
        for _ in 0..2 {
            assert_eq!(protected.refusal_for_open(&notes, "notes.txt"), None);
            assert_eq!(protected.refusal_for_open(&more, "sub/more.txt"), None);
        }
        assert!(protected.clear.clear_since(&project, &std::fs::metadata(&project).unwrap()).is_some());

        // The folder becomes another daemon's data dir: its files are refused at once, remembered or not.
        std::fs::write(project.join(super::super::data_dirs::MARKER), "").unwrap();
        let refusal = protected.refusal_for_open(&notes, "notes.txt").unwrap();
        assert!(refusal.contains(&format!("a troupe data directory ({})", project.display())), "{refusal}");
        assert!(protected.refusal_for_path(&project.join("notes.txt"), "notes.txt").is_some());
    }

    #[test]
    fn another_daemons_data_dir_is_refused_by_its_layout_wherever_it_is() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let protected = ProtectedPaths::new(vec![base.join("own")]);
        let other = base.join("project/.troupe-dev");
        std::fs::create_dir_all(other.join("daemon")).unwrap();
        std::fs::write(other.join("daemon/token"), "t").unwrap();
        let refusal = protected.refusal_for_path(&other.join("daemon/token"), "t").unwrap();
        assert!(refusal.contains(&format!("a troupe data directory ({})", other.display())), "{refusal}");
        let file = File::open(other.join("daemon/token")).unwrap();
        assert!(protected.refusal_for_open(&file, "t").is_some());
        let metadata = std::fs::symlink_metadata(&other).unwrap();
        assert!(protected.is_protected_entry(&other, &metadata));
        let project = std::fs::symlink_metadata(base.join("project")).unwrap();
        assert!(!protected.is_protected_entry(&base.join("project"), &project));
        assert_eq!(protected.refusal_for_path(&base.join("project/x"), "x"), None);
    }
}
