//! Opening files at execute time without being led out of the cwd.
//!
//! `permission` judged a path some time ago; by now a component may have been replaced by a symlink. So every
//! execute resolves the path again and refuses with `denied` if it now escapes, opens the resolved path without
//! following a final symlink (`O_NOFOLLOW`) and without blocking on a FIFO (`O_NONBLOCK`), and then asks the kernel
//! where the opened descriptor really is (`/proc/self/fd`) before reading or changing a byte. The one window left
//! is a directory swapped between the walk and the open, which the descriptor check then catches.
//!
//! The sandbox's denied paths ([`ProtectedPaths`]: the daemon's data directory, `~/.ssh` and the like) are checked
//! the same way, by the identity of the file opened and of the folders above it rather than by the path written,
//! so a hard link, a bind mount or a symlinked folder does not lead around them. They are refused in every
//! permission mode, for approved paths too.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use troupe_protocol::types::run::PersistedToolResult;

use super::PermissionRequest;
use super::paths::{ResolvedPath, resolve_path};
use super::results;
use crate::sandbox::ProtectedPaths;
use crate::sandbox::protected::descriptor_path;

/// Resolves `requested` again for execution: an unusable path is an `error` result, and one outside the cwd is
/// `denied` unless `approved` allowed exactly that resolved path.
pub(crate) fn resolve_for_execute(
    cwd: &Path,
    requested: &str,
    approved: Option<&PermissionRequest>,
) -> Result<ResolvedPath, PersistedToolResult> {
    let resolved = resolve_path(cwd, requested).map_err(|error| error.into_result())?;
    if resolved.inside_cwd {
        return Ok(resolved);
    }
    match approved {
        Some(request) if !request.inside_cwd && request.resource == resolved.path.to_string_lossy() => Ok(resolved),
        _ => Err(outside_cwd(requested, &resolved.path)),
    }
}

fn outside_cwd(requested: &str, resolved: &Path) -> PersistedToolResult {
    results::denied(format!(
        "refused: {requested} resolves to {}, which is outside the working directory",
        resolved.display()
    ))
}

fn open_flags() -> i32 {
    libc::O_NOFOLLOW | libc::O_NONBLOCK
}

/// Refuses with `denied` a resolved path that is, or lies beneath, a denied path by path or by identity, before
/// anything is opened or created there.
pub(crate) fn check_protected_path(
    protected: &ProtectedPaths,
    resolved: &ResolvedPath,
    requested: &str,
) -> Result<(), PersistedToolResult> {
    match protected.refusal_for_path(&resolved.path, requested) {
        Some(refusal) => Err(results::denied(refusal)),
        None => Ok(()),
    }
}

/// Opens a regular file for reading.
pub(crate) fn open_for_read(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<File, PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(open_flags())
        .open(&resolved.path)
        .map_err(|error| io_error("open", requested, &error))?;
    check_descriptor(&file, resolved, requested, protected)?;
    let metadata = file.metadata().map_err(|error| io_error("inspect", requested, &error))?;
    if metadata.is_dir() {
        return Err(results::error(format!("{requested} is a directory; use list_dir to see its entries")));
    }
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    Ok(file)
}

/// Opens a directory for listing, not following a final symlink.
pub(crate) fn open_directory(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<File, PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let directory =
        OpenOptions::new().read(true).custom_flags(open_flags() | libc::O_DIRECTORY).open(&resolved.path).map_err(
            |error| match error.raw_os_error() {
                Some(libc::ENOTDIR) => results::error(format!("{requested} is not a directory")),
                _ => io_error("open", requested, &error),
            },
        )?;
    check_descriptor(&directory, resolved, requested, protected)?;
    Ok(directory)
}

/// Replaces the contents of a file, creating it and its missing parent directories. A refused write changes
/// nothing: the denied paths are checked before anything is created, and the opened file again before a byte of
/// it changes.
pub(crate) fn write_file(
    resolved: &ResolvedPath,
    requested: &str,
    content: &[u8],
    protected: &ProtectedPaths,
) -> Result<(), PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    // Parents are created inside the cwd only; an approved path outside it must have its directory already.
    if let Some(parent) = resolved.path.parent().filter(|_| resolved.inside_cwd) {
        std::fs::create_dir_all(parent)
            .map_err(|error| io_error("create the parent directories of", requested, &error))?;
    }
    // Creating exclusively first tells us whether the file is ours to remove if it turns out to be misplaced.
    let (file, created) =
        match OpenOptions::new().write(true).create_new(true).custom_flags(open_flags()).open(&resolved.path) {
            Ok(file) => (file, true),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let file = OpenOptions::new()
                    .write(true)
                    .custom_flags(open_flags())
                    .open(&resolved.path)
                    .map_err(|error| io_error("open", requested, &error))?;
                (file, false)
            }
            Err(error) => return Err(io_error("create", requested, &error)),
        };
    if let Err(refusal) = check_descriptor(&file, resolved, requested, protected) {
        if created {
            remove_misplaced(&file);
        }
        return Err(refusal);
    }
    let metadata = file.metadata().map_err(|error| io_error("inspect", requested, &error))?;
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    // Truncating only after the checks means a refused write never empties anything.
    let mut file = file;
    file.set_len(0).and_then(|()| file.write_all(content)).map_err(|error| io_error("write", requested, &error))
}

/// Refuses a descriptor whose real location is outside the cwd, or, for an approved path outside it, anywhere
/// but that path; and one that is, or lies beneath, a denied path, or is a hard link to something beneath one.
fn check_descriptor(
    file: &File,
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<(), PersistedToolResult> {
    let boundary = if resolved.inside_cwd { &resolved.cwd } else { &resolved.path };
    match descriptor_path(file) {
        Some(Ok(actual)) if actual.starts_with(boundary) => {}
        Some(Ok(actual)) => return Err(outside_cwd(requested, &actual)),
        Some(Err(error)) => return Err(io_error("verify the location of", requested, &error)),
        // Without /proc there is nothing more to ask; the resolution and O_NOFOLLOW still held.
        None => {}
    }
    match protected.refusal_for_open(file, requested) {
        Some(refusal) => Err(results::denied(refusal)),
        None => Ok(()),
    }
}

/// The path through which `directory`'s entries can be listed: its descriptor's `/proc` entry, so the listing is
/// of the folder that was checked even if its path was swapped since.
#[cfg(target_os = "linux")]
pub(crate) fn directory_listing_path(directory: &File, _resolved: &ResolvedPath) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", directory.as_raw_fd()))
}

/// The path through which `directory`'s entries can be listed: without `/proc`, the resolved path.
#[cfg(not(target_os = "linux"))]
pub(crate) fn directory_listing_path(_directory: &File, resolved: &ResolvedPath) -> PathBuf {
    resolved.path.clone()
}

/// Opens a file found by a walker for reading, not following a symlink or blocking on a FIFO, and checks it
/// against the denied paths; `None` when it cannot be opened or is refused.
pub(crate) fn open_walked_file(path: &Path, protected: &ProtectedPaths) -> Option<File> {
    let file = OpenOptions::new().read(true).custom_flags(open_flags()).open(path).ok()?;
    match protected.refusal_for_open(&file, &path.to_string_lossy()) {
        Some(_) => None,
        None => Some(file),
    }
}

/// Best effort: removes a file this call created in the wrong place, so a refused write leaves nothing behind.
fn remove_misplaced(file: &File) {
    if let Some(Ok(actual)) = descriptor_path(file) {
        let _ = std::fs::remove_file(actual);
    }
}

/// An I/O failure as the model reads it: the operation, the path it asked for, and the OS error.
pub(crate) fn io_error(operation: &str, requested: &str, error: &io::Error) -> PersistedToolResult {
    let reason = match error.raw_os_error() {
        Some(libc::ELOOP) => "it is a symbolic link, which file tools do not follow here".to_owned(),
        _ => error.to_string(),
    };
    results::error(format!("could not {operation} {requested}: {reason}"))
}
