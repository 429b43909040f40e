//! JSON-RPC error objects and the error codes of the wire contract.
//!
//! Every failure that reaches a client becomes an [`RpcError`] here, in one place: the engine returns typed
//! values, and this module decides their code, message and `data`. Every string of `data` (`detail`, and the ids
//! a typed error echoes: `session_id`, `run_id`, `method`, `path`, `name`, ...) is passed through
//! [`sanitize_diagnostic`] where `data` is built, and echoed arrays and objects are cut to [`MAX_ECHOED_ITEMS`], so
//! no handler can send a client escape sequences or unbounded text, even one that client sent in.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::diagnostic::sanitize_diagnostic;
use crate::error_code::ErrorCode;

/// Error codes of `wire.md`.
pub mod codes {
    /// The frame is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The frame is JSON but not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Params do not decode, or a typed rejection of their content.
    pub const INVALID_PARAMS: i64 = -32602;
    /// A bug or an unexpected failure inside the daemon.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The engine refused the operation: not found, conflict, wrong state.
    pub const ENGINE_ERROR: i64 = -32000;
    /// A method other than `handshake` before a successful handshake.
    pub const HANDSHAKE_REQUIRED: i64 = -32001;
    /// Too many requests in flight on this connection; retry with backoff.
    pub const OVERLOADED: i64 = -32003;
}

/// The most elements of an array, or entries of an object, echoed in an error's `data`; the rest are left out.
pub const MAX_ECHOED_ITEMS: usize = 64;

/// A JSON-RPC error object, `{code, message, data?}`.
///
/// `Debug` redacts `data`: it may carry identifiers a client needs but that do not belong in logs.
#[derive(Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl std::fmt::Debug for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcError")
            .field("code", &self.code)
            .field("message", &self.message)
            .field("data", &self.data.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl RpcError {
    fn with_detail(code: i64, message: &str, detail: &str) -> Self {
        let mut data = Map::new();
        data.insert("detail".into(), Value::String(sanitize_diagnostic(detail)));
        RpcError { code, message: message.to_owned(), data: Some(Value::Object(data)) }
    }

    /// A typed error: `data = {code, detail, ...ids}`.
    fn typed(code: i64, message: &str, typed_code: ErrorCode, detail: &str, ids: &[(&str, Value)]) -> Self {
        let mut data = Map::new();
        data.insert("code".into(), Value::String(typed_code.as_str().to_owned()));
        data.insert("detail".into(), Value::String(sanitize_diagnostic(detail)));
        for (key, value) in ids {
            data.insert((*key).to_owned(), echoed(value));
        }
        RpcError { code, message: message.to_owned(), data: Some(Value::Object(data)) }
    }

    pub fn parse_error(detail: &str) -> Self {
        Self::with_detail(codes::PARSE_ERROR, "Parse error", detail)
    }

    pub fn invalid_request(detail: &str) -> Self {
        Self::with_detail(codes::INVALID_REQUEST, "Invalid Request", detail)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::with_detail(
            codes::METHOD_NOT_FOUND,
            "Method not found",
            &format!("unknown method `{}`", truncate_for_detail(method)),
        )
    }

    /// Params that do not decode.
    pub fn invalid_params(detail: &str) -> Self {
        Self::with_detail(codes::INVALID_PARAMS, "Invalid params", detail)
    }

    /// A typed rejection of well-formed params (`idempotency_conflict`, `unsupported_protocol_version`, ...).
    pub fn invalid_params_typed(typed_code: ErrorCode, detail: &str, ids: &[(&str, Value)]) -> Self {
        Self::typed(codes::INVALID_PARAMS, "Invalid params", typed_code, detail, ids)
    }

    pub fn internal(detail: &str) -> Self {
        Self::with_detail(codes::INTERNAL_ERROR, "Internal error", detail)
    }

    pub fn handshake_required(method: &str) -> Self {
        Self::with_detail(
            codes::HANDSHAKE_REQUIRED,
            "Handshake required",
            &format!(
                "`{}` was called before a successful handshake; call `handshake` with protocol_version 20 first",
                truncate_for_detail(method)
            ),
        )
    }

    pub fn overloaded(limit: usize) -> Self {
        Self::with_detail(
            codes::OVERLOADED,
            "Overloaded",
            &format!("more than {limit} requests in flight on this connection; retry with backoff"),
        )
    }

    /// The requests of one frame (a batch) would together hold more reply bytes than the connection's budget.
    pub fn reply_budget_exceeded(limit: usize) -> Self {
        Self::with_detail(
            codes::OVERLOADED,
            "Overloaded",
            &format!(
                "the replies of this batch would exceed the connection's reply budget ({limit} bytes, \
                 limits.reply_budget_bytes); send these requests separately or in smaller batches"
            ),
        )
    }

    /// The engine refused the operation.
    pub fn engine(typed_code: ErrorCode, detail: &str, ids: &[(&str, Value)]) -> Self {
        Self::typed(codes::ENGINE_ERROR, "Engine error", typed_code, detail, ids)
    }

    /// A method of the reference that this daemon routes but does not implement yet.
    pub fn not_implemented(method: &str) -> Self {
        Self::engine(
            ErrorCode::NotImplemented,
            &format!("`{method}` is part of protocol 20 but is not implemented by this daemon yet"),
            &[("method", Value::String(method.to_owned()))],
        )
    }

    /// `data.code`, when this is a typed error.
    pub fn typed_code(&self) -> Option<&str> {
        self.data.as_ref()?.get("code")?.as_str()
    }

    /// `data.code` as a known [`ErrorCode`]; `None` for an untyped error or a code this build does not know (a
    /// newer daemon's): then branch on [`code`](Self::code) and show [`detail`](Self::detail).
    pub fn error_code(&self) -> Option<ErrorCode> {
        ErrorCode::from_word(self.typed_code()?)
    }

    /// `data.detail`, when present.
    pub fn detail(&self) -> Option<&str> {
        self.data.as_ref()?.get("detail")?.as_str()
    }
}

/// `value` as an error's `data` may echo it: the ids a typed error names are often what the client sent (a
/// `session_id` of 1 MiB, a path with escape sequences), so each string is cleaned and bounded like `detail`.
fn echoed(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(sanitize_diagnostic(text)),
        Value::Array(items) => Value::Array(items.iter().take(MAX_ECHOED_ITEMS).map(echoed).collect()),
        Value::Object(entries) => Value::Object(
            entries
                .iter()
                .take(MAX_ECHOED_ITEMS)
                .map(|(key, value)| (sanitize_diagnostic(key), echoed(value)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

/// Method names come from clients; keep the part echoed into a detail short.
fn truncate_for_detail(text: &str) -> &str {
    const LIMIT: usize = 128;
    if text.len() <= LIMIT {
        return text;
    }
    let mut cut = LIMIT;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_errors_carry_code_detail_and_ids() {
        let error = RpcError::engine(
            ErrorCode::SessionNotFound,
            "no session \u{1b}[1mx",
            &[("session_id", Value::String("x".into()))],
        );
        assert_eq!(error.code, codes::ENGINE_ERROR);
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            serde_json::json!({
                "code": -32000,
                "message": "Engine error",
                "data": {"code": "session_not_found", "detail": "no session x", "session_id": "x"}
            })
        );
    }

    #[test]
    fn every_echoed_string_is_cleaned_and_bounded_like_the_detail() {
        use crate::diagnostic::{MAX_DIAGNOSTIC_BYTES, TRUNCATION_MARKER};
        let huge = "s".repeat(1 << 20);
        let many: Vec<Value> = (0..1000).map(|index| Value::String(format!("x\u{1b}[31m{index}"))).collect();
        let error = RpcError::engine(
            ErrorCode::SessionNotFound,
            "no such session",
            &[
                ("session_id", Value::String(huge)),
                ("path", Value::String("/tmp/\u{202e}txt.exe\u{1b}]0;title\u{7}".into())),
                ("names", Value::Array(many)),
                ("nested", serde_json::json!({"run_id": "r\u{1b}[2J", "seq": 7})),
                ("limit", Value::from(5)),
            ],
        );
        let data = error.data.as_ref().unwrap();
        let session_id = data["session_id"].as_str().unwrap();
        assert!(session_id.len() <= MAX_DIAGNOSTIC_BYTES && session_id.ends_with(TRUNCATION_MARKER));
        assert_eq!(data["path"], "/tmp/txt.exe");
        let names = data["names"].as_array().unwrap();
        assert_eq!((names.len(), names[3].as_str()), (MAX_ECHOED_ITEMS, Some("x3")));
        assert_eq!(data["nested"], serde_json::json!({"run_id": "r", "seq": 7}));
        assert_eq!(data["limit"], 5);
        assert!(serde_json::to_string(&error).unwrap().len() < 16 * 1024);
    }

    #[test]
    fn debug_redacts_data() {
        let error = RpcError::invalid_params("secret-ish");
        assert!(!format!("{error:?}").contains("secret-ish"));
    }
}
