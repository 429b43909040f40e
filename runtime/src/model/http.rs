//! What the HTTP providers share: the client, endpoint checks, timeouts, and turning failed responses into
//! [`ModelError`]s.
//!
//! TLS is rustls with the `ring` provider, which reqwest passes explicitly when it builds a client, so no
//! process-wide crypto provider has to be installed.

use std::time::Duration;

use futures::StreamExt;
use reqwest::header::HeaderMap;
use troupe_protocol::diagnostic::sanitize_diagnostic;

use super::error::{ErrorStage, ModelError, ModelErrorKind, ProviderSetupError, classify_vendor_failure};
use super::secret::ApiKey;

/// An error body longer than this is cut before it is kept: only its first 4 KiB survive sanitizing anyway,
/// and a broken proxy must not make us buffer megabytes.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// How long each phase of a model request may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// DNS, TCP and TLS.
    pub connect: Duration,
    /// From sending the request to the response status. Long prompts take a while to start streaming.
    pub response: Duration,
    /// The longest silence between two reads of a stream.
    pub stream_idle: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> HttpTimeouts {
        HttpTimeouts {
            connect: Duration::from_secs(10),
            response: Duration::from_secs(300),
            stream_idle: Duration::from_secs(300),
        }
    }
}

pub(crate) fn build_http_client(timeouts: &HttpTimeouts) -> Result<reqwest::Client, ProviderSetupError> {
    reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .build()
        .map_err(|error| ProviderSetupError::HttpClient(error_chain_text(&error)))
}

/// Checks a provider's base URL and returns it without a trailing slash. Custom endpoints must be `https`, or
/// `http` to a loopback host, so a key is never sent in clear over a network, unless the operator said
/// `allow_insecure_http` for this provider (a LAN server such as Ollama on another machine); `provider_id` names
/// it in the refusal's hint.
pub(crate) fn checked_base_url(
    url: &str,
    allow_insecure_http: bool,
    provider_id: &str,
) -> Result<String, ProviderSetupError> {
    let invalid = |reason: &str| ProviderSetupError::InvalidBaseUrl { url: url.to_owned(), reason: reason.to_owned() };
    let parsed = reqwest::Url::parse(url).map_err(|error| invalid(&error.to_string()))?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_insecure_http || is_loopback_host(&parsed) => {}
        "http" => {
            return Err(invalid(&format!(
                "plain http is only allowed to a loopback host; to send requests (and any key) in clear to it \
                 anyway, set setup_values.allow_insecure_http = \"true\" (`troupe connect {provider_id} --base-url \
                 {url} --allow-insecure-http`)"
            )));
        }
        _ => {
            return Err(invalid("the scheme must be https (or http to a loopback host)"));
        }
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// Whether `url` is plain http to a host off loopback: what `allow_insecure_http` permits, and what the daemon
/// warns about at connect and at every start.
pub fn is_insecure_http(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|parsed| parsed.scheme() == "http" && !is_loopback_host(&parsed))
}

fn is_loopback_host(parsed: &reqwest::Url) -> bool {
    // IPv6 hosts come bracketed, as in the URL.
    let host = parsed.host_str().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|address| address.is_loopback())
}

/// Sends a request and waits for its status. A non-success status becomes the vendor's error.
pub(crate) async fn send_checked(
    request: reqwest::RequestBuilder,
    timeouts: &HttpTimeouts,
    api_key: Option<&ApiKey>,
) -> Result<reqwest::Response, ModelError> {
    let response = match tokio::time::timeout(timeouts.response, request.send()).await {
        Err(_elapsed) => {
            return Err(ModelError::new(
                ModelErrorKind::Timeout,
                ErrorStage::Request,
                format!("no response within {} ms", timeouts.response.as_millis()),
            ));
        }
        Ok(Err(error)) => {
            let stage = if error.is_connect() { ErrorStage::Connect } else { ErrorStage::Request };
            return Err(redact_error(transport_error(&error, stage), api_key));
        }
        Ok(Ok(response)) => response,
    };
    if response.status().is_success() { Ok(response) } else { Err(error_from_response(response, api_key).await) }
}

/// Reads a whole (small) success body as JSON, for the non-streaming endpoints such as `GET /models`.
pub(crate) async fn read_json_body(
    response: reqwest::Response,
    timeouts: &HttpTimeouts,
) -> Result<serde_json::Value, ModelError> {
    let body = match tokio::time::timeout(timeouts.response, response.bytes()).await {
        Err(_elapsed) => {
            return Err(ModelError::new(
                ModelErrorKind::Timeout,
                ErrorStage::Request,
                "the response body did not arrive in time",
            ));
        }
        Ok(Err(error)) => return Err(transport_error(&error, ErrorStage::Request)),
        Ok(Ok(body)) => body,
    };
    serde_json::from_slice(&body).map_err(|error| {
        let mut model_error = ModelError::new(
            ModelErrorKind::InvalidResponse,
            ErrorStage::Request,
            format!("the response is not JSON: {error}"),
        );
        model_error.response_body = Some(sanitize_diagnostic(&String::from_utf8_lossy(&body)));
        model_error
    })
}

/// A reqwest failure as a [`ModelError`]. The message walks the whole source chain, because reqwest's own text
/// ("error sending request") hides the useful part ("connection refused").
pub(crate) fn transport_error(error: &reqwest::Error, stage: ErrorStage) -> ModelError {
    let kind = if error.is_timeout() { ModelErrorKind::Timeout } else { ModelErrorKind::Transport };
    ModelError::new(kind, stage, error_chain_text(error))
}

pub(crate) fn error_chain_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Builds the error for a non-success response: the classification of its status and vendor body, the
/// request id, the vendor's requested wait, and the sanitized body.
pub(crate) async fn error_from_response(response: reqwest::Response, api_key: Option<&ApiKey>) -> ModelError {
    let status = response.status();
    let request_id = request_id(response.headers());
    let retry_after_ms = retry_after_ms(response.headers());
    let body_text = read_capped_body(response).await;
    let vendor_error = VendorErrorBody::parse(&body_text);
    let (kind, retryable) = classify_vendor_failure(
        Some(status.as_u16()),
        vendor_error.code.as_deref(),
        vendor_error.message.as_deref().unwrap_or(""),
    );
    let message = match &vendor_error.message {
        Some(message) => format!("HTTP {status}: {message}"),
        None => format!("HTTP {status}"),
    };
    let mut error = ModelError::new(kind, ErrorStage::Request, message);
    error.retryable = retryable;
    error.http_status = Some(status.as_u16());
    error.vendor_code = vendor_error.code;
    error.request_id = request_id;
    error.retry_after_ms = retry_after_ms;
    if !body_text.is_empty() {
        // Redacted before it is cut to size, so that a key across the cut cannot survive in part.
        let body = api_key.map_or_else(|| body_text.clone(), |key| key.redact_from(&body_text));
        error.response_body = Some(sanitize_diagnostic(&body));
    }
    redact_error(error, api_key)
}

/// Reads at most [`MAX_ERROR_BODY_BYTES`] of a body, as lossy UTF-8. A body that fails halfway is kept as far
/// as it got: it only serves as a diagnostic.
async fn read_capped_body(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    let read_all = async {
        while let Some(Ok(chunk)) = chunks.next().await {
            let room = MAX_ERROR_BODY_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY_BYTES {
                break;
            }
        }
    };
    // The status is already known; a body that trickles in must not hold the error back for long.
    let _ = tokio::time::timeout(Duration::from_secs(10), read_all).await;
    String::from_utf8_lossy(&body).into_owned()
}

/// The `error` object both vendors put in their error bodies: `{"error": {"type"|"code", "message"}}`.
#[derive(Default)]
pub(crate) struct VendorErrorBody {
    /// `error.code` when it is a string, else `error.type`.
    pub code: Option<String>,
    pub message: Option<String>,
}

impl VendorErrorBody {
    pub fn parse(body: &str) -> VendorErrorBody {
        match serde_json::from_str::<serde_json::Value>(body) {
            Ok(value) => VendorErrorBody::from_value(&value),
            Err(_) => VendorErrorBody::default(),
        }
    }

    /// Reads `value["error"]`; a bare string there is taken as the message (some OpenAI-compatible servers).
    pub fn from_value(value: &serde_json::Value) -> VendorErrorBody {
        let error = &value["error"];
        if let Some(message) = error.as_str() {
            return VendorErrorBody { code: None, message: Some(message.to_owned()) };
        }
        let text = |field: &str| error[field].as_str().map(str::to_owned);
        VendorErrorBody { code: text("code").or_else(|| text("type")), message: text("message") }
    }
}

/// `x-request-id` (OpenAI and most gateways) or `request-id` (Anthropic).
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    ["x-request-id", "request-id"].iter().find_map(|name| {
        headers.get(*name).and_then(|value| value.to_str().ok()).map(|value| sanitize_diagnostic(value.trim()))
    })
}

/// `retry-after-ms` (milliseconds, OpenAI) or `Retry-After` (seconds; the HTTP-date form is not used by
/// model vendors and is ignored).
pub(crate) fn retry_after_ms(headers: &HeaderMap) -> Option<u64> {
    let number = |name: &str| -> Option<f64> {
        let value: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(milliseconds) = number("retry-after-ms") {
        return Some(milliseconds.ceil() as u64);
    }
    number("retry-after").map(|seconds| (seconds * 1000.0).ceil() as u64)
}

/// Removes `api_key` from the texts of `error`, for vendors that echo a rejected key back.
pub(crate) fn redact_error(mut error: ModelError, api_key: Option<&ApiKey>) -> ModelError {
    if let Some(key) = api_key {
        error.message = key.redact_from(&error.message);
        // Bounded again after the redaction, whose marker may be longer than the key it replaces.
        error.response_body = error.response_body.map(|body| sanitize_diagnostic(&key.redact_from(&body)));
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn a_redacted_response_body_stays_within_the_diagnostic_bound() {
        use troupe_protocol::diagnostic::MAX_DIAGNOSTIC_BYTES;
        // A short key echoed many times: "<redacted>" is longer than the key, so redacting after the cut grew the
        // body past the bound.
        let key = ApiKey::new("sk-12345");
        let mut error = ModelError::new(ModelErrorKind::Auth, ErrorStage::Request, "HTTP 401");
        error.response_body = Some(sanitize_diagnostic(&"sk-12345 ".repeat(600)));
        let redacted = redact_error(error, Some(&key));
        let body = redacted.response_body.unwrap();
        assert!(body.len() <= MAX_DIAGNOSTIC_BYTES, "{} bytes", body.len());
        assert!(!body.contains("sk-12345"));
    }

    #[test]
    fn retry_after_prefers_milliseconds_and_reads_seconds() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after_ms(&headers), Some(2000));
        headers.insert("retry-after-ms", HeaderValue::from_static("150.5"));
        assert_eq!(retry_after_ms(&headers), Some(151));
        headers.insert("retry-after-ms", HeaderValue::from_static("soon"));
        assert_eq!(retry_after_ms(&headers), Some(2000));
    }

    #[test]
    fn base_urls_must_be_https_or_loopback_http() {
        let checked = |url: &str| checked_base_url(url, false, "openai");
        assert_eq!(checked("https://api.openai.com/v1/").unwrap(), "https://api.openai.com/v1");
        assert!(checked("http://localhost:11434/v1").is_ok());
        assert!(checked("http://127.0.0.1:8080").is_ok());
        assert!(checked("http://[::1]:8080").is_ok());
        let refused = checked("http://192.168.1.20:11434/v1").unwrap_err().to_string();
        assert!(
            refused.contains("allow_insecure_http")
                && refused
                    .contains("troupe connect openai --base-url http://192.168.1.20:11434/v1 --allow-insecure-http"),
            "{refused}"
        );
        assert!(checked("ftp://example.com").is_err());
        // With the operator's consent, plain http off loopback is accepted; other schemes still are not.
        assert!(checked_base_url("http://192.168.1.20:11434/v1", true, "openai").is_ok());
        assert!(checked_base_url("ftp://example.com", true, "openai").is_err());
        assert!(is_insecure_http("http://192.168.1.20:11434/v1"));
        assert!(!is_insecure_http("http://localhost:11434/v1"));
        assert!(!is_insecure_http("https://example.com/v1"));
    }
}
