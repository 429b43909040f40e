//! Runs of known bytes of one tool-output stream: a session's retained window of a call's output
//! (`session_actor/named_output.rs`), and for a remote named subscription (`engine/remote_named_output.rs`) what
//! was heard live, kept as the newest run of consecutive bytes, and the runs known from every source joined in
//! offset order, so that what is sent never claims bytes nobody saw.

use troupe_protocol::types::tool_output::TOOL_OUTPUT_RETAINED_BYTES;

/// A run of consecutive bytes of one stream: `[start, start + bytes.len())`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ByteRun {
    pub(crate) start: u64,
    pub(crate) bytes: Vec<u8>,
}

impl ByteRun {
    pub(crate) fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// The part at or after `from`, with its offset; `None` when nothing is.
    pub(crate) fn from(&self, from: u64) -> Option<(u64, &[u8])> {
        let start = from.max(self.start);
        let skip = usize::try_from(start - self.start).ok()?;
        let rest = self.bytes.get(skip..).filter(|rest| !rest.is_empty())?;
        Some((start, rest))
    }

    /// Adds a chunk heard live: the run keeps the newest consecutive bytes, at most the last 64 KiB.
    pub(crate) fn hear(&mut self, offset: u64, data: &[u8]) {
        if self.bytes.is_empty() || self.end() != offset {
            // A hole (or bytes heard again): what is kept no longer runs on into this chunk.
            *self = ByteRun { start: offset, bytes: Vec::new() };
        }
        self.bytes.extend_from_slice(data);
        let excess = self.bytes.len().saturating_sub(TOOL_OUTPUT_RETAINED_BYTES);
        self.bytes.drain(..excess);
        self.start = offset + data.len() as u64 - self.bytes.len() as u64;
    }
}

/// The runs of known bytes at or after `from`, in offset order, overlapping or touching ones joined.
pub(crate) fn merge(mut runs: Vec<ByteRun>, from: u64) -> Vec<ByteRun> {
    runs.sort_by_key(|run| run.start);
    let mut merged: Vec<ByteRun> = Vec::new();
    for run in runs {
        let start = run.start.max(from);
        let Some(bytes) = usize::try_from(start - run.start).ok().and_then(|skip| run.bytes.get(skip..)) else {
            continue;
        };
        if bytes.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some(last) if last.end() >= start => {
                // Both hold the stream's bytes where they overlap: only what runs past the end is new.
                let Ok(overlap) = usize::try_from(last.end() - start) else { continue };
                if let Some(new) = bytes.get(overlap..) {
                    last.bytes.extend_from_slice(new);
                }
            }
            _ => merged.push(ByteRun { start, bytes: bytes.to_vec() }),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: u64, text: &str) -> ByteRun {
        ByteRun { start, bytes: text.as_bytes().to_vec() }
    }

    #[test]
    fn the_part_from_an_offset_starts_at_the_run_or_the_offset() {
        let window = run(10, "abcdef");
        assert_eq!(window.from(0), Some((10, &b"abcdef"[..])));
        assert_eq!(window.from(12), Some((12, &b"cdef"[..])));
        assert_eq!(window.from(16), None);
        assert_eq!(window.from(100), None);
        assert_eq!(window.end(), 16);
    }

    #[test]
    fn runs_are_clipped_at_the_offset_and_joined_where_they_touch_or_overlap() {
        let runs = vec![run(6, "ghij"), run(0, "abcd"), run(3, "def"), run(20, "uv"), run(12, "")];
        assert_eq!(merge(runs, 1), [run(1, "bcdefghij"), run(20, "uv")]);
        assert_eq!(merge(vec![run(0, "abc")], 3), []);
    }

    #[test]
    fn a_heard_run_keeps_the_newest_consecutive_bytes() {
        let mut heard = ByteRun::default();
        heard.hear(4, b"ef");
        heard.hear(6, b"gh");
        assert_eq!(heard, run(4, "efgh"));
        heard.hear(10, b"kl");
        assert_eq!(heard, run(10, "kl"), "after a hole");
        let big = vec![b'x'; TOOL_OUTPUT_RETAINED_BYTES + 3];
        heard.hear(12, &big);
        assert_eq!((heard.start, heard.bytes.len()), (15, TOOL_OUTPUT_RETAINED_BYTES));
    }
}
