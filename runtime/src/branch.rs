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
//! [`Visibility`] keeps only the markers and their targets; the visible set at any point is computed from them
//! in time proportional to its number of ranges.

use std::ops::RangeInclusive;

use crate::error::RuntimeError;
use crate::event_log::{EventReader, LogEntry};
use crate::session_state::SessionState;

/// Bytes of events read at a time while a branch is rebuilt.
const READ_CHUNK_BYTES: usize = 1024 * 1024;

/// Sorted, disjoint, non-adjacent inclusive ranges of seqs.
pub type SeqRanges = Vec<RangeInclusive<u64>>;

/// The reverts of a session, enough to say which seqs are visible at any point of its history.
///
/// Only the markers are kept, `(marker seq, target)`: 16 bytes a revert. The visible set right after `seq` is
/// `[m, seq] ∪ visible_after(t)` where `m` is the last marker at or before `seq` and `t` its target (the marker
/// brought back the view right after `t`, and everything from the marker on is visible), down to `[1, seq]` when no
/// marker precedes `seq`. Each step of that walk adds a range of the answer, so computing it costs the size of the
/// answer (times a binary search), not the number of reverts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Visibility {
    /// `(marker seq, through_seq)`, in log order.
    markers: Vec<(u64, u64)>,
}

impl Visibility {
    /// Whether the log had any revert: without one, every event is visible.
    pub fn has_reverts(&self) -> bool {
        !self.markers.is_empty()
    }

    /// Records the marker at `marker_seq` reverting to `through_seq`. Markers must come in log order.
    pub fn apply_revert(&mut self, marker_seq: u64, through_seq: u64) {
        self.markers.push((marker_seq, through_seq.min(marker_seq.saturating_sub(1))));
    }

    /// The visible seqs as they were right after `seq` was appended (`seq` itself included).
    pub fn visible_after(&self, seq: u64) -> SeqRanges {
        // Built newest range first, then reversed.
        let mut descending: SeqRanges = Vec::new();
        let mut end = seq;
        // Markers at or before `end` are `markers[..bound]`.
        let mut bound = self.markers.partition_point(|(marker, _)| *marker <= end);
        while end >= 1 {
            let Some(&(marker, target)) = bound.checked_sub(1).and_then(|index| self.markers.get(index)) else {
                push_range_before(&mut descending, 1..=end);
                break;
            };
            push_range_before(&mut descending, marker..=end);
            end = target;
            // Targets are earlier than their markers, so the next marker is among the earlier ones.
            bound = self.markers[..bound - 1].partition_point(|(marker, _)| *marker <= end);
        }
        descending.reverse();
        descending
    }

    /// Whether `seq` is visible now, given that the log's last event is `last_seq`.
    pub fn is_visible(&self, seq: u64, last_seq: u64) -> bool {
        self.visible_after(last_seq).iter().any(|range| range.contains(&seq))
    }
}

/// Adds `range` (which ends before every range of `descending`, a list in descending order), merging adjacent
/// ranges.
fn push_range_before(descending: &mut SeqRanges, range: RangeInclusive<u64>) {
    if let Some(last) = descending.last_mut()
        && *range.end() + 1 >= *last.start()
    {
        *last = (*range.start()).min(*last.start())..=*last.end();
        return;
    }
    descending.push(range);
}

/// Hidden events read through (and skipped) rather than starting a new read, when ranges are this close: a log
/// with many reverts has many small ranges, and each read starts by opening and seeking the file.
const READ_THROUGH_GAP: u64 = 512;

/// Calls `visit` with each durable event whose seq is in `ranges`, in order, reading a bounded chunk at a time.
pub fn read_ranges(
    reader: &dyn EventReader,
    ranges: &SeqRanges,
    mut visit: impl FnMut(LogEntry) -> Result<(), RuntimeError>,
) -> Result<(), RuntimeError> {
    let mut index = 0;
    while index < ranges.len() {
        // A group of ranges close enough to read as one span.
        let first = index;
        while index + 1 < ranges.len() && *ranges[index + 1].start() <= ranges[index].end() + READ_THROUGH_GAP {
            index += 1;
        }
        let group = &ranges[first..=index];
        index += 1;
        let (mut after, through) = (group[0].start().saturating_sub(1), *group[group.len() - 1].end());
        let mut current = 0;
        while after < through {
            let chunk = reader.read_range(after, through, READ_CHUNK_BYTES)?;
            let Some(last) = chunk.last() else { break };
            after = last.seq;
            for entry in chunk {
                while current < group.len() && *group[current].end() < entry.seq {
                    current += 1;
                }
                if group.get(current).is_some_and(|range| range.contains(&entry.seq)) {
                    visit(entry)?;
                }
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
