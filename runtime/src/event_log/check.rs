//! The per-line rules of the loader: which lines of a log are events of this session, in order.
//!
//! Each complete line is checked on its own. A bad line (not JSON, not an event, a sequence that does not
//! increase, or that jumps further than the lines since the last good event allow, since the writer numbers events
//! one by one; another session's event) is skipped and reported as a [`SkippedEvent`] with its `seq` when readable,
//! else its line number, and a reason that never quotes the line: lines hold user text and tool output, and
//! reasons travel to clients.
//!
//! An event that is whole except for one damaged *optional* field (a `run_failed` whose `model_error` is not a
//! model error summary) is not skipped: it loads with that field `null`, and the repair is reported as a
//! [`LoadDiagnostic`]. Only fields that may be `null` are repaired, so a repaired event is one the engine could
//! have written.

use serde_json::error::Category;
use troupe_protocol::types::common::SkippedEvent;
use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent};

/// The `reason` of the skipped-event entry that reports a torn final line. The engine drops that entry once the
/// writer has cut the tail off.
pub const TORN_REASON: &str = "torn final line (no newline; will be truncated before the next append)";

/// An event that loaded after a repair: one optional field was damaged and is loaded as `null`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadDiagnostic {
    pub seq: u64,
    /// What was repaired; never quotes the damaged value.
    pub detail: String,
}

/// An accepted line. Its text is the event as served, unless `repaired` holds the text to serve instead.
pub(super) struct Accepted {
    pub(super) event: StoredEvent,
    /// Set when an optional field was repaired: the stored line is not what the event is served as.
    pub(super) repaired: Option<EventJson>,
}

/// The per-line rules, with the state they need: the session id and the last accepted sequence.
pub(super) struct LineChecker<'a> {
    session_id: &'a str,
    pub(super) skipped: Vec<SkippedEvent>,
    pub(super) diagnostics: Vec<LoadDiagnostic>,
    pub(super) last_seq: u64,
    /// The line number of the last accepted event (0 before the first).
    last_line: u64,
    accepted_any: bool,
}

impl<'a> LineChecker<'a> {
    pub(super) fn new(session_id: &'a str) -> Self {
        LineChecker {
            session_id,
            skipped: Vec::new(),
            diagnostics: Vec::new(),
            last_seq: 0,
            last_line: 0,
            accepted_any: false,
        }
    }

    /// Accepts or skips one complete, non-blank line.
    pub(super) fn check_line(&mut self, line: &str, line_number: u64) -> Option<Accepted> {
        // The common case parses once, straight into the typed event; only a failing line is parsed again, as a
        // plain value, to find its sequence for the report or to repair an optional field.
        let (event, repaired) = match serde_json::from_str::<StoredEvent>(line) {
            Ok(event) => (event, None),
            Err(error) => match error.classify() {
                Category::Data => match repair_optional_field(line) {
                    Some((event, field)) => (event, Some(field)),
                    None => {
                        // Data errors can quote the offending value, so their message is never used.
                        let reason = "not a valid event: missing or wrong field".to_owned();
                        self.skip(read_seq(line), line_number, reason);
                        return None;
                    }
                },
                Category::Syntax => {
                    self.skip(None, line_number, format!("invalid JSON (syntax error at column {})", error.column()));
                    return None;
                }
                Category::Eof | Category::Io => {
                    self.skip(None, line_number, format!("invalid JSON (ends early at column {})", error.column()));
                    return None;
                }
            },
        };
        let seq = event.seq;
        if event.session_id != self.session_id {
            self.skip(Some(seq), line_number, "session_id does not match the session directory".to_owned());
            return None;
        }
        let is_creation = matches!(event.payload, EventPayload::SessionCreated { .. });
        if is_creation {
            if self.accepted_any || seq != 1 || event.run_id.is_some() {
                let reason = "session_created is only valid as the first event, with sequence 1 and no run";
                self.skip(Some(seq), line_number, reason.to_owned());
                return None;
            }
        } else if !self.accepted_any && self.skipped.is_empty() {
            // The first line must be the creation. When it is damaged, later intact lines still load (the session
            // stays listed and readable, its creation unknown), numbered as if it were there.
            self.skip(
                Some(seq),
                line_number,
                "expected session_created with sequence 1 and no run as the first event".to_owned(),
            );
            return None;
        }
        if self.accepted_any && seq <= self.last_seq {
            self.skip(Some(seq), line_number, format!("sequence {seq} does not increase (previous {})", self.last_seq));
            return None;
        }
        if seq == 0 || seq > self.last_seq + (line_number - self.last_line) {
            // The writer numbers events one by one, so a line can be at most one higher than the line before it.
            // A larger jump is a damaged sequence: skipping it (not the intact lines after it) keeps the log going
            // and appends continuing from the last good sequence.
            let most = self.last_seq + (line_number - self.last_line);
            self.skip(
                Some(seq),
                line_number,
                format!("sequence {seq} is out of place (at most {most} can follow {})", self.last_seq),
            );
            return None;
        }
        // A line that parsed as an event is exactly one JSON value (the parser refuses trailing text), so it is
        // served as it is; only a repaired event is encoded again.
        let repaired = match repaired {
            None => None,
            Some(field) => {
                let Ok(json) = EventJson::encode(&event) else {
                    self.skip(Some(seq), line_number, "not a valid event: missing or wrong field".to_owned());
                    return None;
                };
                self.diagnostics.push(LoadDiagnostic {
                    seq,
                    detail: format!("the optional field `{field}` was damaged and is loaded as null"),
                });
                Some(json)
            }
        };
        self.last_seq = seq;
        self.last_line = line_number;
        self.accepted_any = true;
        Some(Accepted { event, repaired })
    }

    /// Records a skipped line: by sequence when one was read, else by line number (exactly one of the two).
    pub(super) fn skip(&mut self, seq: Option<u64>, line_number: u64, reason: String) {
        self.skipped.push(SkippedEvent { line: if seq.is_some() { None } else { Some(line_number) }, seq, reason });
    }

    /// The report of a log in which nothing at all was found, not even a damaged line: it lost its
    /// `session_created`. Reported so the caller sees why the session has no metadata.
    pub(super) fn report_if_empty(&mut self) {
        if !self.accepted_any && self.skipped.is_empty() {
            self.skipped.push(SkippedEvent {
                seq: Some(1),
                line: None,
                reason: "the log is empty: session_created (sequence 1) is missing".to_owned(),
            });
        }
    }
}

/// Loads an event whose only fault is one damaged optional field of its payload, with that field `null`.
/// Returns the event and the field's name.
fn repair_optional_field(line: &str) -> Option<(StoredEvent, String)> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let payload = value.get("payload")?.as_object()?;
    for (field, field_value) in payload {
        if field == "type" || field_value.is_null() {
            continue;
        }
        let mut candidate = value.clone();
        candidate["payload"][field.as_str()] = serde_json::Value::Null;
        if let Ok(event) = serde_json::from_value::<StoredEvent>(candidate) {
            // A field that accepts null is optional; anything else would not have parsed.
            return Some((event, field.clone()));
        }
    }
    None
}

/// The `seq` of a line that is JSON but not a valid event, if it has a usable one.
pub(super) fn read_seq(line: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value.get("seq")?.as_u64()
}
