//! The per-line rules of the loader: which lines of a log are events of this session, in order.
//!
//! Each complete line is checked on its own. A bad line (not JSON, not an event, a sequence that does not
//! increase, or that jumps further than the lines since the last good event allow, since the writer numbers events
//! one by one; another session's event) is skipped and reported as a [`SkippedEvent`] with its `seq` when readable,
//! else its line number, and a reason that never quotes the line: lines hold user text and tool output, and
//! reasons travel to clients. Sequences that no line stands for (lines deleted from the middle of the log) are
//! reported too, by the first missing sequence.
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
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadDiagnostic {
    pub seq: u64,
    /// What was repaired; never quotes the damaged value.
    pub detail: String,
}

/// An accepted line. Its text is the event as served, unless `repaired` holds the text to serve instead.
pub(super) struct Accepted {
    /// Boxed: an event is several hundred bytes, and an accepted line moves through the checker and the loader's
    /// queue by value; each move would copy it whole.
    pub(super) event: Box<StoredEvent>,
    /// Set when an optional field was repaired: the stored line is not what the event is served as.
    pub(super) repaired: Option<EventJson>,
    /// Where the line starts in the file.
    pub(super) offset: u64,
    /// The line's text, kept when it waited for the next line (by then the reader has moved on).
    pub(super) kept_text: Option<String>,
}

/// A line whose sequence jumps ahead of the last accepted one, waiting for the next event line to tell a lost line
/// (the next line continues it) from a damaged sequence (it does not).
struct Doubtful {
    accepted: Accepted,
    line_number: u64,
    /// The highest sequence its position allows if lines around it were only damaged in place.
    most: u64,
}

/// How far a last line may jump beyond what its position allows and still be taken as real (lines lost before
/// it) rather than a damaged sequence: nothing follows it to tell.
const LAST_LINE_SLACK: u64 = 16;

/// The per-line rules, with the state they need: the session id, the last accepted sequence, and a line that
/// waits for its neighbour.
pub(super) struct LineChecker<'a> {
    session_id: &'a str,
    pub(super) skipped: Vec<SkippedEvent>,
    pub(super) diagnostics: Vec<LoadDiagnostic>,
    pub(super) last_seq: u64,
    /// Offsets of the complete lines that were not accepted (in any order).
    pub(super) excluded: Vec<u64>,
    /// The line number of the last accepted event (0 before the first).
    pub(super) last_line: u64,
    accepted_any: bool,
    doubtful: Option<Doubtful>,
}

impl<'a> LineChecker<'a> {
    pub(super) fn new(session_id: &'a str) -> Self {
        LineChecker {
            session_id,
            skipped: Vec::new(),
            diagnostics: Vec::new(),
            last_seq: 0,
            excluded: Vec::new(),
            last_line: 0,
            accepted_any: false,
            doubtful: None,
        }
    }

    /// A checker that goes on after a snapshot's lines: the last accepted event was `last_seq` on line
    /// `last_line`, with what was skipped and repaired before. (No line waits for its neighbour: the end of a
    /// scan settles a waiting line, and a live log's lines were all accepted.)
    pub(super) fn resumed(
        session_id: &'a str,
        last_seq: u64,
        last_line: u64,
        skipped: Vec<SkippedEvent>,
        diagnostics: Vec<LoadDiagnostic>,
    ) -> Self {
        LineChecker {
            session_id,
            skipped,
            diagnostics,
            last_seq,
            excluded: Vec::new(),
            last_line,
            accepted_any: true,
            doubtful: None,
        }
    }

    /// Checks one complete, non-blank line at `offset`; what it (and a line that waited for it) made acceptable
    /// is pushed to `out`, in order.
    pub(super) fn check_line(&mut self, line: &str, line_number: u64, offset: u64, out: &mut Vec<Accepted>) {
        // The common case parses once, straight into the typed event; only a failing line is parsed again, as a
        // plain value, to find its sequence for the report or to repair an optional field.
        let (event, repaired) = match serde_json::from_str::<Box<StoredEvent>>(line) {
            Ok(event) => (event, None),
            Err(error) => match error.classify() {
                Category::Data => match repair_optional_field(line) {
                    Some((event, field)) => (Box::new(event), Some(field)),
                    None => {
                        // Data errors can quote the offending value, so their message is never used.
                        let reason = "not a valid event: missing or wrong field".to_owned();
                        self.skip(read_seq(line), line_number, Some(offset), reason);
                        return;
                    }
                },
                Category::Syntax => {
                    let reason = format!("invalid JSON (syntax error at column {})", error.column());
                    self.skip(None, line_number, Some(offset), reason);
                    return;
                }
                Category::Eof | Category::Io => {
                    let reason = format!("invalid JSON (ends early at column {})", error.column());
                    self.skip(None, line_number, Some(offset), reason);
                    return;
                }
            },
        };
        let seq = event.seq;
        if event.session_id != self.session_id {
            self.skip(
                Some(seq),
                line_number,
                Some(offset),
                "session_id does not match the session directory".to_owned(),
            );
            return;
        }
        let is_creation = matches!(event.payload, EventPayload::SessionCreated { .. });
        if is_creation {
            if self.accepted_any || self.doubtful.is_some() || seq != 1 || event.run_id.is_some() {
                let reason = "session_created is only valid as the first event, with sequence 1 and no run";
                self.skip(Some(seq), line_number, Some(offset), reason.to_owned());
                return;
            }
        } else if !self.accepted_any && self.doubtful.is_none() && self.skipped.is_empty() {
            // The first line must be the creation. When it is damaged, later intact lines still load (the session
            // stays listed and readable, its creation unknown), numbered as if it were there.
            self.skip(
                Some(seq),
                line_number,
                Some(offset),
                "expected session_created with sequence 1 and no run as the first event".to_owned(),
            );
            return;
        }
        let repaired = match repaired {
            None => None,
            Some(field) => {
                let Ok(json) = EventJson::encode(&event) else {
                    let reason = "not a valid event: missing or wrong field".to_owned();
                    self.skip(Some(seq), line_number, Some(offset), reason);
                    return;
                };
                Some((json, field))
            }
        };
        let candidate = Candidate { event, repaired, offset };

        // A line waiting for this one is settled first: a line continuing it shows that lines were lost before it
        // (accepted), anything else that it was a damaged sequence (skipped).
        if let Some(doubtful) = self.doubtful.take() {
            if seq == doubtful.accepted.event.seq + 1 {
                let waited = doubtful.accepted.event.seq;
                self.accept(doubtful.accepted, doubtful.line_number, out);
                debug_assert_eq!(self.last_seq, waited);
                let accepted = candidate.into_accepted(&mut self.diagnostics);
                self.accept(accepted, line_number, out);
                return;
            }
            self.reject_doubtful(doubtful);
        }
        if self.accepted_any && seq <= self.last_seq {
            let reason = format!("sequence {seq} does not increase (previous {})", self.last_seq);
            self.skip(Some(seq), line_number, Some(offset), reason);
            return;
        }
        if seq == 0 {
            self.skip(Some(seq), line_number, Some(offset), "sequence 0 is not a valid sequence".to_owned());
            return;
        }
        let accepted = candidate.into_accepted(&mut self.diagnostics);
        if seq == self.last_seq + 1 {
            self.accept(accepted, line_number, out);
        } else {
            // The writer numbers events one by one: a jump is either lines lost before this one or a damaged
            // sequence. The next event line tells.
            let most = self.last_seq + (line_number - self.last_line);
            let accepted = Accepted { kept_text: Some(line.to_owned()), ..accepted };
            self.doubtful = Some(Doubtful { accepted, line_number, most });
        }
    }

    /// The end of the log: a last line that still waits is taken when its jump is small (lines lost before it;
    /// nothing follows to tell), else skipped as a damaged sequence, so appends continue from the last good one.
    pub(super) fn finish(&mut self, out: &mut Vec<Accepted>) {
        if let Some(doubtful) = self.doubtful.take() {
            if doubtful.accepted.event.seq <= doubtful.most + LAST_LINE_SLACK {
                let line_number = doubtful.line_number;
                self.accept(doubtful.accepted, line_number, out);
            } else {
                self.reject_doubtful(doubtful);
            }
        }
        if !self.accepted_any && self.skipped.is_empty() {
            // Nothing at all, not even a damaged line: the log lost its `session_created`. Report it, so the
            // caller sees why the session has no metadata.
            self.skipped.push(SkippedEvent {
                seq: Some(1),
                line: None,
                reason: "the log is empty: session_created (sequence 1) is missing".to_owned(),
            });
        }
    }

    fn accept(&mut self, accepted: Accepted, line_number: u64, out: &mut Vec<Accepted>) {
        if self.accepted_any {
            self.report_lost_lines(accepted.event.seq, line_number);
        }
        self.last_seq = accepted.event.seq;
        self.last_line = line_number;
        self.accepted_any = true;
        out.push(accepted);
    }

    /// Reports the sequences between the last accepted event and `seq` (accepted on `line_number`) that no line
    /// of the log stands for: lines deleted or lost, not damaged in place (a damaged line between them is reported
    /// by itself and stands for one of the sequences). Without this, a client would see `seq` follow an earlier
    /// one with nothing said about what came between.
    fn report_lost_lines(&mut self, seq: u64, line_number: u64) {
        let first = self.last_seq + 1;
        let missing = seq.saturating_sub(first);
        let damaged_between = line_number.saturating_sub(self.last_line + 1);
        let lost = missing.saturating_sub(damaged_between);
        if lost == 0 {
            return;
        }
        let last = seq - 1;
        let reason = match (lost == missing, first == last) {
            (true, true) => format!("missing: no line of the log holds sequence {first}"),
            (true, false) => format!("missing: no line of the log holds sequences {first} to {last}"),
            (false, _) => format!("missing: {lost} of the sequences {first} to {last} have no line in the log"),
        };
        self.skipped.push(SkippedEvent { seq: Some(first), line: None, reason });
    }

    fn reject_doubtful(&mut self, doubtful: Doubtful) {
        let seq = doubtful.accepted.event.seq;
        if let Some(repair) = self.diagnostics.iter().position(|diagnostic| diagnostic.seq == seq) {
            self.diagnostics.remove(repair);
        }
        let reason = format!("sequence {seq} is out of place (at most {} can follow {})", doubtful.most, self.last_seq);
        self.skip(Some(seq), doubtful.line_number, Some(doubtful.accepted.offset), reason);
    }

    /// Records a skipped line: by sequence when one was read, else by line number (exactly one of the two). A
    /// complete line's offset is excluded from replays.
    pub(super) fn skip(&mut self, seq: Option<u64>, line_number: u64, offset: Option<u64>, reason: String) {
        if let Some(offset) = offset {
            self.excluded.push(offset);
        }
        self.skipped.push(SkippedEvent { line: if seq.is_some() { None } else { Some(line_number) }, seq, reason });
    }
}

/// A line that passed the identity checks, before the sequence rules.
struct Candidate {
    event: Box<StoredEvent>,
    /// The repaired text and the name of the repaired field.
    repaired: Option<(EventJson, String)>,
    offset: u64,
}

impl Candidate {
    fn into_accepted(self, diagnostics: &mut Vec<LoadDiagnostic>) -> Accepted {
        let repaired = self.repaired.map(|(json, field)| {
            diagnostics.push(LoadDiagnostic {
                seq: self.event.seq,
                detail: format!("the optional field `{field}` was damaged and is loaded as null"),
            });
            json
        });
        Accepted { event: self.event, repaired, offset: self.offset, kept_text: None }
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
