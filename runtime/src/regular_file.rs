//! Opening a file that someone else could have laid out (a project's `.git`, a skill, another daemon's data dir,
//! an artifact) without ever blocking on it: a FIFO's open waits for a writer, which would pin the daemon's thread
//! and whatever waits on it. Opened `O_NONBLOCK` and checked to be a regular file once open (so no race between the
//! check and the use).

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether a symlink as the last component is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    Follow,
    Refuse,
}

/// `path` opened for reading, never blocking, when it is a regular file. Anything else (a FIFO, a device, a folder)
/// is an error of kind [`io::ErrorKind::InvalidInput`]; with [`Links::Refuse`], a symlink fails to open (`ELOOP`).
pub fn open_regular(path: &Path, links: Links) -> io::Result<File> {
    let nofollow = if links == Links::Refuse { libc::O_NOFOLLOW } else { 0 };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC | nofollow)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_folder_and_a_refused_link_do_not_open_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert_eq!(open_regular(&fifo, Links::Follow).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(open_regular(dir.path(), Links::Follow).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let file = dir.path().join("file");
        std::fs::write(&file, "text").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(open_regular(&link, Links::Follow).is_ok());
        assert!(open_regular(&link, Links::Refuse).is_err());
        assert!(open_regular(&file, Links::Refuse).is_ok());
    }
}
