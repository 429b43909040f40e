//! Opening and creating files beneath a directory handle, never by a path after a check.
//!
//! [`super::paths::resolve_path`] turns a path argument into an absolute path free of symlinks, and the policy
//! judges that path. By the time a tool acts, another process may have replaced a folder on it with a symlink; a
//! tool that then opened or created by name would follow it, wherever it leads. So a tool first opens an
//! [`Anchor`]: the cwd (or, for an approved path outside it, the root) as an `O_PATH` directory descriptor, opened
//! itself without following any symlink. Everything else is resolved relative to that descriptor by the kernel,
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`: one system call that refuses
//! (`ELOOP`, `EXDEV`) a path that climbs out or meets any symlink. No symlink is wanted anywhere: the resolved
//! path has none, so one appearing means the path changed since it was judged, and the tool refuses rather than
//! guess what the new path means.
//!
//! On a kernel without `openat2` (before Linux 5.6, or a seccomp filter that hides it) the same walk is made one
//! component at a time with `openat(O_NOFOLLOW)`, checking that each step is a real directory.
//!
//! Missing parent folders are made with `mkdirat` one level at a time, each relative to the descriptor of the
//! folder above it, so a folder swapped for a symlink between two levels is never followed either.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};

/// How often an `openat2` that reports a concurrent rename or mount (`EAGAIN`) is tried again before giving up.
const EAGAIN_RETRIES: usize = 8;

/// `/`, opened once for the whole process as an `O_PATH` descriptor: every anchor is opened beneath it, so a call
/// does not open and close the root again. The root of the daemon's mount namespace never changes (the daemon
/// neither `chroot`s nor `pivot_root`s).
fn root() -> io::Result<BorrowedFd<'static>> {
    static ROOT: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(root) = ROOT.get() {
        return Ok(root.as_fd());
    }
    let opened = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    // Two threads may open it at once; the loser's descriptor is dropped.
    Ok(ROOT.get_or_init(|| opened).as_fd())
}

/// How a path beneath an anchor is walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    /// One `openat2` call, the kernel refusing symlinks and escapes.
    Openat2,
    /// `openat(O_NOFOLLOW)` per component, where `openat2` is missing.
    StepByStep,
}

/// The walk this kernel supports, probed once.
fn walk() -> Walk {
    static WALK: OnceLock<Walk> = OnceLock::new();
    *WALK.get_or_init(|| {
        let probe = rustix::fs::openat2(
            CWD,
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS,
        );
        match probe {
            // Opening "/" cannot fail for a reason of its own: ENOSYS (an old kernel) or EPERM (a seccomp filter
            // that does not know the call) both mean that the call itself is unavailable.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => Walk::StepByStep,
            _ => Walk::Openat2,
        }
    })
}

/// A verified directory descriptor and the absolute, symlink-free path it was opened at. Every open, creation
/// and listing of a file tool happens relative to one.
#[derive(Debug)]
pub(crate) struct Anchor {
    handle: OwnedFd,
    path: PathBuf,
    walk: Walk,
}

impl Anchor {
    /// Opens the absolute, symlink-free directory `path` as an anchor, refusing (`ELOOP`) if any component of it
    /// is a symlink now.
    pub(crate) fn open(path: &Path) -> io::Result<Anchor> {
        Anchor::open_with(path, walk())
    }

    fn open_with(path: &Path, walk: Walk) -> io::Result<Anchor> {
        let root = root()?;
        let handle = match path.strip_prefix("/") {
            Ok(relative) if relative.as_os_str().is_empty() => root.try_clone_to_owned()?,
            Ok(relative) => open_relative(root, relative, OFlags::PATH | OFlags::DIRECTORY, Mode::empty(), walk)?,
            Err(_) => return Err(io::Error::from_raw_os_error(libc::EXDEV)),
        };
        Ok(Anchor { handle, path: path.to_path_buf(), walk })
    }

    /// The same handle, known by `path`: another absolute, symlink-free path of the very folder it was opened at
    /// (its canonical one, for a cwd recorded with a `..` in it).
    pub(crate) fn known_as(self, path: PathBuf) -> Anchor {
        Anchor { path, ..self }
    }

    /// The absolute, symlink-free path the anchor was opened at.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The anchor's `O_PATH` directory descriptor.
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.handle.as_fd()
    }

    /// Opens `target` (absolute, at or beneath the anchor's path, free of symlinks) with `flags`, refusing a path
    /// that meets a symlink or leaves the anchor. `O_CLOEXEC` is always added, and `O_NOCTTY` but to `O_PATH`.
    pub(crate) fn open_beneath(&self, target: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let relative = self.relative(target)?;
        open_relative(self.handle.as_fd(), relative, flags, mode, self.walk)
    }

    /// Opens `target` as a file, as [`Anchor::open_beneath`] does.
    pub(crate) fn open_file(&self, target: &Path, flags: OFlags, mode: Mode) -> io::Result<File> {
        self.open_beneath(target, flags, mode).map(File::from)
    }

    /// Opens the directory `target` (absolute, beneath the anchor's path), creating each missing folder on the
    /// way with `mkdirat` relative to the one above it. `before_create` sees each folder before a new one is made
    /// in it, and may refuse (its error is returned and nothing more is created).
    pub(crate) fn open_or_create_directories<E>(
        &self,
        target: &Path,
        mut before_create: impl FnMut(&File) -> Result<(), E>,
    ) -> Result<File, CreateError<E>> {
        let directory = OFlags::PATH | OFlags::DIRECTORY;
        // Almost always the folder exists: one call.
        match self.open_beneath(target, directory, Mode::empty()) {
            Ok(handle) => return Ok(File::from(handle)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(CreateError::Io(error)),
        }
        let relative = self.relative(target).map_err(CreateError::Io)?;
        let mut current: Option<OwnedFd> = None;
        for name in normal_components(relative).map_err(CreateError::Io)? {
            let parent = current.as_ref().map_or(self.handle.as_fd(), AsFd::as_fd);
            let opened = match open_relative(parent, Path::new(name), directory, Mode::empty(), self.walk) {
                Ok(handle) => handle,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    let parent_file = File::from(parent.try_clone_to_owned().map_err(CreateError::Io)?);
                    before_create(&parent_file).map_err(CreateError::Refused)?;
                    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(error) => return Err(CreateError::Io(error.into())),
                    }
                    open_relative(parent, Path::new(name), directory, Mode::empty(), self.walk)
                        .map_err(CreateError::Io)?
                }
                Err(error) => return Err(CreateError::Io(error)),
            };
            current = Some(opened);
        }
        match current {
            Some(handle) => Ok(File::from(handle)),
            // `target` is the anchor itself, which the fast path above would have opened.
            None => Err(CreateError::Io(io::Error::from(io::ErrorKind::NotFound))),
        }
    }

    /// `target` relative to the anchor's path; `"."` for the anchor itself.
    fn relative<'a>(&self, target: &'a Path) -> io::Result<&'a Path> {
        match target.strip_prefix(&self.path) {
            Ok(relative) if relative.as_os_str().is_empty() => Ok(Path::new(".")),
            Ok(relative) => Ok(relative),
            Err(_) => Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
}

/// Why [`Anchor::open_or_create_directories`] stopped.
#[derive(Debug)]
pub(crate) enum CreateError<E> {
    Io(io::Error),
    /// The caller's check refused a folder before something was created in it.
    Refused(E),
}

/// Creates `name` in the directory `parent` exclusively (`O_CREAT | O_EXCL`), never following a symlink there.
pub(crate) fn create_new_file(parent: &File, name: &OsStr, flags: OFlags) -> io::Result<File> {
    let flags = flags | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::openat(parent, name, flags, Mode::from_raw_mode(0o666))?))
}

/// Opens the existing `name` in the directory `parent`, never following a symlink there.
pub(crate) fn open_in(parent: &File, name: &OsStr, flags: OFlags) -> io::Result<File> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::openat(parent, name, flags, Mode::empty())?))
}

/// Removes the entry `name` of the directory `parent`: the very entry a call created, not whatever a path names.
pub(crate) fn remove_in(parent: &File, name: &OsStr) -> io::Result<()> {
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?)
}

/// The names in the directory opened as `directory` (without `.` and `..`), each with whether it is a folder or
/// a symlink, read from that descriptor rather than from a path.
pub(crate) fn list(directory: &File) -> io::Result<Vec<(std::ffi::OsString, FileType)>> {
    use std::os::unix::ffi::OsStrExt;
    let mut reader = rustix::fs::Dir::read_from(directory)?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            // Some file systems do not say in the listing; ask for the entry itself, links not followed.
            FileType::Unknown => rustix::fs::statat(directory, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                .map(|stat| FileType::from_raw_mode(stat.st_mode))
                .unwrap_or(FileType::Unknown),
            kind => kind,
        };
        entries.push((OsStr::from_bytes(name).to_os_string(), kind));
    }
    Ok(entries)
}

/// The components of a relative path with no `..`, `.` or root in it, as the resolved paths have; anything else
/// is refused (`EXDEV`) rather than interpreted.
fn normal_components(relative: &Path) -> io::Result<Vec<&OsStr>> {
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
        }
    }
    Ok(names)
}

fn open_relative(
    parent: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
    walk: Walk,
) -> io::Result<OwnedFd> {
    // `openat2` refuses with EINVAL any flag beside O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC on an O_PATH open.
    let flags = match flags.contains(OFlags::PATH) {
        true => flags | OFlags::CLOEXEC,
        false => flags | OFlags::NOCTTY | OFlags::CLOEXEC,
    };
    match walk {
        // Without O_NOFOLLOW: RESOLVE_NO_SYMLINKS refuses a final symlink with ELOOP, whereas with O_PATH and
        // O_NOFOLLOW it would open the link itself.
        Walk::Openat2 => {
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            let mut attempts = 0;
            loop {
                match rustix::fs::openat2(parent, relative, flags, mode, resolve) {
                    Err(rustix::io::Errno::AGAIN) if attempts < EAGAIN_RETRIES => attempts += 1,
                    result => return Ok(result?),
                }
            }
        }
        Walk::StepByStep => open_step_by_step(parent, relative, flags | OFlags::NOFOLLOW, mode),
    }
}

/// The walk of [`open_relative`] without `openat2`: each folder on the way is opened with `O_PATH | O_NOFOLLOW`
/// and must be a real directory, so a symlink anywhere is refused with `ELOOP`, as `RESOLVE_NO_SYMLINKS` does.
fn open_step_by_step(parent: BorrowedFd<'_>, relative: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let names = normal_components(relative)?;
    let Some((last, folders)) = names.split_last() else {
        // The anchor itself.
        return Ok(rustix::fs::openat(parent, ".", flags, mode)?);
    };
    let mut current: Option<OwnedFd> = None;
    for name in folders {
        let at = current.as_ref().map_or(parent, AsFd::as_fd);
        let folder = rustix::fs::openat(at, *name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
        match FileType::from_raw_mode(rustix::fs::fstat(&folder)?.st_mode) {
            FileType::Directory => current = Some(folder),
            FileType::Symlink => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
            _ => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
        }
    }
    let at = current.as_ref().map_or(parent, AsFd::as_fd);
    if !flags.contains(OFlags::PATH) {
        // O_NOFOLLOW makes a final symlink fail the open.
        return Ok(rustix::fs::openat(at, *last, flags, mode)?);
    }
    // With O_PATH, O_NOFOLLOW opens a final symlink itself (and O_DIRECTORY then fails with ENOTDIR): open without
    // O_DIRECTORY and look at what it is.
    let opened = rustix::fs::openat(at, *last, flags - OFlags::DIRECTORY, mode)?;
    match FileType::from_raw_mode(rustix::fs::fstat(&opened)?.st_mode) {
        FileType::Symlink => Err(io::Error::from_raw_os_error(libc::ELOOP)),
        FileType::Directory => Ok(opened),
        _ if flags.contains(OFlags::DIRECTORY) => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
        _ => Ok(opened),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::symlink;

    use super::*;

    const WALKS: [Walk; 2] = [Walk::Openat2, Walk::StepByStep];

    fn layout() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("cwd/sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("cwd/sub/file.txt"), "inside").unwrap();
        std::fs::write(base.join("outside/file.txt"), "outside").unwrap();
        (root, base)
    }

    fn read(anchor: &Anchor, target: &Path) -> io::Result<String> {
        let mut text = String::new();
        anchor.open_file(target, OFlags::RDONLY, Mode::empty())?.read_to_string(&mut text)?;
        Ok(text)
    }

    #[test]
    fn files_beneath_the_anchor_open_and_symlinks_anywhere_on_the_way_are_refused() {
        let (_root, base) = layout();
        symlink(base.join("outside"), base.join("cwd/out")).unwrap();
        symlink("sub", base.join("cwd/inner")).unwrap();
        symlink("file.txt", base.join("cwd/sub/alias")).unwrap();
        for walk in WALKS {
            let anchor = Anchor::open_with(&base.join("cwd"), walk).unwrap();
            assert_eq!(read(&anchor, &base.join("cwd/sub/file.txt")).unwrap(), "inside", "{walk:?}");
            // Even a link that stays inside is refused: the resolved path a tool passes has none.
            for linked in ["out/file.txt", "inner/file.txt", "sub/alias"] {
                let error = read(&anchor, &base.join("cwd").join(linked)).unwrap_err();
                assert_eq!(error.raw_os_error(), Some(libc::ELOOP), "{walk:?} {linked}: {error}");
            }
            let outside = read(&anchor, &base.join("outside/file.txt")).unwrap_err();
            assert_eq!(outside.raw_os_error(), Some(libc::EXDEV), "{walk:?}");
            let climbing = read(&anchor, &base.join("cwd/sub/../../outside/file.txt")).unwrap_err();
            assert_eq!(climbing.raw_os_error(), Some(libc::EXDEV), "{walk:?}");
        }
    }

    #[test]
    fn an_anchor_is_refused_when_its_own_path_holds_a_symlink() {
        let (_root, base) = layout();
        symlink(base.join("cwd"), base.join("cwd-link")).unwrap();
        for walk in WALKS {
            let error = Anchor::open_with(&base.join("cwd-link"), walk).unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::ELOOP), "{walk:?}");
            assert_eq!(Anchor::open_with(Path::new("/"), walk).unwrap().path, Path::new("/"));
        }
    }

    #[test]
    fn missing_folders_are_created_level_by_level_and_never_through_a_symlink() {
        let (_root, base) = layout();
        symlink(base.join("outside"), base.join("cwd/out")).unwrap();
        for walk in WALKS {
            let anchor = Anchor::open_with(&base.join("cwd"), walk).unwrap();
            let target = base.join(format!("cwd/new-{walk:?}/deeper"));
            let mut seen = 0;
            anchor
                .open_or_create_directories(&target, |_| {
                    seen += 1;
                    Ok::<(), ()>(())
                })
                .unwrap();
            assert!(target.is_dir());
            assert_eq!(seen, 2, "each folder is seen before something is created in it");

            let through_link = anchor.open_or_create_directories(&base.join("cwd/out/made"), |_| Ok::<(), ()>(()));
            assert!(
                matches!(through_link, Err(CreateError::Io(ref error)) if error.raw_os_error() == Some(libc::ELOOP))
            );
            let refused = anchor.open_or_create_directories(&base.join("cwd/refused/x"), |_| Err("no"));
            assert!(matches!(refused, Err(CreateError::Refused("no"))));
            assert!(!base.join("cwd/refused").exists());
        }
        assert!(!base.join("outside/made").exists());
    }

    #[test]
    fn a_listing_reads_the_opened_folder_with_the_kinds_of_its_entries() {
        let (_root, base) = layout();
        symlink("sub", base.join("cwd/link")).unwrap();
        let anchor = Anchor::open(&base.join("cwd")).unwrap();
        let folder = anchor.open_file(&base.join("cwd"), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let mut entries = list(&folder).unwrap();
        entries.sort_by(|left, right| left.0.cmp(&right.0));
        assert_eq!(entries, [("link".into(), FileType::Symlink), ("sub".into(), FileType::Directory)]);
    }
}
