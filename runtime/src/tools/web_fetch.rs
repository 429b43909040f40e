//! `web_fetch`: the text of a web page, fetched by the daemon with one HTTP(S) GET.
//!
//! Its permission is action `network` on the URL's host (`example.com`, `127.0.0.1`): the built-ins ask, and rules
//! by host decide (`{ effect = "allow", action = "network", resource = "docs.rs" }`, `*.example.com`). The request
//! runs inside the daemon, not in a sandboxed process, so the sandbox's `network = false` is enforced here: the
//! call is refused before anyone is asked ([`Tool::refusal`]) and again at execution. Redirects are followed on
//! the allowed host only (`fetch.rs`); HTML becomes Markdown and other text passes through (`page.rs`). The whole
//! call is bounded: [`fetch::FETCH_TIMEOUT`], [`fetch::MAX_BODY_BYTES`] read, and the text returned capped like
//! `read_file`'s (`[tools]` limits), lower with `max_bytes`. Local addresses (loopback, private, link-local) are
//! refused unless `[tools] web_fetch_local` allows them (`address.rs`).

mod address;
mod fetch;
mod page;

use std::path::Path;
use std::sync::OnceLock;

use futures::FutureExt;
use futures::future::BoxFuture;
use reqwest::Url;
use serde::Deserialize;
use serde_json::json;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::PersistedToolResult;

use super::error::ToolError;
use super::results::{self, parse_arguments, run_blocking};
use super::{PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::sandbox::Sandbox;

use page::{BodyKind, body_kind, html_to_markdown};

const NAME: &str = "web_fetch";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    url: String,
    /// The most bytes of text returned; at most the tools' read limit.
    #[serde(default)]
    max_bytes: Option<usize>,
}

/// The tool, with its HTTP clients made at their first call: one that reaches public addresses only, and one that
/// reaches local ones too (`[tools] web_fetch_local`).
#[derive(Default)]
pub struct WebFetchTool {
    public_client: OnceLock<Result<fetch::FetchClient, String>>,
    local_client: OnceLock<Result<fetch::FetchClient, String>>,
}

impl WebFetchTool {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Tool for WebFetchTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: "Fetch a web page or other text by URL (HTTP or HTTPS GET). HTML is returned as Markdown, \
                          other text as it is; images and other binary content are refused. Redirects on the same \
                          host are followed; a redirect to another host is returned for you to fetch. Each host \
                          needs permission."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "An http:// or https:// URL."},
                    "max_bytes": {"type": "integer", "minimum": 1, "description": "Most bytes of text to return. Default: as many as fit."}
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        }
    }

    fn permission(&self, arguments: &serde_json::Value, _cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments: Arguments = parse_arguments(NAME, arguments)?;
        let (url, host) = checked_url(&arguments.url)?;
        Ok(PermissionRequest {
            action: PermissionAction::Network,
            resource: host,
            summary: format!("fetch {url}"),
            // Nothing on disk: the host is the whole resource, judged by rules and the mode.
            inside_cwd: true,
        })
    }

    fn refusal(&self, sandbox: &Sandbox) -> Option<String> {
        network_refusal(sandbox)
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        let local = context.limits.web_fetch_local;
        let client = if local { &self.local_client } else { &self.public_client };
        let client = client.get_or_init(|| fetch::client(local)).clone();
        async move {
            if context.cancel.is_cancelled() {
                return results::cancelled("cancelled before fetching");
            }
            if let Some(refusal) = network_refusal(&context.sandbox) {
                return results::denied(refusal);
            }
            let arguments: Arguments = match parse_arguments(NAME, &arguments) {
                Ok(arguments) => arguments,
                Err(error) => return error.into_result(),
            };
            let (url, host) = match checked_url(&arguments.url) {
                Ok(checked) => checked,
                Err(error) => return error.into_result(),
            };
            if let Some(approved) = &context.approved_request
                && (approved.action != PermissionAction::Network || approved.resource != host)
            {
                return results::denied(format!("refused: {url} is not on the host that was allowed"));
            }
            // A name is judged as it resolves (the client's resolver); an address written in the URL, here.
            let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().ok();
            if let Some(address) = literal.filter(|address| !local && address::is_local(*address)) {
                return results::denied(address::refusal(&host, address));
            }
            let client = match client {
                Ok(client) => client,
                Err(error) => return results::error(format!("the HTTP client could not be set up: {error}")),
            };
            let limit = arguments.max_bytes.unwrap_or(usize::MAX).clamp(1, context.limits.max_read_bytes);
            let fetched = tokio::select! {
                () = context.cancel.cancelled() => return results::cancelled("cancelled while fetching"),
                fetched = tokio::time::timeout(fetch::FETCH_TIMEOUT, fetch::fetch(&client, url.clone())) => fetched,
            };
            match fetched {
                Err(_elapsed) => results::error(format!(
                    "fetching {url} took longer than {} s and was stopped",
                    fetch::FETCH_TIMEOUT.as_secs()
                )),
                Ok(Err(fetch::FetchError::Refused(refusal))) => results::denied(refusal),
                Ok(Err(error)) => results::error(error.to_string()),
                // Converting a large page is CPU work: off the run's thread.
                Ok(Ok(fetched)) => run_blocking(move || rendered(fetched, limit)).await,
            }
        }
        .boxed()
    }
}

fn network_refusal(sandbox: &Sandbox) -> Option<String> {
    (!sandbox.network()).then(|| {
        "refused by the sandbox: its network is off (`[sandbox] network = false` in troupe's config.toml), so \
         web_fetch reaches no host"
            .to_owned()
    })
}

/// `requested` as an http(s) URL with a host, and that host as the permission names it: lowercase (the URL parser
/// lowers domain names), without port, an IPv6 address in brackets.
fn checked_url(requested: &str) -> Result<(Url, String), ToolError> {
    let invalid = |message: String| ToolError::InvalidArguments { tool: NAME, message };
    let url = Url::parse(requested.trim()).map_err(|error| invalid(format!("`url` is not a URL: {error}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!("`url` must be http or https, not {}", url.scheme())));
    }
    let Some(host) = url.host_str().filter(|host| !host.is_empty()) else {
        return Err(invalid("`url` names no host".to_owned()));
    };
    let host = host.to_owned();
    Ok((url, host))
}

/// The result of a response: a header of where it came from, then its text, cut at `limit` bytes.
fn rendered(fetched: fetch::Fetched, limit: usize) -> PersistedToolResult {
    let content_type = fetched.content_type.as_deref();
    let kind = body_kind(content_type, &fetched.body);
    let read = if fetched.cut {
        format!("more than {} bytes", fetch::MAX_BODY_BYTES)
    } else {
        format!("{} bytes", fetched.body.len())
    };
    if kind == BodyKind::Binary {
        return results::error(format!(
            "{} is {} ({read}), not text: web_fetch returns HTML (as Markdown) and other text only",
            fetched.url,
            content_type.map_or_else(|| "binary content".to_owned(), |content_type| format!("`{content_type}`"))
        ));
    }
    let mut text = match kind {
        BodyKind::Html => html_to_markdown(&fetched.body),
        _ => String::from_utf8_lossy(&fetched.body).into_owned(),
    };
    let mut output = format!("URL: {}\nStatus: {}\n", fetched.url, fetched.status);
    if let Some(content_type) = content_type {
        output.push_str(&format!("Content-Type: {content_type}\n"));
    }
    output.push('\n');
    let whole = text.len();
    if whole > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        // A cut mark right after the cut, as every cut of the daemon has, so a secret the cut split is masked in
        // what is left of it (`redact.rs`).
        text.push('…');
    }
    output.push_str(&text);
    if whole > limit {
        output.push_str(&format!(
            "\n[truncated: showed {limit} of {whole} bytes of text; fetch a more specific page for the rest]"
        ));
    }
    if fetched.cut {
        output.push_str(&format!("\n[the response was cut after {} bytes]", fetch::MAX_BODY_BYTES));
    }
    if fetched.status.is_success() { results::ok(output) } else { results::error(output) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(content_type: &str, body: &[u8]) -> fetch::Fetched {
        fetch::Fetched {
            url: Url::parse("https://example.com/page").unwrap(),
            status: reqwest::StatusCode::OK,
            content_type: Some(content_type.to_owned()),
            body: body.to_vec(),
            cut: false,
        }
    }

    #[test]
    fn the_permission_is_network_on_the_host_alone() {
        let tool = WebFetchTool::new();
        let request = tool.permission(&json!({"url": "https://Docs.RS:8443/a?b#c"}), Path::new("/")).unwrap();
        assert_eq!((request.action, request.resource.as_str()), (PermissionAction::Network, "docs.rs"));
        assert_eq!(request.summary, "fetch https://docs.rs:8443/a?b#c");
        let ipv6 = tool.permission(&json!({"url": "http://[::1]:8080/"}), Path::new("/")).unwrap();
        assert_eq!(ipv6.resource, "[::1]");
        for bad in ["file:///etc/passwd", "ftp://example.com/", "not a url", "https://"] {
            assert!(tool.permission(&json!({"url": bad}), Path::new("/")).is_err(), "{bad}");
        }
        assert!(tool.permission(&json!({"url": "https://x.org", "method": "POST"}), Path::new("/")).is_err());
    }

    #[test]
    fn a_page_is_rendered_with_where_it_came_from_and_cut_at_the_limit() {
        let result = rendered(fetched("text/html", b"<h1>Title</h1><p>words here</p>"), 1000);
        assert_eq!(result.status, troupe_protocol::types::run::ToolResultStatus::Ok);
        assert_eq!(
            result.output,
            "URL: https://example.com/page\nStatus: 200 OK\nContent-Type: text/html\n\n# Title\n\nwords here"
        );
        let result = rendered(fetched("text/plain", "ab€cd".as_bytes()), 3);
        assert!(
            result.output.ends_with(
                "\n\nab…\n[truncated: showed 3 of 7 bytes of text; fetch a more specific page for the rest]"
            ),
            "{}",
            result.output
        );
    }

    #[test]
    fn binary_is_refused_and_an_error_status_is_an_error_with_its_body() {
        let result = rendered(fetched("image/png", b"\x89PNG"), 1000);
        assert_eq!(result.status, troupe_protocol::types::run::ToolResultStatus::Error);
        assert_eq!(
            result.output,
            "https://example.com/page is `image/png` (4 bytes), not text: web_fetch returns HTML (as Markdown) and \
             other text only"
        );
        let mut missing = fetched("text/plain", b"no such page");
        missing.status = reqwest::StatusCode::NOT_FOUND;
        let result = rendered(missing, 1000);
        assert_eq!(result.status, troupe_protocol::types::run::ToolResultStatus::Error);
        assert!(result.output.contains("Status: 404 Not Found\n") && result.output.ends_with("no such page"));
    }
}
