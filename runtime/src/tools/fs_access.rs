//! Opening files at execute time without being led out of the cwd.
//!
//! `permission` judged a path some time ago; by now a component may have been replaced by a symlink. So every
//! execute resolves the path again and refuses with `denied` if it now escapes. It then opens, creates and lists
//! only beneath a verified directory handle ([`Anchor`]: the cwd, or the root for an approved path outside it),
//! with the kernel refusing any symlink on the way (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, see
//! [`super::dir_handle`]). A folder swapped for a symlink after the resolution is therefore never followed: the
//! open fails and the call is `denied`, having read, created or changed nothing. Files are opened without
//! blocking on a FIFO (`O_NONBLOCK`).
//!
//! The sandbox's denied paths ([`ProtectedPaths`]: the daemon's data directory, `~/.ssh` and the like) are checked
//! the same way, by the identity of the file opened and of the folders above it rather than by the path written,
//! so a hard link, a bind mount or a symlinked folder does not lead around them. They are refused in every
//! permission mode, for approved paths too. A write checks the folder it creates in before creating anything.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};
use troupe_protocol::types::run::PersistedToolResult;

use super::PermissionRequest;
use super::dir_handle::{Anchor, CreateError, create_new_file, open_in, remove_in};
use super::error::ToolError;
use super::paths::{ResolvedPath, resolve_path, verified_cwd};
use super::results;
use super::session_cwd::CwdProblem;
use crate::sandbox::ProtectedPaths;

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

/// The handle `resolved` is opened beneath: the cwd for a path inside it; the root for an approved path outside
/// it, which then must be reached without any symlink, exactly as it was approved.
///
/// The cwd's handle is the one kept for it ([`super::cwd_handle`]), checked again to be where its path says.
pub(crate) fn anchor_for(resolved: &ResolvedPath, requested: &str) -> Result<Arc<Anchor>, PersistedToolResult> {
    if resolved.inside_cwd {
        return verified_cwd(&resolved.cwd).map_err(|error| match error {
            // Replaced since the path was resolved a moment ago: as a symlink met while opening is.
            ToolError::CwdUnusable(CwdProblem::Replaced { .. }) => results::denied(format!("refused: {error}")),
            error => error.into_result(),
        });
    }
    Anchor::open(Path::new("/")).map(Arc::new).map_err(|error| open_failure("open", requested, &error))
}

/// Opens a regular file for reading.
pub(crate) fn open_for_read(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<File, PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let file = anchor
        .open_file(&resolved.path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())
        .map_err(|error| open_failure("open", requested, &error))?;
    let metadata = file.metadata().map_err(|error| io_error("inspect", requested, &error))?;
    check_opened_file(&file, &metadata, requested, protected)?;
    if metadata.is_dir() {
        return Err(results::error(format!("{requested} is a directory; use list_dir to see its entries")));
    }
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    Ok(file)
}

/// What the file at `resolved` holds before a write: its content when it has at most `max` bytes, only its size
/// when larger, or `Absent` when there is no file (nor, perhaps, its folder). Refused as any read is.
pub(crate) fn read_prior(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
    max: u64,
) -> Result<crate::changes::Prior, PersistedToolResult> {
    use crate::changes::Prior;
    check_protected_path(protected, resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let file = match anchor.open_file(&resolved.path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Prior::Absent),
        Err(error) => return Err(open_failure("open", requested, &error)),
    };
    let metadata = file.metadata().map_err(|error| io_error("inspect", requested, &error))?;
    check_opened_file(&file, &metadata, requested, protected)?;
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    if metadata.len() > max {
        return Ok(Prior::TooLarge { size: metadata.len() });
    }
    let mut content = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut content).map_err(|error| io_error("read", requested, &error))?;
    if content.len() as u64 > max {
        return Ok(Prior::TooLarge { size: content.len() as u64 });
    }
    Ok(Prior::Content(content))
}

/// The digest of the file at `resolved` (`sha256:<hex>`, read in pieces), or `None` when there is no file.
pub(crate) fn digest_file(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<Option<String>, PersistedToolResult> {
    use sha2::{Digest as _, Sha256};
    check_protected_path(protected, resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let mut file = match anchor.open_file(&resolved.path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(open_failure("open", requested, &error)),
    };
    let metadata = file.metadata().map_err(|error| io_error("inspect", requested, &error))?;
    check_opened_file(&file, &metadata, requested, protected)?;
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = file.read(&mut buffer).map_err(|error| io_error("read", requested, &error))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(Some(crate::changes::digest_text(&hasher.finalize())))
}

/// The folder `resolved` lies in and its own name; an error for a path that names no file (`/`, `..`).
fn folder_and_name<'a>(
    resolved: &'a ResolvedPath,
    requested: &str,
) -> Result<(&'a Path, &'a std::ffi::OsStr), PersistedToolResult> {
    match (resolved.path.parent(), resolved.path.file_name()) {
        (Some(folder), Some(name)) => Ok((folder, name)),
        _ => Err(results::error(format!("{requested} names no file"))),
    }
}

/// Removes the regular file at `resolved`, by its folder's handle; a file already gone is fine.
pub(crate) fn remove_file(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<(), PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let (parent_path, name) = folder_and_name(resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let parent = match anchor.open_file(parent_path, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
        Ok(parent) => parent,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(open_failure("open the directory of", requested, &error)),
    };
    check_opened(&parent, requested, protected)?;
    match remove_in(&parent, name) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error("remove", requested, &error)),
    }
}

/// Opens a directory for listing.
pub(crate) fn open_directory(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<File, PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let directory = anchor
        .open_file(&resolved.path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK, Mode::empty())
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ENOTDIR) => results::error(format!("{requested} is not a directory")),
            _ => open_failure("open", requested, &error),
        })?;
    check_opened(&directory, requested, protected)?;
    Ok(directory)
}

/// The anchor a search walks beneath, after checking its root (a folder or a file) by path and, opened, by
/// identity.
pub(crate) fn open_search_root(
    resolved: &ResolvedPath,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<Arc<Anchor>, PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let root = anchor
        .open_file(&resolved.path, OFlags::PATH, Mode::empty())
        .map_err(|error| open_failure("open", requested, &error))?;
    check_opened(&root, requested, protected)?;
    Ok(anchor)
}

/// Replaces the contents of a file, creating it and its missing parent directories. A refused write changes
/// nothing: the denied paths are checked before anything is created, each folder again before something is
/// created in it, and the opened file before a byte of it changes.
pub(crate) fn write_file(
    resolved: &ResolvedPath,
    requested: &str,
    content: &[u8],
    protected: &ProtectedPaths,
) -> Result<(), PersistedToolResult> {
    check_protected_path(protected, resolved, requested)?;
    let (parent_path, name) = folder_and_name(resolved, requested)?;
    let anchor = anchor_for(resolved, requested)?;
    let parent = if resolved.inside_cwd {
        anchor.open_or_create_directories(parent_path, |folder| check_opened(folder, requested, protected)).map_err(
            |error| match error {
                CreateError::Refused(refusal) => refusal,
                CreateError::Io(error) => open_failure("create the parent directories of", requested, &error),
            },
        )?
    } else {
        // Parents are created inside the cwd only; an approved path outside it must have its directory already.
        anchor
            .open_file(parent_path, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .map_err(|error| open_failure("open the directory of", requested, &error))?
    };
    check_opened(&parent, requested, protected)?;
    // Creating exclusively first tells us whether the file is ours to remove if it turns out to be refused.
    let flags = OFlags::WRONLY | OFlags::NONBLOCK;
    let (file, created) = match create_new_file(&parent, name, flags) {
        Ok(file) => (file, true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            let file = open_in(&parent, name, flags).map_err(|error| open_failure("open", requested, &error))?;
            (file, false)
        }
        Err(error) => return Err(open_failure("create", requested, &error)),
    };
    let checked = file
        .metadata()
        .map_err(|error| io_error("inspect", requested, &error))
        .and_then(|metadata| check_opened_file(&file, &metadata, requested, protected).map(|()| metadata));
    let metadata = match checked {
        Ok(metadata) => metadata,
        Err(refusal) => {
            if created {
                // The entry this call made, in the folder it made it in: not whatever the path names by now.
                let _ = remove_in(&parent, name);
            }
            return Err(refusal);
        }
    };
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    // Truncating only after the checks means a refused write never empties anything.
    let mut file = file;
    file.set_len(0).and_then(|()| file.write_all(content)).map_err(|error| io_error("write", requested, &error))
}

/// Refuses an opened file or folder that is, or lies beneath, a denied path, or is a hard link to something
/// beneath one.
fn check_opened(file: &File, requested: &str, protected: &ProtectedPaths) -> Result<(), PersistedToolResult> {
    match protected.refusal_for_open(file, requested) {
        Some(refusal) => Err(results::denied(refusal)),
        None => Ok(()),
    }
}

/// [`check_opened`] of a file whose metadata was read already.
fn check_opened_file(
    file: &File,
    metadata: &std::fs::Metadata,
    requested: &str,
    protected: &ProtectedPaths,
) -> Result<(), PersistedToolResult> {
    match protected.refusal_for_opened(file, metadata, requested) {
        Some(refusal) => Err(results::denied(refusal)),
        None => Ok(()),
    }
}

/// Opens a file a walker found beneath `anchor` for reading, as every other open is made, and checks it against
/// the denied paths; `None` when it cannot be opened (it moved, or a folder above it became a symlink) or is
/// refused. The file comes with its metadata.
pub(crate) fn open_walked_file(
    anchor: &Anchor,
    path: &Path,
    protected: &ProtectedPaths,
) -> Option<(File, std::fs::Metadata)> {
    let file = anchor.open_file(path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).ok()?;
    let metadata = file.metadata().ok()?;
    match protected.refusal_for_opened(&file, &metadata, &path.to_string_lossy()) {
        Some(_) => None,
        None => Some((file, metadata)),
    }
}

/// A failed open as the model reads it. A symlink met on the way (`ELOOP`) or a path leading out of its handle
/// (`EXDEV`) means the path changed since it was resolved, which no call may follow: `denied`, not a mere error.
fn open_failure(operation: &str, requested: &str, error: &io::Error) -> PersistedToolResult {
    match error.raw_os_error() {
        Some(libc::ELOOP | libc::EXDEV) => results::denied(format!(
            "refused: {requested} changed while it was being opened (a folder on its path became a symbolic link \
             or leads elsewhere); nothing was read or written"
        )),
        _ => io_error(operation, requested, error),
    }
}

/// An I/O failure as the model reads it: the operation, the path it asked for, and the OS error.
pub(crate) fn io_error(operation: &str, requested: &str, error: &io::Error) -> PersistedToolResult {
    results::error(format!("could not {operation} {requested}: {error}"))
}
