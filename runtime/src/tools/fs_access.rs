//! Opening files at execute time without being led out of the cwd.
//!
//! `permission` judged a path some time ago; by now a component may have been replaced by a symlink. So every
//! execute resolves the path again and refuses with `denied` if it now escapes, opens the resolved path without
//! following a final symlink (`O_NOFOLLOW`) and without blocking on a FIFO (`O_NONBLOCK`), and then asks the kernel
//! where the opened descriptor really is (`/proc/self/fd`) before reading or changing a byte. The one window left
//! is a directory swapped between the walk and the open, which the descriptor check then catches.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use troupe_protocol::types::run::PersistedToolResult;

use super::PermissionRequest;
use super::paths::{ResolvedPath, resolve_path};
use super::results;

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

/// Opens a regular file for reading.
pub(crate) fn open_for_read(resolved: &ResolvedPath, requested: &str) -> Result<File, PersistedToolResult> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(open_flags())
        .open(&resolved.path)
        .map_err(|error| io_error("open", requested, &error))?;
    check_descriptor(&file, resolved, requested)?;
    let metadata = file.metadata().map_err(|error| io_error("inspect", requested, &error))?;
    if metadata.is_dir() {
        return Err(results::error(format!("{requested} is a directory; use list_dir to see its entries")));
    }
    if !metadata.is_file() {
        return Err(results::error(format!("{requested} is not a regular file")));
    }
    Ok(file)
}

/// Replaces the contents of a file, creating it and its missing parent directories.
pub(crate) fn write_file(resolved: &ResolvedPath, requested: &str, content: &[u8]) -> Result<(), PersistedToolResult> {
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
    if let Err(refusal) = check_descriptor(&file, resolved, requested) {
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
/// but that path.
fn check_descriptor(file: &File, resolved: &ResolvedPath, requested: &str) -> Result<(), PersistedToolResult> {
    let boundary = if resolved.inside_cwd { &resolved.cwd } else { &resolved.path };
    match descriptor_path(file) {
        Some(Ok(actual)) if actual.starts_with(boundary) => Ok(()),
        Some(Ok(actual)) => Err(outside_cwd(requested, &actual)),
        Some(Err(error)) => Err(io_error("verify the location of", requested, &error)),
        // Without /proc there is nothing more to ask; the resolution and O_NOFOLLOW still held.
        None => Ok(()),
    }
}

#[cfg(target_os = "linux")]
fn descriptor_path(file: &File) -> Option<io::Result<PathBuf>> {
    use std::os::fd::AsRawFd;
    Some(std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())))
}

#[cfg(not(target_os = "linux"))]
fn descriptor_path(_file: &File) -> Option<io::Result<PathBuf>> {
    None
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
