//! Which events of a session's log are part of its conversation after reverts.
//!
//! The log is append-only: `session.revert` appends a `session_reverted {through_seq}` marker and hides nothing
//! physically. The *visible* events are what the branch-derived parts of the projection (model history, title,
//! status, approvals, the steering lane, the branch's usage) are built from.
//!
//! A revert to `t` makes the session look exactly as it did right after event `t` was appended, plus the marker:
//! visible after a marker at `m` with target `t` = (visible right after `t`) ∪ {m}; events appended after a marker
//! are visible until the next one. So a revert can target any existing seq, also one a previous revert hid (that
//! brings back the branch it belonged to), and reverts of reverts compose without special cases.
//!
//! [`Visibility`] records, for each marker, the visible set right after it, as sorted disjoint ranges; the set
//! right after any `t` is the set after the last marker at or before `t` plus everything between that marker and
//! `t`. It grows by one small range list per revert, never with the number of events.

use std::ops::RangeInclusive;

use crate::error::RuntimeError;
use crate::event_log::{EventReader, LogEntry};
use crate::session_state::SessionState;

/// Bytes of events read at a time while a branch is rebuilt.
const READ_CHUNK_BYTES: usize = 1024 * 1024;

/// Sorted, disjoint, non-adjacent inclusive ranges of seqs.
pub type SeqRanges = Vec<RangeInclusive<u64>>;

/// The reverts of a session, enough to say which seqs are visible at any point of its history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Visibility {
    /// `(marker seq, visible set right after the marker)`, in log order.
    markers: Vec<(u64, SeqRanges)>,
}

impl Visibility {
    /// Whether the log had any revert: without one, every event is visible.
    pub fn has_reverts(&self) -> bool {
        !self.markers.is_empty()
    }

    /// Records the marker at `marker_seq` reverting to `through_seq`. Markers must come in log order.
    pub fn apply_revert(&mut self, marker_seq: u64, through_seq: u64) {
        let mut visible = self.visible_after(through_seq.min(marker_seq.saturating_sub(1)));
        push_range(&mut visible, marker_seq..=marker_seq);
        self.markers.push((marker_seq, visible));
    }

    /// The visible seqs as they were right after `seq` was appended (`seq` itself included).
    pub fn visible_after(&self, seq: u64) -> SeqRanges {
        let last_marker = self.markers.iter().rev().find(|(marker, _)| *marker <= seq);
        let (mut visible, from) = match last_marker {
            Some((marker, visible)) => (visible.clone(), marker + 1),
            None => (Vec::new(), 1),
        };
        if from <= seq {
            push_range(&mut visible, from..=seq);
        }
        visible
    }

    /// Whether `seq` is visible now, given that the log's last event is `last_seq`.
    pub fn is_visible(&self, seq: u64, last_seq: u64) -> bool {
        self.visible_after(last_seq).iter().any(|range| range.contains(&seq))
    }
}

/// Calls `visit` with each durable event whose seq is in `ranges`, in order, reading a bounded chunk at a time.
pub fn read_ranges(
    reader: &dyn EventReader,
    ranges: &SeqRanges,
    mut visit: impl FnMut(LogEntry) -> Result<(), RuntimeError>,
) -> Result<(), RuntimeError> {
    for range in ranges {
        let mut after = range.start().saturating_sub(1);
        while after < *range.end() {
            let chunk = reader.read_range(after, *range.end(), READ_CHUNK_BYTES)?;
            let Some(last) = chunk.last() else { break };
            after = last.seq;
            for entry in chunk {
                visit(entry)?;
            }
        }
    }
    Ok(())
}

/// The projection of just the events in `ranges`, whose branch-derived parts
/// ([`SessionState::adopt_branch`]) are what a session with those visible events shows.
pub fn project_ranges(
    reader: &dyn EventReader,
    ranges: &SeqRanges,
    session_id: &str,
    fallback_time: &str,
) -> Result<SessionState, RuntimeError> {
    let mut projector = SessionState::projector();
    read_ranges(reader, ranges, |entry| {
        // A line that does not decode was reported by the loader; it is passed over here as there.
        if let Ok(event) = entry.json.decode() {
            projector.apply(&event);
        }
        Ok(())
    })?;
    Ok(projector.finish(session_id, Vec::new(), fallback_time))
}

/// After a log was loaded by applying every event, rebuilds the branch-derived parts from the visible events
/// when the log has reverts (a second, bounded-memory pass over the visible ranges only).
pub fn settle_loaded(state: &mut SessionState, reader: &dyn EventReader) -> Result<(), RuntimeError> {
    if !state.visibility.has_reverts() {
        return Ok(());
    }
    let ranges = state.visibility.visible_after(state.last_event_seq);
    let branch = project_ranges(reader, &ranges, &state.session_id.clone(), &state.created_at.clone())?;
    state.adopt_branch(branch);
    Ok(())
}

/// Appends `range` (which starts after every range of `ranges`), merging it with the last one when adjacent.
fn push_range(ranges: &mut SeqRanges, range: RangeInclusive<u64>) {
    if let Some(last) = ranges.last_mut()
        && *last.end() + 1 >= *range.start()
    {
        *last = *last.start()..=(*last.end()).max(*range.end());
        return;
    }
    ranges.push(range);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_reverts_everything_is_visible() {
        let visibility = Visibility::default();
        assert!(!visibility.has_reverts());
        assert_eq!(visibility.visible_after(7), vec![1..=7]);
    }

    #[test]
    fn a_revert_hides_what_came_after_its_target_and_later_events_are_visible() {
        let mut visibility = Visibility::default();
        // 1..=10, then a revert to 5 at 11, then 12..=15.
        visibility.apply_revert(11, 5);
        assert_eq!(visibility.visible_after(15), vec![1..=5, 11..=15]);
        assert!(!visibility.is_visible(8, 15));
        assert!(visibility.is_visible(12, 15));
        // Before the marker, the past is as it was.
        assert_eq!(visibility.visible_after(9), vec![1..=9]);
    }

    #[test]
    fn reverts_compose_including_a_revert_into_a_hidden_branch() {
        let mut visibility = Visibility::default();
        visibility.apply_revert(11, 5); // visible: 1..=5, 11
        // 12..=15 appended; revert to 13 at 16: 1..=5, 11..=13, 16.
        visibility.apply_revert(16, 13);
        assert_eq!(visibility.visible_after(16), vec![1..=5, 11..=13, 16..=16]);
        // 17 appended; revert to 8 (hidden by the first revert) at 18: the branch 8 belonged to comes back.
        visibility.apply_revert(18, 8);
        assert_eq!(visibility.visible_after(20), vec![1..=8, 18..=20]);
        // A revert to a marker keeps the marker's view.
        visibility.apply_revert(21, 16);
        assert_eq!(visibility.visible_after(21), vec![1..=5, 11..=13, 16..=16, 21..=21]);
    }

    #[test]
    fn a_revert_to_the_last_event_hides_nothing() {
        let mut visibility = Visibility::default();
        visibility.apply_revert(6, 5);
        assert_eq!(visibility.visible_after(6), vec![1..=6]);
    }
}
