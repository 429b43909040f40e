//! The `request` tracing span each dispatched request runs in, so that every log line emitted while serving it
//! (in the engine's handler, on this task) names the method and the session or run it is about.
//!
//! The values come from the client, so only bounded, id-shaped ones are recorded: the method as the table's own
//! name (`unknown` otherwise), and `session_id`/`run_id` only when they look like ids. A frame of megabytes or
//! a name with terminal escapes never reaches the log.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The longest id recorded (UUIDv7 strings are 36 characters).
const MAX_ID_CHARS: usize = 64;

/// A `request` span: `method` (the request's [`method_label`](super::observer::method_label)), and `session_id`
/// (or `root_session_id`) and `run_id` when the params carry them.
pub(crate) fn request_span(method: &'static str, params: Option<&RawValue>) -> tracing::Span {
    let span =
        tracing::info_span!("request", method, session_id = tracing::field::Empty, run_id = tracing::field::Empty);
    // The params are read for the ids only when the span records anything (no subscriber, or a filter below
    // info, and it records nothing).
    if span.is_disabled() {
        return span;
    }
    let ids = params.and_then(|params| serde_json::from_str::<Ids<'_>>(params.get()).ok()).unwrap_or_default();
    if let Some(session_id) = ids.session_id.and_then(id_shaped).or_else(|| ids.root_session_id.and_then(id_shaped)) {
        span.record("session_id", session_id);
    }
    if let Some(run_id) = ids.run_id.and_then(id_shaped) {
        span.record("run_id", run_id);
    }
    span
}

/// The params' members a span records, as written (any other member is skipped unread).
#[derive(Default, Deserialize)]
struct Ids<'a> {
    #[serde(borrow, default)]
    session_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    root_session_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    run_id: Option<&'a RawValue>,
}

/// One line per request at debug, inside its span: how it ended and how long it took. An operator turns it on
/// with `RUST_LOG=troupe_protocol=debug` to follow what each client asks.
pub(crate) fn log_end(result: Result<(), &crate::error::RpcError>, elapsed: std::time::Duration) {
    let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(()) => tracing::debug!(duration_ms, "request answered"),
        Err(error) => tracing::debug!(duration_ms, code = error.code, "request answered with an error"),
    }
}

/// The string `raw` holds when it is id-shaped. Such a string has no escapes, so its JSON text is the string.
fn id_shaped(raw: &RawValue) -> Option<&str> {
    let value = raw.get().strip_prefix('"')?.strip_suffix('"')?;
    let id_shaped = !value.is_empty()
        && value.len() <= MAX_ID_CHARS
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    id_shaped.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn only_id_shaped_values_are_recorded() {
        assert_eq!(id_shaped(&raw(r#""0193-abc""#)), Some("0193-abc"));
        assert_eq!(id_shaped(&raw(r#""x\u001b[31m""#)), None);
        assert_eq!(id_shaped(&raw("1")), None);
        assert_eq!(id_shaped(&raw(&format!(r#""{}""#, "a".repeat(65)))), None);
        assert_eq!(id_shaped(&raw("null")), None);
        assert_eq!(id_shaped(&raw(r#""""#)), None);
    }

    /// What a fmt subscriber writes while `body` runs, at `level` and above.
    fn logged(level: tracing::Level, body: impl FnOnce()) -> String {
        let buffer = troupe_test_support::SharedBuffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, body);
        buffer.text()
    }

    #[test]
    fn an_enabled_span_records_the_ids_and_a_disabled_one_stays_disabled() {
        let params = raw(r#"{"session_id": "s-1", "run_id": "r-9", "title": "x"}"#);
        let line = logged(tracing::Level::INFO, || {
            let span = request_span("run.start", Some(&params));
            let _entered = span.enter();
            tracing::info!("inside");
        });
        assert!(line.contains(r#"request{method="run.start" session_id="s-1" run_id="r-9"}"#), "{line}");
        let root = raw(r#"{"root_session_id": "root-2", "run_id": "bad id"}"#);
        let line = logged(tracing::Level::INFO, || {
            let span = request_span("approval.list", Some(&root));
            let _entered = span.enter();
            tracing::info!("inside");
        });
        assert!(line.contains(r#"request{method="approval.list" session_id="root-2"}"#), "{line}");
        let line = logged(tracing::Level::WARN, || {
            assert!(request_span("run.start", Some(&params)).is_disabled());
            tracing::warn!("outside");
        });
        assert!(!line.contains("request{"), "{line}");
    }

    #[test]
    fn the_span_reads_the_ids_and_skips_the_other_members() {
        let params = raw(r#"{"other": {"session_id": "nested"}, "session_id": "s-1", "run_id": 7}"#);
        let ids: Ids<'_> = serde_json::from_str(params.get()).unwrap();
        assert_eq!(ids.session_id.and_then(id_shaped), Some("s-1"));
        assert_eq!(ids.run_id.and_then(id_shaped), None);
        assert!(ids.root_session_id.is_none());
    }
}
