//! The `request` tracing span each dispatched request runs in, so that every log line emitted while serving it
//! (in the engine's handler, on this task) names the method and the session or run it is about.
//!
//! The values come from the client, so only bounded, id-shaped ones are recorded: the method as the table's own
//! name (`unknown` otherwise), and `session_id`/`run_id` only when they look like ids. A frame of megabytes or
//! a name with terminal escapes never reaches the log.

use serde_json::Value;

/// The longest id recorded (UUIDv7 strings are 36 characters).
const MAX_ID_CHARS: usize = 64;

/// A `request` span: `method` (the request's [`method_label`](super::observer::method_label)), and `session_id`
/// (or `root_session_id`) and `run_id` when the params carry them.
pub(crate) fn request_span(method: &'static str, params: &Value) -> tracing::Span {
    let session_id = id_param(params, "session_id").or_else(|| id_param(params, "root_session_id"));
    tracing::info_span!("request", method, session_id, run_id = id_param(params, "run_id"))
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

fn id_param<'a>(params: &'a Value, name: &str) -> Option<&'a str> {
    let value = params.get(name)?.as_str()?;
    let id_shaped = !value.is_empty()
        && value.len() <= MAX_ID_CHARS
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    id_shaped.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_id_shaped_values_are_recorded() {
        let params = serde_json::json!({"session_id": "0193-abc", "run_id": "x\u{1b}[31m", "other": 1});
        assert_eq!(id_param(&params, "session_id"), Some("0193-abc"));
        assert_eq!(id_param(&params, "run_id"), None);
        assert_eq!(id_param(&params, "other"), None);
        assert_eq!(id_param(&serde_json::json!({"run_id": "a".repeat(65)}), "run_id"), None);
        assert_eq!(id_param(&serde_json::json!(null), "run_id"), None);
    }
}
