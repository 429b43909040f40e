//! Content-addressed blobs: `<data_dir>/blobs/<first two hex digits>/<sha-256 in hex>`, shared by every session.
//!
//! A blob is written once, through a temporary file in `blobs/` that is fsynced and renamed into place, its
//! folder fsynced after: a blob that exists is whole. The same content is stored once however many records name
//! it (a file written twice in a row: the first write's "after" is the second's "before"). Each blob is at most
//! [`super::ChangeLimits::max_blob_bytes`], and all of them together at most `budget_bytes`; the running total
//! is counted from the folder the first time it is needed and kept in memory after (the daemon is the only writer:
//! its lock keeps a second daemon out).
//!
//! Removal is [`BlobStore::retain`]'s, which the store calls with every digest some session's journal still
//! names; the caller holds the store's lock so no record is being written meanwhile.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// The text form of a digest: `sha256:<64 hex digits>`.
pub const DIGEST_PREFIX: &str = "sha256:";

/// The digest of `content`, as records name it.
pub fn digest_of(content: &[u8]) -> String {
    digest_text(&Sha256::digest(content))
}

/// A SHA-256 digest computed elsewhere (of a file read in pieces), as records name it.
pub fn digest_text(digest: &[u8]) -> String {
    let mut text = String::with_capacity(DIGEST_PREFIX.len() + 64);
    text.push_str(DIGEST_PREFIX);
    for byte in digest {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// The hex part of a well-formed digest; `None` for anything else, so a damaged record never names a path.
fn hex_of(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix(DIGEST_PREFIX)?;
    (hex.len() == 64 && hex.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))).then_some(hex)
}

/// Why a blob was not stored.
#[derive(Debug, thiserror::Error)]
pub enum BlobRefusal {
    #[error("it is {size} bytes, over the {max} bytes a recorded file may have")]
    TooLarge { size: u64, max: u64 },
    #[error("the change store is full ({used} of {budget} bytes used); deleting old sessions frees room")]
    BudgetSpent { used: u64, budget: u64 },
    #[error("the change store could not be written: {0}")]
    Io(#[from] io::Error),
}

pub(super) struct BlobStore {
    dir: PathBuf,
    max_blob_bytes: u64,
    budget_bytes: u64,
    /// Bytes of all blobs, counted from the folder when first needed.
    used: Option<u64>,
}

impl BlobStore {
    pub(super) fn new(dir: PathBuf, max_blob_bytes: u64, budget_bytes: u64) -> Self {
        BlobStore { dir, max_blob_bytes, budget_bytes, used: None }
    }

    fn path_of(&self, hex: &str) -> PathBuf {
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Stores `content` durably unless a blob of its digest exists; its digest.
    pub(super) fn put(&mut self, content: &[u8]) -> Result<String, BlobRefusal> {
        let size = content.len() as u64;
        if size > self.max_blob_bytes {
            return Err(BlobRefusal::TooLarge { size, max: self.max_blob_bytes });
        }
        let digest = digest_of(content);
        let hex = &digest[DIGEST_PREFIX.len()..];
        let path = self.path_of(hex);
        if path.is_file() {
            return Ok(digest);
        }
        let used = self.used()?;
        if used + size > self.budget_bytes {
            return Err(BlobRefusal::BudgetSpent { used, budget: self.budget_bytes });
        }
        ensure_private_dir(&self.dir)?;
        let folder = self.dir.join(&hex[..2]);
        ensure_private_dir(&folder)?;
        let temporary = self.dir.join(format!(".{hex}.{}.tmp", crate::clock::new_id()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| {
                file.write_all(content)?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, &path))
            .and_then(|()| sync_dir(&folder))
            .and_then(|()| sync_dir(&self.dir));
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(error.into());
        }
        self.used = Some(used + size);
        Ok(digest)
    }

    /// The content of a blob, checked against its digest.
    pub(super) fn get(&self, digest: &str) -> io::Result<Vec<u8>> {
        let hex = hex_of(digest).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a blob digest"))?;
        let mut file = crate::regular_file::open_regular(&self.path_of(hex), crate::regular_file::Links::Refuse)?;
        let mut content = Vec::new();
        file.read_to_end(&mut content)?;
        if digest_of(&content) != digest {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the stored content does not match its digest"));
        }
        Ok(content)
    }

    /// Removes every blob not in `referenced` (and temporary files a crash left); how many blobs went.
    pub(super) fn retain(&mut self, referenced: &HashSet<String>) -> io::Result<usize> {
        let mut removed = 0;
        let mut used = 0;
        for (path, name, size) in self.entries()? {
            let keep = hex_of_name(&name).is_some_and(|hex| referenced.contains(&format!("{DIGEST_PREFIX}{hex}")));
            if keep {
                used += size;
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => removed += usize::from(!name.starts_with('.')),
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "could not remove an unreferenced blob");
                    used += size;
                }
            }
        }
        if removed > 0 && self.dir.is_dir() {
            sync_dir(&self.dir)?;
        }
        self.used = Some(used);
        Ok(removed)
    }

    fn used(&mut self) -> io::Result<u64> {
        if let Some(used) = self.used {
            return Ok(used);
        }
        let used = self.entries()?.iter().map(|(_, _, size)| size).sum();
        self.used = Some(used);
        Ok(used)
    }

    /// Every file of the store: blobs in their folders, and temporary files at the top (names starting with `.`).
    fn entries(&self) -> io::Result<Vec<(PathBuf, String, u64)>> {
        let mut entries = Vec::new();
        let top = match std::fs::read_dir(&self.dir) {
            Ok(top) => top,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(entries),
            Err(error) => return Err(error),
        };
        for entry in top.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type()?;
            if kind.is_file() && name.starts_with('.') {
                entries.push((entry.path(), name, entry.metadata()?.len()));
            } else if kind.is_dir() {
                for blob in std::fs::read_dir(entry.path())?.flatten() {
                    if blob.file_type()?.is_file() {
                        let name = blob.file_name().to_string_lossy().into_owned();
                        entries.push((blob.path(), name, blob.metadata()?.len()));
                    }
                }
            }
        }
        Ok(entries)
    }
}

/// The hex digest a blob's file name is, if it is one.
fn hex_of_name(name: &str) -> Option<&str> {
    (name.len() == 64 && name.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))).then_some(name)
}

fn ensure_private_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(crate::data_dir::PRIVATE_DIR_MODE).create(path) {
        Ok(()) => match path.parent() {
            Some(parent) => sync_dir(parent),
            None => Ok(()),
        },
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(error),
    }
}

fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_stored_once_read_back_whole_and_refused_past_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BlobStore::new(dir.path().join("blobs"), 8, 12);
        let digest = store.put(b"abc").unwrap();
        assert_eq!(digest, digest_of(b"abc"));
        assert_eq!(store.put(b"abc").unwrap(), digest, "the same content again is the same blob");
        assert_eq!(store.get(&digest).unwrap(), b"abc");
        assert!(matches!(store.put(b"123456789"), Err(BlobRefusal::TooLarge { size: 9, max: 8 })));
        store.put(b"12345678").unwrap();
        assert!(matches!(store.put(b"xy"), Err(BlobRefusal::BudgetSpent { used: 11, budget: 12 })));
        // A fresh store counts what is on disk.
        let mut again = BlobStore::new(dir.path().join("blobs"), 8, 12);
        assert!(matches!(again.put(b"xy"), Err(BlobRefusal::BudgetSpent { used: 11, .. })));
    }

    #[test]
    fn a_damaged_blob_or_digest_is_an_error_not_content() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BlobStore::new(dir.path().join("blobs"), 64, 1024);
        let digest = store.put(b"kept").unwrap();
        let hex = &digest[DIGEST_PREFIX.len()..];
        std::fs::write(dir.path().join("blobs").join(&hex[..2]).join(hex), b"changed").unwrap();
        assert_eq!(store.get(&digest).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(store.get("sha256:../../etc/passwd").unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn retain_removes_what_no_record_names_and_frees_its_room() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = BlobStore::new(dir.path().join("blobs"), 64, 10);
        let kept = store.put(b"kept").unwrap();
        let dropped = store.put(b"drop").unwrap();
        std::fs::write(dir.path().join("blobs").join(".left.tmp"), b"torn").unwrap();
        assert_eq!(store.retain(&HashSet::from([kept.clone()])).unwrap(), 1);
        assert!(store.get(&kept).is_ok() && store.get(&dropped).is_err());
        assert!(!dir.path().join("blobs").join(".left.tmp").exists());
        store.put(b"sixsix").unwrap();
    }
}
