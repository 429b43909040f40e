//! The daemon's side of a unix socket listener: what to do with a file already at the socket's path.
//!
//! A daemon killed without a clean stop leaves its socket file behind, and binding over it fails. Removing it
//! blindly would steal the address of a daemon that is still running (its clients would silently reach the new
//! one while it keeps serving nobody), so the file is removed only after a connection to it is refused, and
//! only if it is a socket at all: any other kind of file is the operator's, and is left alone.

use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Makes `path` free for a new socket: nothing there, or a stale socket (removed), else a clear refusal.
pub fn clear_stale_socket(path: &Path) -> anyhow::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == ErrorKind::NotFound => return check_parent_dir(path),
        Err(error) => anyhow::bail!("cannot listen on unix:{}: {error}", path.display()),
    };
    if !metadata.file_type().is_socket() {
        anyhow::bail!(
            "cannot listen on unix:{}: a file that is not a socket is in the way\n  hint: remove it, or choose \
             another path with `troupe serve --listen unix:PATH` or `listen` in config.toml",
            path.display()
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_probe) => anyhow::bail!(
            "cannot listen on unix:{}: another program (another troupe daemon?) is listening on that socket\n  \
             hint: stop it, or choose another path with `troupe serve --listen unix:PATH` or `listen` in config.toml",
            path.display()
        ),
        Err(error) if error.kind() == ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing the unix socket a daemon that did not stop cleanly left");
            std::fs::remove_file(path)
                .map_err(|error| anyhow::anyhow!("cannot remove the stale socket {}: {error}", path.display()))
        }
        Err(error) => {
            anyhow::bail!("cannot listen on unix:{}: probing the existing socket failed: {error}", path.display())
        }
    }
}

/// Refuses, before the engine starts, a socket path whose directory is missing: the bind would fail with a bare
/// "No such file or directory" that does not say which file.
fn check_parent_dir(path: &Path) -> anyhow::Result<()> {
    let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => anyhow::bail!(
            "cannot listen on unix:{}: {} is not a directory\n  hint: choose another path with `troupe serve \
             --listen unix:PATH` or `listen` in config.toml",
            path.display(),
            parent.display()
        ),
        Err(error) if error.kind() == ErrorKind::NotFound => anyhow::bail!(
            "cannot listen on unix:{}: the directory {} does not exist\n  hint: create it first (`mkdir -p {}`); \
             under systemd, `RuntimeDirectory=` in the unit creates /run/<name> for the service",
            path.display(),
            parent.display(),
            parent.display()
        ),
        Err(error) => anyhow::bail!("cannot listen on unix:{}: {}: {error}", path.display(), parent.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_free_and_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("troupe.sock");
        clear_stale_socket(&path).unwrap();
        let orphan = dir.path().join("nodir/troupe.sock");
        let message = clear_stale_socket(&orphan).unwrap_err().to_string();
        assert!(message.contains("does not exist") && message.contains("mkdir -p"), "{message}");
        std::fs::write(&path, "mine").unwrap();
        let message = clear_stale_socket(&path).unwrap_err().to_string();
        assert!(message.contains("not a socket"), "{message}");
        assert!(path.exists(), "the operator's file is left alone");
    }

    #[test]
    fn a_dead_socket_is_removed_and_a_live_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("troupe.sock");
        let live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let message = clear_stale_socket(&path).unwrap_err().to_string();
        assert!(message.contains("another program"), "{message}");
        drop(live);
        // The listener is closed but its file stays: exactly what a killed daemon leaves.
        assert!(path.exists());
        clear_stale_socket(&path).unwrap();
        assert!(!path.exists());
    }
}
