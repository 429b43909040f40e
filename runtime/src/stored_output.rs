//! Whole outputs of loud tool calls: what `PersistedToolResult.output_ref` names and `tool_output.read` reads.
//!
//! A result keeps only the head and tail of each stream (`[tools] max_output_bytes`). When a call's output was
//! longer than that, the session stores the whole of it (each stream up to `[tools] max_stored_output_bytes`) in
//! `sessions/<id>/outputs/<output_ref>/`: one file per stream that produced bytes (`stdout`, `stderr`) and
//! `totals.json`, the bytes each stream produced (more than is stored when the cap cut it). The directory is
//! complete and durable (files, directory and parent synced) before the result that names it is appended, so an
//! acknowledged `output_ref` always reads back. It lies in the session's directory, so it is removed with the
//! session, and in the data directory, which the sandbox denies to every tool.
//!
//! Everything here blocks: the session actor calls it from a blocking thread.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use troupe_protocol::types::tool_output::{OutputStream, is_output_ref};

/// The directory of stored outputs inside a session's directory.
pub const OUTPUTS_DIR: &str = "outputs";

/// The file of a stored output that records how many bytes each stream produced.
const TOTALS_FILE: &str = "totals.json";

/// A fresh `output_ref`: 32 lowercase hexadecimal digits (a UUIDv7), unique within the session.
pub fn new_output_ref() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// `<session_dir>/outputs/<output_ref>`. The caller has checked the form of `output_ref`.
fn output_dir(session_dir: &Path, output_ref: &str) -> PathBuf {
    session_dir.join(OUTPUTS_DIR).join(output_ref)
}

fn stream_file_name(stream: OutputStream) -> &'static str {
    match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
    }
}

/// One stream being stored.
struct StoredStream {
    file: File,
    stored: u64,
    total: u64,
}

/// Writes one call's whole output, stream by stream, keeping at most `max_bytes` of each; then
/// [`finish`](Self::finish) makes it durable. Dropped unfinished, it leaves a directory no result names, which goes
/// with the session; [`discard`](Self::discard) removes it at once.
pub struct StoredOutputWriter {
    dir: PathBuf,
    max_bytes: u64,
    streams: BTreeMap<OutputStream, StoredStream>,
}

impl StoredOutputWriter {
    /// Creates `<session_dir>/outputs/<output_ref>/`.
    pub fn create(session_dir: &Path, output_ref: &str, max_bytes: u64) -> std::io::Result<Self> {
        crate::blocking::assert_may_block();
        let dir = output_dir(session_dir, output_ref);
        std::fs::create_dir_all(&dir)?;
        Ok(StoredOutputWriter { dir, max_bytes, streams: BTreeMap::new() })
    }

    /// Appends bytes of `stream`; those past the cap are only counted.
    pub fn write(&mut self, stream: OutputStream, data: &[u8]) -> std::io::Result<()> {
        crate::blocking::assert_may_block();
        let stored = match self.streams.entry(stream) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                let file = File::create_new(self.dir.join(stream_file_name(stream)))?;
                entry.insert(StoredStream { file, stored: 0, total: 0 })
            }
        };
        stored.total += data.len() as u64;
        let room = self.max_bytes.saturating_sub(stored.stored);
        let kept = &data[..data.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        if !kept.is_empty() {
            stored.file.write_all(kept)?;
            stored.stored += kept.len() as u64;
        }
        Ok(())
    }

    /// Records the totals and syncs every file, the output's directory and the directories above it, so the output
    /// survives a crash once this returns.
    pub fn finish(self) -> std::io::Result<()> {
        crate::blocking::assert_may_block();
        let totals: BTreeMap<&str, u64> =
            self.streams.iter().map(|(stream, stored)| (stream_file_name(*stream), stored.total)).collect();
        let json = serde_json::to_vec(&totals).map_err(std::io::Error::other)?;
        let mut totals_file = File::create(self.dir.join(TOTALS_FILE))?;
        totals_file.write_all(&json)?;
        totals_file.sync_all()?;
        for stored in self.streams.values() {
            stored.file.sync_all()?;
        }
        File::open(&self.dir)?.sync_all()?;
        // `outputs/` may have been created for this output, and `outputs/<ref>` is new in it.
        if let Some(outputs) = self.dir.parent() {
            File::open(outputs)?.sync_all()?;
            if let Some(session_dir) = outputs.parent() {
                File::open(session_dir)?.sync_all()?;
            }
        }
        Ok(())
    }

    /// Removes what was written: the call ended without a result that names it.
    pub fn discard(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Gives a fork the stored outputs its copied results name: each finished `outputs/<ref>` of the source is
/// recreated in `to_session_dir` with hard links to the source's files (copies where the file system refuses a
/// link), and synced. Stored outputs never change once finished, so sharing the files is safe, and each session
/// still owns its names: deleting the source leaves the fork's readable. A ref the source no longer has is skipped.
pub fn link_stored_outputs(
    from_session_dir: &Path,
    to_session_dir: &Path,
    output_refs: &[String],
) -> std::io::Result<()> {
    crate::blocking::assert_may_block();
    let mut linked = false;
    for output_ref in output_refs.iter().filter(|output_ref| is_output_ref(output_ref)) {
        let from = output_dir(from_session_dir, output_ref);
        if !from.join(TOTALS_FILE).is_file() {
            continue;
        }
        let to = output_dir(to_session_dir, output_ref);
        std::fs::create_dir_all(&to)?;
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            let target = to.join(entry.file_name());
            match std::fs::hard_link(entry.path(), &target) {
                Ok(()) => {}
                // Linked already (a ref listed twice, a copy run again): copying onto it would truncate the
                // source's own file, which the link shares.
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                // Another file system, or links refused: a copy.
                Err(_) => {
                    std::fs::copy(entry.path(), &target)?;
                    File::open(&target)?.sync_all()?;
                }
            }
        }
        File::open(&to)?.sync_all()?;
        linked = true;
    }
    if linked {
        File::open(to_session_dir.join(OUTPUTS_DIR))?.sync_all()?;
        File::open(to_session_dir)?.sync_all()?;
    }
    Ok(())
}

/// Why a stored output cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StoredOutputError {
    #[error("`output_ref` must be 32 lowercase hexadecimal digits, as a tool result's `output_ref` is")]
    MalformedRef,
    #[error("this session has no stored output with that `output_ref`")]
    NotFound,
    #[error("reading the stored output failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Bytes read from a stored output.
#[derive(Debug, PartialEq, Eq)]
pub struct StoredOutputRead {
    pub data: Vec<u8>,
    /// Bytes of the stream that are stored.
    pub stored_bytes: u64,
    /// Bytes the stream produced.
    pub total_bytes: u64,
}

/// Reads at most `limit` bytes of `stream` from `offset`. A stream that produced nothing reads as empty; an
/// offset past the end reads nothing.
pub fn read_stored_output(
    session_dir: &Path,
    output_ref: &str,
    stream: OutputStream,
    offset: u64,
    limit: u64,
) -> Result<StoredOutputRead, StoredOutputError> {
    crate::blocking::assert_may_block();
    if !is_output_ref(output_ref) {
        return Err(StoredOutputError::MalformedRef);
    }
    let dir = output_dir(session_dir, output_ref);
    // Only a finished output has its totals: one still being written, or left by a crash, is not found.
    let totals = match std::fs::read(dir.join(TOTALS_FILE)) {
        Ok(totals) => totals,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(StoredOutputError::NotFound),
        Err(error) => return Err(error.into()),
    };
    let totals: BTreeMap<String, u64> = serde_json::from_slice(&totals).map_err(std::io::Error::other)?;
    let total_bytes = totals.get(stream_file_name(stream)).copied().unwrap_or(0);
    let mut file = match File::open(dir.join(stream_file_name(stream))) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(StoredOutputRead { data: Vec::new(), stored_bytes: 0, total_bytes });
        }
        Err(error) => return Err(error.into()),
    };
    let stored_bytes = file.metadata()?.len();
    let mut data = Vec::new();
    if offset < stored_bytes {
        file.seek(SeekFrom::Start(offset))?;
        file.take(limit.min(stored_bytes - offset)).read_to_end(&mut data)?;
    }
    Ok(StoredOutputRead { data, stored_bytes, total_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_output_reads_back_in_pieces_with_its_totals() {
        let session = tempfile::tempdir().unwrap();
        let output_ref = new_output_ref();
        assert!(is_output_ref(&output_ref));
        let mut writer = StoredOutputWriter::create(session.path(), &output_ref, 8).unwrap();
        writer.write(OutputStream::Stdout, b"0123").unwrap();
        writer.write(OutputStream::Stdout, b"456789ab").unwrap();
        writer.finish().unwrap();

        let read = |offset, limit| read_stored_output(session.path(), &output_ref, OutputStream::Stdout, offset, limit);
        let first = read(0, 5).unwrap();
        assert_eq!(first, StoredOutputRead { data: b"01234".to_vec(), stored_bytes: 8, total_bytes: 12 });
        assert_eq!(read(5, 100).unwrap().data, b"567");
        assert_eq!(read(8, 100).unwrap().data, b"");
        assert_eq!(read(80, 100).unwrap().data, b"");
        let silent = read_stored_output(session.path(), &output_ref, OutputStream::Stderr, 0, 10).unwrap();
        assert_eq!(silent, StoredOutputRead { data: Vec::new(), stored_bytes: 0, total_bytes: 0 });
    }

    #[test]
    fn a_fork_gets_links_to_the_finished_outputs_it_names() {
        let source = tempfile::tempdir().unwrap();
        let fork = tempfile::tempdir().unwrap();
        let (named, unfinished, other) = (new_output_ref(), new_output_ref(), new_output_ref());
        for output_ref in [&named, &other] {
            let mut writer = StoredOutputWriter::create(source.path(), output_ref, 100).unwrap();
            writer.write(OutputStream::Stderr, b"whole").unwrap();
            writer.finish().unwrap();
        }
        StoredOutputWriter::create(source.path(), &unfinished, 100).unwrap();
        let refs = [named.clone(), unfinished.clone(), "../x".to_owned(), new_output_ref()];
        link_stored_outputs(source.path(), fork.path(), &refs).unwrap();
        std::fs::remove_dir_all(source.path().join(OUTPUTS_DIR)).unwrap();

        let read = read_stored_output(fork.path(), &named, OutputStream::Stderr, 0, 100).unwrap();
        assert_eq!(read.data, b"whole");
        let outputs: Vec<_> =
            std::fs::read_dir(fork.path().join(OUTPUTS_DIR)).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(outputs, [std::ffi::OsString::from(&named)], "only the finished output the fork names");
    }

    #[test]
    fn unknown_unfinished_and_malformed_refs_are_refused() {
        let session = tempfile::tempdir().unwrap();
        let read = |output_ref: &str| read_stored_output(session.path(), output_ref, OutputStream::Stdout, 0, 10);
        assert!(matches!(read(&new_output_ref()), Err(StoredOutputError::NotFound)));
        assert!(matches!(read("../../etc"), Err(StoredOutputError::MalformedRef)));
        assert!(matches!(read(&"A".repeat(32)), Err(StoredOutputError::MalformedRef)));

        let unfinished = new_output_ref();
        let mut writer = StoredOutputWriter::create(session.path(), &unfinished, 8).unwrap();
        writer.write(OutputStream::Stdout, b"x").unwrap();
        assert!(matches!(read(&unfinished), Err(StoredOutputError::NotFound)));
        writer.discard();
        assert!(!session.path().join(OUTPUTS_DIR).join(&unfinished).exists());
    }
}
