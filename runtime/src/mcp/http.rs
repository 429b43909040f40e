//! A streamable-HTTP MCP server, reached by the daemon itself through rmcp's transport (on reqwest): its `url`, a
//! bearer token from the daemon's variable `bearer_token_env_var`, `http_headers` as written and `env_http_headers`
//! from the daemon's variables. A variable that is not set fails the start, naming the variable, never a value;
//! header values taken from variables are marked sensitive (kept out of debug output).

use std::collections::HashMap;

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::supervisor::ClientSide;
use crate::config::McpServerConfig;

/// Connects to the server and runs the MCP handshake.
pub(super) async fn connect(
    client: ClientSide,
    config: &McpServerConfig,
) -> Result<RunningService<RoleClient, ClientSide>, String> {
    let Some(url) = config.url.as_deref() else {
        return Err("the server has no `url`".into());
    };
    install_crypto_provider();
    let mut transport = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers(config)?);
    if let Some(variable) = &config.bearer_token_env_var {
        transport = transport.auth_header(variable_value(variable, "bearer_token_env_var")?);
    }
    let transport = StreamableHttpClientTransport::from_config(transport);
    client.serve(transport).await.map_err(|error| {
        format!("the MCP handshake with {url} failed: {}", super::supervisor::handshake_failure(&error))
    })
}

/// The headers every request carries: `http_headers`, then `env_http_headers` (a name in both takes the variable's).
fn headers(config: &McpServerConfig) -> Result<HashMap<http::HeaderName, http::HeaderValue>, String> {
    let mut headers = HashMap::new();
    let fixed = config.http_headers.iter().map(|(name, value)| (name, value.clone(), false));
    let from_variables = config
        .env_http_headers
        .iter()
        .map(|(name, variable)| Ok((name, variable_value(variable, &format!("env_http_headers.{name}"))?, true)))
        .collect::<Result<Vec<_>, String>>()?;
    for (name, value, sensitive) in fixed.chain(from_variables) {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not an HTTP header name"))?;
        let mut value = http::HeaderValue::from_str(&value)
            .map_err(|_| format!("the value of the header `{name}` is not a valid header value"))?;
        value.set_sensitive(sensitive);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// The daemon's variable `variable`, for the setting `setting`.
fn variable_value(variable: &str, setting: &str) -> Result<String, String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Ok(value),
        Ok(_) => Err(format!("the environment variable {variable} ({setting}) is empty in the daemon's environment")),
        Err(_) => {
            Err(format!("the environment variable {variable} ({setting}) is not set in the daemon's environment"))
        }
    }
}

/// rmcp's HTTP client is reqwest on rustls without a built-in crypto provider: the process gets ring's, the one the
/// rest of troupe's TLS uses, as its default (once; an already installed default is kept).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
