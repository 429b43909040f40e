//! Model failures, classified once so that the run loop's choice is a table lookup.
//!
//! Every provider turns what went wrong (a refused connection, an HTTP status with a vendor error body, an
//! `error` event in the middle of a stream, a stream that just stops) into a [`ModelError`] with a
//! [`ModelErrorKind`]. [`ModelError::policy`] maps the kind to what the run loop does next, following the
//! upstream policy:
//!
//! | kind | policy |
//! |---|---|
//! | `transport`, `timeout`, `rate_limited`, `overload`, `unexpected_eof` | retry the same model |
//! | `auth`, `permission_denied`, `invalid_request`, `model_not_found` | next model in the chain |
//! | `context_length` | fail the run |
//! | `invalid_response`, `provider`, `unknown` | retry when `retryable`, else next model |
//!
//! HTTP 5xx answers are `provider` with `retryable = true`, except 503 and 529, which vendors use for
//! overload. OpenAI's `insufficient_quota` 429 is not a rate limit that waiting cures: it is `provider`, not
//! retryable, so the chain moves on.

use troupe_protocol::diagnostic::sanitize_diagnostic;
use troupe_protocol::types::common::ModelErrorSummary;

/// What kind of failure a [`ModelError`] is. The wire name is the snake_case form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    /// The connection failed or broke.
    Transport,
    /// No answer, or no stream progress, in time.
    Timeout,
    /// HTTP 429: the vendor asks us to slow down.
    RateLimited,
    /// The vendor is overloaded (HTTP 503 or 529, Anthropic `overloaded_error`).
    Overload,
    /// HTTP 401: the key is missing or wrong.
    Auth,
    /// HTTP 403: the key may not use this model or feature.
    PermissionDenied,
    /// HTTP 400 or 422: the vendor rejected the request itself.
    InvalidRequest,
    /// HTTP 404: no such model for this key.
    ModelNotFound,
    /// The prompt does not fit the model's context window.
    ContextLength,
    /// The answer could not be understood.
    InvalidResponse,
    /// The vendor failed on its side (HTTP 5xx or an error event).
    Provider,
    /// The stream ended before the vendor said it was complete.
    UnexpectedEof,
    Unknown,
}

impl ModelErrorKind {
    /// The wire name, as in `ModelErrorSummary.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelErrorKind::Transport => "transport",
            ModelErrorKind::Timeout => "timeout",
            ModelErrorKind::RateLimited => "rate_limited",
            ModelErrorKind::Overload => "overload",
            ModelErrorKind::Auth => "auth",
            ModelErrorKind::PermissionDenied => "permission_denied",
            ModelErrorKind::InvalidRequest => "invalid_request",
            ModelErrorKind::ModelNotFound => "model_not_found",
            ModelErrorKind::ContextLength => "context_length",
            ModelErrorKind::InvalidResponse => "invalid_response",
            ModelErrorKind::Provider => "provider",
            ModelErrorKind::UnexpectedEof => "unexpected_eof",
            ModelErrorKind::Unknown => "unknown",
        }
    }

    /// Whether waiting and asking again may help, for errors whose origin says nothing more.
    pub fn default_retryable(self) -> bool {
        matches!(
            self,
            ModelErrorKind::Transport
                | ModelErrorKind::Timeout
                | ModelErrorKind::RateLimited
                | ModelErrorKind::Overload
                | ModelErrorKind::UnexpectedEof
        )
    }
}

impl std::fmt::Display for ModelErrorKind {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// Where a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorStage {
    /// Before the request reached the vendor: DNS, TCP, TLS.
    Connect,
    /// Sending the request or waiting for the status: the vendor refused it, or the answer was not a stream.
    Request,
    /// After the stream started.
    Stream,
}

impl ErrorStage {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorStage::Connect => "connect",
            ErrorStage::Request => "request",
            ErrorStage::Stream => "stream",
        }
    }
}

impl std::fmt::Display for ErrorStage {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// What the run loop does after a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Wait ([`crate::model::RetryPolicy`]) and ask the same model again.
    RetrySameModel,
    /// Move to the next entry of the agent's fallback chain.
    NextModel,
    /// Stop: no other model would do better.
    FailRun,
}

/// A failed model request. Never contains an API key.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("model request failed ({kind}, {stage}): {message}")]
pub struct ModelError {
    pub kind: ModelErrorKind,
    /// A short, terminal-safe explanation.
    pub message: String,
    pub retryable: bool,
    pub stage: ErrorStage,
    pub http_status: Option<u16>,
    /// The vendor's own code, from `error.code` or `error.type` of its error body.
    pub vendor_code: Option<String>,
    /// The vendor's request id (`x-request-id` or `request-id`), for support tickets.
    pub request_id: Option<String>,
    /// How long the vendor asked us to wait (`retry-after-ms`, or `Retry-After` in seconds).
    pub retry_after_ms: Option<u64>,
    /// The vendor's error body as a `DiagnosticText`: format controls removed, at most 4,096 bytes.
    pub response_body: Option<String>,
}

impl ModelError {
    /// An error with nothing but a kind, a stage and a message; `retryable` follows the kind.
    pub fn new(kind: ModelErrorKind, stage: ErrorStage, message: impl Into<String>) -> ModelError {
        ModelError {
            kind,
            message: sanitize_diagnostic(&message.into()),
            retryable: kind.default_retryable(),
            stage,
            http_status: None,
            vendor_code: None,
            request_id: None,
            retry_after_ms: None,
            response_body: None,
        }
    }

    /// The wire form recorded in `attempt_abandoned`, `model_fallback` and `run_failed`.
    pub fn summary(&self) -> ModelErrorSummary {
        ModelErrorSummary {
            kind: self.kind.as_str().to_owned(),
            message: self.message.clone(),
            retryable: self.retryable,
            stage: self.stage.as_str().to_owned(),
            http_status: self.http_status,
            vendor_code: self.vendor_code.clone(),
            request_id: self.request_id.clone(),
            retry_after_ms: self.retry_after_ms,
            response_body: self.response_body.clone(),
        }
    }

    /// What the run loop should do next; see the module docs for the table.
    pub fn policy(&self) -> FailurePolicy {
        match self.kind {
            ModelErrorKind::Transport
            | ModelErrorKind::Timeout
            | ModelErrorKind::RateLimited
            | ModelErrorKind::Overload
            | ModelErrorKind::UnexpectedEof => FailurePolicy::RetrySameModel,
            ModelErrorKind::Auth
            | ModelErrorKind::PermissionDenied
            | ModelErrorKind::InvalidRequest
            | ModelErrorKind::ModelNotFound => FailurePolicy::NextModel,
            ModelErrorKind::ContextLength => FailurePolicy::FailRun,
            ModelErrorKind::InvalidResponse | ModelErrorKind::Provider | ModelErrorKind::Unknown => {
                if self.retryable {
                    FailurePolicy::RetrySameModel
                } else {
                    FailurePolicy::NextModel
                }
            }
        }
    }
}

/// Classifies a vendor failure from what is known of it: the HTTP status (absent for an error event inside a
/// stream), the vendor's code or type, and its message. Returns the kind and whether it is retryable.
pub(crate) fn classify_vendor_failure(
    http_status: Option<u16>,
    vendor_code: Option<&str>,
    vendor_message: &str,
) -> (ModelErrorKind, bool) {
    let code = vendor_code.unwrap_or("");
    let message = vendor_message.to_ascii_lowercase();
    let says_context_length = code == "context_length_exceeded"
        || message.contains("prompt is too long")
        || message.contains("maximum context length")
        || message.contains("context length exceeded")
        || message.contains("context_length_exceeded");
    if says_context_length && matches!(http_status, None | Some(400) | Some(413)) {
        return (ModelErrorKind::ContextLength, false);
    }
    if code == "overloaded_error" || matches!(http_status, Some(503) | Some(529)) {
        return (ModelErrorKind::Overload, true);
    }
    if code == "insufficient_quota" {
        return (ModelErrorKind::Provider, false);
    }
    let kind = match http_status {
        Some(400) | Some(422) => ModelErrorKind::InvalidRequest,
        Some(401) => ModelErrorKind::Auth,
        Some(403) => ModelErrorKind::PermissionDenied,
        Some(404) => ModelErrorKind::ModelNotFound,
        Some(408) => ModelErrorKind::Timeout,
        Some(429) => ModelErrorKind::RateLimited,
        Some(status) if status >= 500 => return (ModelErrorKind::Provider, true),
        Some(_) => ModelErrorKind::Unknown,
        // An error event inside a stream carries only the vendor's type.
        None => match code {
            "rate_limit_error" | "rate_limit_exceeded" => ModelErrorKind::RateLimited,
            "authentication_error" | "invalid_api_key" => ModelErrorKind::Auth,
            "permission_error" => ModelErrorKind::PermissionDenied,
            "not_found_error" | "model_not_found" => ModelErrorKind::ModelNotFound,
            "invalid_request_error" | "request_too_large" => ModelErrorKind::InvalidRequest,
            "timeout_error" => ModelErrorKind::Timeout,
            // An unnamed failure in the middle of a stream is the vendor's; asking again usually works.
            _ => return (ModelErrorKind::Provider, true),
        },
    };
    (kind, kind.default_retryable())
}

/// Why a provider could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProviderSetupError {
    #[error("invalid base URL `{url}`: {reason}")]
    InvalidBaseUrl { url: String, reason: String },
    #[error("could not build the HTTP client: {0}")]
    HttpClient(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_codes_map_to_the_upstream_policy() {
        let policy = |status: Option<u16>, code: Option<&str>, message: &str| {
            let (kind, retryable) = classify_vendor_failure(status, code, message);
            let mut error = ModelError::new(kind, ErrorStage::Request, message);
            error.retryable = retryable;
            (kind, error.policy())
        };
        use FailurePolicy::*;
        use ModelErrorKind::*;
        assert_eq!(policy(Some(429), None, ""), (RateLimited, RetrySameModel));
        assert_eq!(policy(Some(529), None, ""), (Overload, RetrySameModel));
        assert_eq!(policy(Some(503), None, ""), (Overload, RetrySameModel));
        assert_eq!(policy(Some(502), None, ""), (Provider, RetrySameModel));
        assert_eq!(policy(Some(401), None, ""), (Auth, NextModel));
        assert_eq!(policy(Some(403), None, ""), (PermissionDenied, NextModel));
        assert_eq!(policy(Some(404), None, ""), (ModelNotFound, NextModel));
        assert_eq!(policy(Some(422), None, ""), (InvalidRequest, NextModel));
        assert_eq!(policy(Some(400), Some("context_length_exceeded"), "too long"), (ContextLength, FailRun));
        assert_eq!(
            policy(Some(400), Some("invalid_request_error"), "prompt is too long: 210000 tokens > 200000 maximum"),
            (ContextLength, FailRun)
        );
        assert_eq!(policy(Some(429), Some("insufficient_quota"), ""), (Provider, NextModel));
        assert_eq!(policy(None, Some("overloaded_error"), "Overloaded"), (Overload, RetrySameModel));
        assert_eq!(policy(None, Some("api_error"), ""), (Provider, RetrySameModel));
    }

    #[test]
    fn summary_uses_wire_names() {
        let mut error = ModelError::new(ModelErrorKind::RateLimited, ErrorStage::Request, "slow down");
        error.http_status = Some(429);
        error.retry_after_ms = Some(2000);
        let summary = error.summary();
        assert_eq!(summary.kind, "rate_limited");
        assert_eq!(summary.stage, "request");
        assert_eq!(summary.retry_after_ms, Some(2000));
        assert!(summary.retryable);
    }
}
