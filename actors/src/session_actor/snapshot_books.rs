//! The session's books of its projection snapshots (`snapshots.rs` decides when one is taken): the log length the
//! newest one covers, written or being written, and whether a live one is being written (one at a time).

#[derive(Default)]
pub(super) struct SnapshotBooks {
    /// The log length the newest snapshot covers.
    covered_len: u64,
    /// Whether a live snapshot is being written.
    writing: bool,
}

impl SnapshotBooks {
    /// Whether the log, `log_len` bytes long, has grown by at least `bytes` since the newest snapshot.
    pub(super) fn grown_by(&self, log_len: u64, bytes: u64) -> bool {
        log_len.saturating_sub(self.covered_len) >= bytes
    }

    /// A snapshot covering the log's first `covered_len` bytes was taken (at a load, live or at the stop).
    pub(super) fn covered(&mut self, covered_len: u64) {
        self.covered_len = covered_len;
    }

    pub(super) fn is_writing(&self) -> bool {
        self.writing
    }

    /// A live snapshot is being written; the next waits until [`written`](Self::written).
    pub(super) fn writing_started(&mut self) {
        self.writing = true;
    }

    pub(super) fn written(&mut self) {
        self.writing = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_counts_from_the_newest_snapshot() {
        let mut books = SnapshotBooks::default();
        assert!(books.grown_by(100, 100));
        assert!(!books.grown_by(99, 100));
        books.covered(1_000);
        assert!(!books.grown_by(1_099, 100));
        assert!(books.grown_by(1_100, 100));
        assert!(!books.grown_by(10, 1), "a log shorter than the snapshot (a fresh log) has not grown");
    }

    #[test]
    fn one_live_write_at_a_time() {
        let mut books = SnapshotBooks::default();
        assert!(!books.is_writing());
        books.writing_started();
        assert!(books.is_writing());
        books.written();
        assert!(!books.is_writing());
    }
}
