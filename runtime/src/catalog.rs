//! The built-in catalog: what every daemon can run with no key and no network.
//!
//! Providers `openai` and `anthropic` are listed from the start, disconnected, so clients can offer to connect
//! them; `local` is always connected. The only agent is `default`, whose fallback chain starts with `local/echo`.

use std::collections::BTreeMap;

use troupe_protocol::types::common::{ModelSelection, RunSelection};
use troupe_protocol::types::runtime::{
    AgentInfo, AgentMode, AuthState, ModelInfo, ProviderInfo, ProviderKind, RuntimeSnapshot,
};

use crate::config::AgentConfig;
use crate::model::context_window::builtin_context_window;
use crate::model::pricing::builtin_pricing;
use crate::provider_store::StoredConnection;

pub const DEFAULT_AGENT: &str = "default";
pub const LOCAL_ECHO: &str = "local/echo";
pub const LOCAL_SCRIPTED: &str = "local/scripted";

/// The snapshot of a daemon that has nothing connected, at `revision`. Lists are sorted by id.
pub fn builtin_snapshot(revision: u64) -> RuntimeSnapshot {
    build_snapshot(revision, &BTreeMap::new(), &BTreeMap::new())
}

/// The snapshot at `revision` for these connections and configured agents (which may replace `default`).
/// Lists are sorted by id.
pub fn build_snapshot(
    revision: u64,
    connections: &BTreeMap<String, StoredConnection>,
    agents: &BTreeMap<String, AgentConfig>,
) -> RuntimeSnapshot {
    let mut snapshot = builtin_parts(revision);
    for provider in &mut snapshot.providers {
        if let Some(connection) = connections.get(&provider.provider_id) {
            provider.connected = true;
            provider.generation = connection.generation;
            provider.auth_state =
                if connection.auth_method == "none" { AuthState::NotRequired } else { AuthState::Configured };
        }
    }
    for (provider_id, connection) in connections {
        if provider_id == "local" {
            continue;
        }
        for model_id in &connection.models {
            snapshot.models.push(ModelInfo {
                model: format!("{provider_id}/{model_id}"),
                name: model_id.clone(),
                provider_id: provider_id.clone(),
                context_window: builtin_context_window(model_id),
                pricing: builtin_pricing(model_id),
            });
        }
    }
    snapshot.models.sort_by(|a, b| a.model.cmp(&b.model));
    snapshot.models.dedup_by(|a, b| a.model == b.model);
    for (name, agent) in agents {
        snapshot.agents.retain(|existing| &existing.agent != name);
        snapshot.agents.push(AgentInfo {
            agent: name.clone(),
            description: agent.description.clone(),
            mode: AgentMode::Primary,
            models: agent.models.iter().map(|model| ModelSelection { model: model.clone(), variant: None }).collect(),
        });
    }
    snapshot.agents.sort_by(|a, b| a.agent.cmp(&b.agent));
    snapshot
}

/// Applies `[models]` to a snapshot's models: a configured context window or pricing replaces the catalog's. A
/// configured model of a known remote provider that the provider did not list is added, so clients see what the
/// daemon knows of it; `local` models are never added (only `local/echo` and `local/scripted` exist).
pub fn apply_model_config(snapshot: &mut RuntimeSnapshot, models: &crate::config::ModelsConfig) {
    for (model, config) in models {
        let Some((provider_id, model_id)) = model.split_once('/') else { continue };
        let index = match snapshot.models.iter().position(|info| &info.model == model) {
            Some(index) => index,
            None => {
                let remote = snapshot
                    .providers
                    .iter()
                    .any(|provider| provider.provider_id == provider_id && provider.kind != ProviderKind::Local);
                if !remote {
                    continue;
                }
                snapshot.models.push(ModelInfo {
                    model: model.clone(),
                    name: model_id.to_owned(),
                    provider_id: provider_id.to_owned(),
                    context_window: builtin_context_window(model_id),
                    pricing: builtin_pricing(model_id),
                });
                snapshot.models.len() - 1
            }
        };
        let info = &mut snapshot.models[index];
        if let Some(window) = config.context_window {
            info.context_window = Some(window);
        }
        if let Some(pricing) = &config.pricing {
            info.pricing = Some(pricing.into());
        }
    }
    snapshot.models.sort_by(|a, b| a.model.cmp(&b.model));
}

fn builtin_parts(revision: u64) -> RuntimeSnapshot {
    let provider = |provider_id: &str, name: &str, kind: ProviderKind, connected: bool| ProviderInfo {
        provider_id: provider_id.to_owned(),
        name: name.to_owned(),
        kind,
        connected,
        auth_state: if connected { AuthState::NotRequired } else { AuthState::Missing },
        generation: 0,
    };
    let local_model = |model: &str, name: &str| ModelInfo {
        model: model.to_owned(),
        name: name.to_owned(),
        provider_id: "local".to_owned(),
        context_window: None,
        pricing: None,
    };
    RuntimeSnapshot {
        revision,
        providers: vec![
            provider("anthropic", "Anthropic", ProviderKind::Anthropic, false),
            provider("local", "Local (offline)", ProviderKind::Local, true),
            provider("openai", "OpenAI-compatible", ProviderKind::Openai, false),
        ],
        models: vec![
            local_model(LOCAL_ECHO, "Echo: answers with the input"),
            local_model(LOCAL_SCRIPTED, "Scripted: plays turns from a script file"),
        ],
        agents: vec![AgentInfo {
            agent: DEFAULT_AGENT.to_owned(),
            description: "General coding agent".to_owned(),
            mode: AgentMode::Primary,
            models: vec![ModelSelection { model: LOCAL_ECHO.to_owned(), variant: None }],
        }],
        sandbox: None,
        mcp_servers: Vec::new(),
    }
}

/// Why a selection cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("unknown agent `{0}`")]
    UnknownAgent(String),
    #[error("`{0}` is not a model reference of the form `<provider>/<model id>`")]
    MalformedModel(String),
    #[error("unknown provider `{provider}` in model `{model}`")]
    UnknownProvider { provider: String, model: String },
    #[error("unknown model `{0}`")]
    UnknownModel(String),
}

/// Checks that `selection` names an agent and a model this snapshot knows. Local models must exist. A remote
/// provider's models are accepted whether listed or not (some servers list none, and OpenRouter lists
/// thousands), and whether the provider is connected or not: connecting it later makes the selection runnable,
/// and a run on an unavailable model fails over along its chain with a clear error.
pub fn validate_selection(snapshot: &RuntimeSnapshot, selection: &RunSelection) -> Result<(), SelectionError> {
    if !snapshot.agents.iter().any(|agent| agent.agent == selection.agent) {
        return Err(SelectionError::UnknownAgent(selection.agent.clone()));
    }
    let model = &selection.model.model;
    let Some((provider, model_id)) = model.split_once('/') else {
        return Err(SelectionError::MalformedModel(model.clone()));
    };
    if provider.is_empty() || model_id.is_empty() {
        return Err(SelectionError::MalformedModel(model.clone()));
    }
    let Some(provider_info) = snapshot.providers.iter().find(|info| info.provider_id == provider) else {
        return Err(SelectionError::UnknownProvider { provider: provider.to_owned(), model: model.clone() });
    };
    let listed = snapshot.models.iter().any(|info| &info.model == model);
    if !listed && provider_info.kind == ProviderKind::Local {
        return Err(SelectionError::UnknownModel(model.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(agent: &str, model: &str) -> RunSelection {
        RunSelection { agent: agent.into(), model: ModelSelection { model: model.into(), variant: None }, preset: None }
    }

    #[test]
    fn builtin_lists_are_sorted() {
        let snapshot = builtin_snapshot(1);
        let ids: Vec<_> = snapshot.providers.iter().map(|p| p.provider_id.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn configured_models_override_windows_and_prices_and_remote_ones_are_listed() {
        let models: crate::config::ModelsConfig = toml::from_str(
            r#"
            ["local/scripted"]
            context_window = 900
            ["openai/gpt-x"]
            context_window = 1000
            pricing = { input_per_million_usd = 1.0, output_per_million_usd = 2.0 }
            ["local/nope"]
            context_window = 5
            "#,
        )
        .unwrap();
        let mut snapshot = builtin_snapshot(1);
        apply_model_config(&mut snapshot, &models);
        let info = |model: &str| snapshot.models.iter().find(|info| info.model == model).cloned();
        assert_eq!(info(LOCAL_SCRIPTED).unwrap().context_window, Some(900));
        let remote = info("openai/gpt-x").unwrap();
        assert_eq!(remote.context_window, Some(1000));
        assert_eq!(remote.pricing.unwrap().output_per_million_usd, 2.0);
        assert!(info("local/nope").is_none(), "local models are not invented");
        let ids: Vec<_> = snapshot.models.iter().map(|info| info.model.clone()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn selections_are_checked_against_the_snapshot() {
        let snapshot = builtin_snapshot(1);
        assert_eq!(validate_selection(&snapshot, &selection("default", "local/echo")), Ok(()));
        assert_eq!(validate_selection(&snapshot, &selection("default", "openai/gpt-4o")), Ok(()));
        assert!(matches!(
            validate_selection(&snapshot, &selection("nobody", "local/echo")),
            Err(SelectionError::UnknownAgent(_))
        ));
        assert!(matches!(
            validate_selection(&snapshot, &selection("default", "local/nope")),
            Err(SelectionError::UnknownModel(_))
        ));
        assert!(matches!(
            validate_selection(&snapshot, &selection("default", "echo")),
            Err(SelectionError::MalformedModel(_))
        ));
        assert!(matches!(
            validate_selection(&snapshot, &selection("default", "acme/x")),
            Err(SelectionError::UnknownProvider { .. })
        ));
    }
}
