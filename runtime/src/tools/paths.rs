//! Path resolution and confinement to the session's cwd.
//!
//! A path is resolved the way the kernel would walk it: component by component from the root, replacing each
//! existing symlink by its target (relative targets against the link's directory) and applying `..` to what has
//! been resolved so far, so `link/..` leaves the link's target rather than the link. Components that do not exist
//! yet (a file about to be written) are appended as they are, and a `..` after one of them simply removes it. The
//! result is absolute, free of `.`, `..` and symlinks in every existing component, and is inside the cwd exactly
//! when it starts with the canonical cwd, component-wise.
//!
//! This is stricter than canonicalizing the longest existing prefix and appending the rest: with that, `new/../link`
//! would append `link` unresolved although `link` exists and may point out.
//!
//! A path through a symlink of `/proc` (`/proc/self`, `/proc/thread-self`, `/proc/<pid>/cwd`, `root`, `exe`,
//! `fd/<n>`, `map_files/…`; `/dev/fd`, `/dev/stdin` and the like lead there) is refused: what those links name
//! depends on the process that follows them, and the kernel jumps to the object itself rather than walking the
//! text they read as. Read by the daemon, which resolves and judges paths, they would describe the daemon (its
//! cwd, its descriptors), not what a command or the file tool's open reaches, so the judge and the kernel could
//! disagree in the permissive direction.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use std::sync::Arc;

use super::cwd_handle::CwdHandleError;
use super::dir_handle::Anchor;
use super::error::ToolError;

/// How many symlinks one resolution may follow, as Linux's `MAXSYMLINKS`: more means a loop.
const MAX_SYMLINK_FOLLOWS: usize = 40;

/// A path argument after resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Absolute, with `..` applied and every existing symlink replaced by its target.
    pub path: PathBuf,
    /// The canonical cwd it was resolved against.
    pub cwd: PathBuf,
    /// True when `path` lies at or below `cwd`.
    pub inside_cwd: bool,
}

impl ResolvedPath {
    /// The path as the model should see it: relative to the cwd when inside it, absolute otherwise.
    pub fn display_for_model(&self) -> String {
        match self.path.strip_prefix(&self.cwd) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.to_string_lossy().into_owned(),
            Err(_) => self.path.to_string_lossy().into_owned(),
        }
    }
}

/// The cwd with every symlink resolved; every confinement check compares against this.
///
/// The session's recorded cwd is canonical; one that meets a symlink now was replaced after the session was
/// created and is refused ([`super::session_cwd`]) rather than followed. The file tools then open beneath the
/// cwd with no symlink allowed, so a swap after this check is refused by the kernel.
pub fn canonical_cwd(cwd: &Path) -> Result<PathBuf, ToolError> {
    verified_cwd(cwd).map(|anchor| anchor.path().to_path_buf())
}

/// The cwd's verified handle ([`super::cwd_handle`]), its path canonical.
pub(crate) fn verified_cwd(cwd: &Path) -> Result<Arc<Anchor>, ToolError> {
    super::cwd_handle::verified_cwd(cwd).map_err(|error| match error {
        CwdHandleError::Problem(problem) => ToolError::CwdUnusable(problem),
        CwdHandleError::Canonical { source } => ToolError::Cwd { path: cwd.to_path_buf(), source },
    })
}

/// Resolves `requested` (relative to `cwd`, or absolute) and says whether it stays inside `cwd`.
pub fn resolve_path(cwd: &Path, requested: &str) -> Result<ResolvedPath, ToolError> {
    crate::blocking::assert_may_block();
    if requested.is_empty() {
        return Err(ToolError::InvalidPath { path: String::new(), reason: "the path is empty" });
    }
    if requested.contains('\0') {
        return Err(ToolError::InvalidPath { path: requested.to_owned(), reason: "the path contains a NUL byte" });
    }
    let cwd = canonical_cwd(cwd)?;
    let path = resolve_physical(&cwd, Path::new(requested))
        .map_err(|source| ToolError::Resolve { path: cwd.join(requested), source })?;
    let inside_cwd = path.starts_with(&cwd);
    Ok(ResolvedPath { path, cwd, inside_cwd })
}

/// Walks `requested` (relative to `cwd`, or absolute) component by component, following symlinks, as described in
/// the module docs. `cwd` is the verified cwd's canonical path: every component of it is a real folder, so the
/// walk starts there rather than at `/` (an absolute `requested` starts again at `/`).
fn resolve_physical(cwd: &Path, requested: &Path) -> io::Result<PathBuf> {
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_components_front(&mut pending, requested);
    let mut resolved = cwd.to_path_buf();
    // Whether `resolved` exists. Once a component is missing, nothing below it can be a symlink, so the rest is
    // appended without looking; a `..` back up to an existing directory makes lookups resume.
    let mut exists = true;
    let mut follows = 0;

    while let Some(component) = pending.pop_front() {
        if component == "/" {
            resolved = PathBuf::from("/");
            exists = true;
        } else if component == "." {
            continue;
        } else if component == ".." {
            resolved.pop();
            if !exists {
                exists = path_exists(&resolved)?;
            }
        } else {
            resolved.push(&component);
            if !exists {
                continue;
            }
            match std::fs::symlink_metadata(&resolved) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    if is_in_procfs(&resolved)? {
                        return Err(io::Error::new(io::ErrorKind::PermissionDenied, ProcessLink(resolved)));
                    }
                    follows += 1;
                    if follows > MAX_SYMLINK_FOLLOWS {
                        return Err(io::Error::other("too many levels of symbolic links"));
                    }
                    let target = std::fs::read_link(&resolved)?;
                    // A relative target is relative to the directory holding the link.
                    resolved.pop();
                    push_components_front(&mut pending, &target);
                }
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => exists = false,
                Err(error) => return Err(error),
            }
        }
    }
    Ok(resolved)
}

/// Puts `path`'s components at the front of the queue, in order; an absolute path starts with `/`.
fn push_components_front(pending: &mut VecDeque<OsString>, path: &Path) {
    let components: Vec<OsString> = path
        .components()
        .filter_map(|component| match component {
            Component::RootDir => Some(OsString::from("/")),
            Component::CurDir => None,
            Component::ParentDir => Some(OsString::from("..")),
            Component::Normal(name) => Some(name.to_os_string()),
            // Windows prefixes do not occur on the Unix systems the shell tool requires.
            Component::Prefix(_) => None,
        })
        .collect();
    for component in components.into_iter().rev() {
        pending.push_front(component);
    }
}

/// The refusal of a path through a symlink of `/proc` (see the module docs); it names the link.
#[derive(Debug)]
struct ProcessLink(PathBuf);

impl std::fmt::Display for ProcessLink {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "it goes through {}, a link of /proc whose target depends on the process that follows it; name the file \
             by its own path instead",
            self.0.display()
        )
    }
}

impl std::error::Error for ProcessLink {}

/// Whether the symlink `link` lives in a procfs (its directory's filesystem is `proc`).
fn is_in_procfs(link: &Path) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let directory = link.parent().unwrap_or(Path::new("/"));
    let directory = std::ffi::CString::new(directory.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("the path contains a NUL byte"))?;
    // SAFETY: statfs is plain data, for which all zeroes is a valid value.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `directory` is NUL-terminated and `stat` is a valid statfs to write to.
    if unsafe { libc::statfs(directory.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat.f_type == libc::PROC_SUPER_MAGIC)
}

fn path_exists(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}
