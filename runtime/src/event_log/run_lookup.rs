//! Which session started a run, read from the logs: `run.cancel`, `run.steer` and `run.recall_steer` about a run
//! the daemon's in-memory registry no longer holds (it ended before the daemon started, or long ago) still reach
//! the run's session and get its answer for an ended run, instead of "unknown run".
//!
//! Run ids are UUIDv7 (`clock::new_id`), so an id says when its run started: only sessions that existed then and
//! were active since can hold it, and their logs are searched newest session first. A line is parsed only when it
//! contains the id's text, so a search costs one sequential read of each candidate log.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::time::{Duration, SystemTime};

use troupe_protocol::types::events::{EventPayload, StoredEvent};
use uuid::Uuid;

use crate::error::RuntimeError;

/// How far a session's recorded times may be off the run id's own time (the wall clock may be stepped between
/// the two readings).
const CLOCK_SLACK: Duration = Duration::from_secs(60);

/// The window of wall-clock times, as RFC 3339 strings comparable with the sessions' `created_at` and
/// `last_activity_at`, in which a session must have been alive to have started `run_id`; `None` when `run_id` is
/// not an id this daemon hands out (then no session can hold it).
pub fn run_time_window(run_id: &str) -> Option<(String, String)> {
    let uuid = Uuid::try_parse(run_id).ok()?;
    // Only the canonical hyphenated lowercase form is ever written to a log.
    if uuid.get_version_num() != 7 || uuid.hyphenated().to_string() != run_id {
        return None;
    }
    let (seconds, nanos) = uuid.get_timestamp()?.to_unix();
    let started = SystemTime::UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))?;
    let earliest = started.checked_sub(CLOCK_SLACK).unwrap_or(SystemTime::UNIX_EPOCH);
    let latest = started.checked_add(CLOCK_SLACK)?;
    Some((humantime::format_rfc3339_millis(earliest).to_string(), humantime::format_rfc3339_millis(latest).to_string()))
}

/// Whether the log in `session_dir` holds the `run_started` of `run_id`. A session without a log holds no run.
pub fn log_started_run(session_dir: &Path, run_id: &str) -> Result<bool, RuntimeError> {
    crate::blocking::assert_may_block();
    let path = super::log_path(session_dir);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(RuntimeError::io("open the event log", &path, error)),
    };
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let needle = run_id.as_bytes();
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).map_err(|error| RuntimeError::io("read", &path, error))?;
        if read == 0 {
            return Ok(false);
        }
        // A torn final line was never acknowledged: it does not count, as on load.
        if line.last() != Some(&b'\n') || !line.windows(needle.len()).any(|window| window == needle) {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<StoredEvent>(&line) else { continue };
        if event.run_id.as_deref() == Some(run_id) && matches!(event.payload, EventPayload::RunStarted { .. }) {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_v7_ids_have_a_window_around_their_own_time() {
        let id = crate::clock::new_id();
        let (earliest, latest) = run_time_window(&id).expect("a fresh run id");
        let now = crate::clock::now_rfc3339();
        assert!(earliest < now && now < latest, "{earliest} < {now} < {latest}");
        assert_eq!(run_time_window(&id.to_uppercase()), None, "never written in that form");
        assert_eq!(run_time_window("not-a-run"), None);
        assert_eq!(run_time_window("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), None, "a v1 id");
    }

    #[test]
    fn a_log_holds_a_run_only_with_its_complete_run_started_line() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!log_started_run(dir.path(), "r").unwrap(), "no log, no run");
        let run = "0190d3a4-0000-7000-8000-000000000001";
        let started_line = |run_id: &str, input: &str| {
            format!(
                r#"{{"session_id":"s","run_id":"{run_id}","seq":2,"timestamp":"2026-01-01T00:00:00.000Z","payload":{{"type":"run_started","client_run_id":"c","selection":{{"agent":"default","model":{{"model":"local/echo","variant":null}}}},"input":"{input}","fallback_index":0}}}}"#
            )
        };
        let started = started_line(run, "hi");
        let mention = started_line("0190d3a4-0000-7000-8000-000000000002", run);
        std::fs::write(super::super::log_path(dir.path()), format!("{mention}\n{started}")).unwrap();
        assert!(!log_started_run(dir.path(), run).unwrap(), "a mention or a torn line is not a start");
        std::fs::write(super::super::log_path(dir.path()), format!("{mention}\n{started}\n")).unwrap();
        assert!(log_started_run(dir.path(), run).unwrap());
    }
}
