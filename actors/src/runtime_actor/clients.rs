//! Provider clients built from a connection's settings, and the listing of their models.
//!
//! Building the local provider's client reads its script file, so the actor builds clients on a blocking thread
//! when it serves `provider.connect` (at start, before serving, it builds the stored ones directly).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use troupe_protocol::types::runtime::ProviderKind;
use troupe_runtime::model::anthropic::{Anthropic, AnthropicConfig};
use troupe_runtime::model::local::ScriptedModel;
use troupe_runtime::model::openai::{OpenAiCompatible, OpenAiCompatibleConfig};
use troupe_runtime::model::{ApiKey, ErrorStage, ModelError, ModelErrorKind};

/// How long `provider.connect` waits for the provider to list its models.
const LIST_MODELS_TIMEOUT: Duration = Duration::from_secs(15);

/// A provider client built from settings, before it is installed.
pub(super) enum ProviderClient {
    Scripted(Arc<ScriptedModel>),
    OpenAi(OpenAiCompatible),
    Anthropic(Anthropic),
}

/// How a connection authenticates (`auth_method` on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AuthMethod {
    None,
    ApiKey,
}

impl AuthMethod {
    fn parse(word: &str) -> Result<AuthMethod, String> {
        match word {
            "none" => Ok(AuthMethod::None),
            "api_key" => Ok(AuthMethod::ApiKey),
            other => Err(format!("unknown auth_method `{other}`; use `api_key` or `none`")),
        }
    }
}

/// Builds a provider client from its settings, checking them. Errors never contain secret values.
pub(super) fn build_client(
    provider_id: &str,
    setup_values: &BTreeMap<String, String>,
    auth_method: &str,
    auth_values: &BTreeMap<String, String>,
) -> Result<ProviderClient, String> {
    let kind = ProviderKind::of_provider_id(provider_id).ok_or_else(|| format!("unknown provider `{provider_id}`"))?;
    let allowed_setup: &[&str] =
        if kind == ProviderKind::Local { &["script"] } else { &["base_url", "allow_insecure_http"] };
    if let Some(unknown) = setup_values.keys().find(|key| !allowed_setup.contains(&key.as_str())) {
        return Err(format!(
            "unknown setup value `{unknown}` for `{provider_id}`; allowed: {}",
            allowed_setup.join(", ")
        ));
    }
    let allow_insecure_http = match setup_values.get("allow_insecure_http").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err("setup_values.allow_insecure_http must be \"true\" or \"false\"".to_owned()),
    };
    let api_key = match AuthMethod::parse(auth_method)? {
        AuthMethod::None => {
            if !auth_values.is_empty() {
                return Err("auth_method `none` takes no auth_values".to_owned());
            }
            None
        }
        AuthMethod::ApiKey => match auth_values.get("api_key") {
            Some(key) if !key.trim().is_empty() && auth_values.len() == 1 => Some(ApiKey::new(key.trim())),
            _ => {
                return Err("auth_method `api_key` needs exactly one auth value, a non-empty `api_key`".to_owned());
            }
        },
    };
    match kind {
        ProviderKind::Local => {
            if api_key.is_some() {
                return Err("the local provider takes auth_method `none`".to_owned());
            }
            let script = setup_values.get("script").ok_or("the local provider needs setup_values.script")?;
            let scripted = ScriptedModel::from_file(&PathBuf::from(script))
                .map_err(|error| format!("the script cannot be used: {error}"))?;
            Ok(ProviderClient::Scripted(Arc::new(scripted)))
        }
        ProviderKind::Openai => {
            let mut config = match api_key {
                Some(key) => OpenAiCompatibleConfig::openai(key),
                None => match setup_values.get("base_url") {
                    Some(base_url) => OpenAiCompatibleConfig::keyless(base_url.clone()),
                    None => return Err("without an api_key, setup_values.base_url is required (e.g. Ollama)".into()),
                },
            };
            if let Some(base_url) = setup_values.get("base_url") {
                config.base_url = base_url.clone();
            }
            config.allow_insecure_http = allow_insecure_http;
            warn_if_insecure(provider_id, &config.base_url, allow_insecure_http);
            OpenAiCompatible::new(config).map(ProviderClient::OpenAi).map_err(|error| error.to_string())
        }
        ProviderKind::Anthropic => {
            let key = api_key.ok_or("the anthropic provider needs auth_method `api_key`")?;
            let mut config = AnthropicConfig::new(key);
            if let Some(base_url) = setup_values.get("base_url") {
                config.base_url = base_url.clone();
            }
            config.allow_insecure_http = allow_insecure_http;
            warn_if_insecure(provider_id, &config.base_url, allow_insecure_http);
            Anthropic::new(config).map(ProviderClient::Anthropic).map_err(|error| error.to_string())
        }
    }
}

/// Says, each time a provider's client is built (at connect and at every start), that requests to it, and its key,
/// go over plain http off loopback because the operator allowed it.
fn warn_if_insecure(provider_id: &str, base_url: &str, allow_insecure_http: bool) {
    if allow_insecure_http && troupe_runtime::model::is_insecure_http(base_url) {
        tracing::warn!(
            provider = provider_id,
            base_url,
            "allow_insecure_http: requests to this provider, and its key if any, go over plain http in clear"
        );
    }
}

/// The models the client's provider lists (none for the local provider), within [`LIST_MODELS_TIMEOUT`].
pub(super) async fn list_models(client: &ProviderClient) -> Result<Vec<String>, ModelError> {
    match client {
        ProviderClient::Scripted(_) => Ok(Vec::new()),
        ProviderClient::OpenAi(openai) => within_listing_timeout(openai.list_models()).await,
        ProviderClient::Anthropic(anthropic) => within_listing_timeout(anthropic.list_models()).await,
    }
}

async fn within_listing_timeout(
    listing: impl Future<Output = Result<Vec<String>, ModelError>>,
) -> Result<Vec<String>, ModelError> {
    tokio::time::timeout(LIST_MODELS_TIMEOUT, listing).await.unwrap_or_else(|_| {
        Err(ModelError::new(ModelErrorKind::Timeout, ErrorStage::Request, "listing the models timed out"))
    })
}
