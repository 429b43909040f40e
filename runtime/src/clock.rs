//! Timestamps and identifiers for events, sessions and runs.
//!
//! They live in one place so that every record is stamped the same way: RFC 3339 UTC with millisecond precision,
//! and UUIDv7 identifiers, whose leading timestamp makes them sort by creation time (which keeps directory
//! listings and logs in a useful order without an extra index).

use std::time::SystemTime;

use uuid::Uuid;

/// The current UTC time as RFC 3339 with millisecond precision and a `Z` suffix, e.g.
/// `2026-01-01T12:00:00.123Z`.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The UTC time `age` ago, in the same form as [`now_rfc3339`] (so the two compare as strings).
pub fn rfc3339_ago(age: std::time::Duration) -> String {
    let then = SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
    humantime::format_rfc3339_millis(then).to_string()
}

/// A new UUIDv7 identifier in its hyphenated lowercase form.
pub fn new_id() -> String {
    Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        let stamp = now_rfc3339();
        assert_eq!(stamp.len(), "2026-01-01T12:00:00.123Z".len(), "{stamp}");
        assert!(stamp.ends_with('Z'));
        assert_eq!(&stamp[10..11], "T");
        assert_eq!(&stamp[19..20], ".");
        humantime::parse_rfc3339(&stamp).unwrap();
    }

    #[test]
    fn ids_are_uuid_v7_and_increase() {
        let first = new_id();
        let second = new_id();
        let parsed = Uuid::parse_str(&first).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(first.len(), 36);
        assert!(first < second, "UUIDv7 ids created in order sort in order");
    }
}
