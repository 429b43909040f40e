//! `troupe models`, `troupe agents` and `troupe providers`: what the daemon can run, from one
//! `runtime.snapshot.get`.
//!
//! The snapshot does not carry a provider's base URL. When the daemon's own `providers.json` is readable here
//! (the data directory of `--data-dir`/`TROUPE_HOME`, on this machine) and its connection has the generation the
//! snapshot reports, the URL (or the local provider's script) is read from its non-secret settings; otherwise it
//! is shown as unknown rather than guessed. Credentials in that file are never printed: only `setup_values` are
//! looked at.

use std::collections::BTreeMap;

use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::Empty;
use troupe_protocol::types::runtime::{AgentInfo, AgentMode, AuthState, ProviderInfo, ProviderKind, RuntimeSnapshot};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::provider_store::ProviderStore;

use crate::cli_errors::explained;
use crate::client_args::ClientArgs;
use crate::commands::Connected;
use crate::inspect_cmd::{first_line, header_table};
use crate::output::{pretty_json, text};
use crate::selection::{Usable, usable};
use crate::style::{Style, clean};

/// Which list to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    Models,
    Agents,
    Providers,
}

/// Reads the runtime snapshot.
pub async fn snapshot(client: &impl ClientProtocol) -> anyhow::Result<RuntimeSnapshot> {
    Ok(client.runtime_snapshot_get(Empty {}).await.map_err(explained)?.snapshot)
}

/// `troupe models`, `troupe agents`, `troupe providers`.
pub async fn catalog(args: &ClientArgs, listing: Listing, json: bool) -> anyhow::Result<()> {
    let connection = args.connection();
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let snapshot = snapshot(&client).await?;
    client.close().await;
    let style = Style::stdout();
    match listing {
        Listing::Models if json => {
            // Each model as the snapshot has it, plus `usable`: whether a run on it can start now (see `usable`).
            let mut models = Vec::new();
            for model in &snapshot.models {
                let mut value = serde_json::to_value(model)?;
                value["usable"] = serde_json::json!(usable(&snapshot, model) == Usable::Yes);
                models.push(value);
            }
            pretty_json(&serde_json::json!({ "models": models }))
        }
        Listing::Agents if json => pretty_json(&serde_json::json!({ "agents": snapshot.agents })),
        Listing::Providers => {
            let endpoints = local_endpoints(args, &snapshot.providers);
            if json {
                // Each provider as the snapshot has it, plus `base_url`: from the daemon's `providers.json` (for
                // `local`, its script), null when unknown here.
                let mut providers = Vec::new();
                for provider in &snapshot.providers {
                    let mut value = serde_json::to_value(provider)?;
                    value["base_url"] = serde_json::json!(endpoints.get(&provider.provider_id));
                    providers.push(value);
                }
                return pretty_json(&serde_json::json!({ "providers": providers }));
            }
            text(&render_providers(&snapshot.providers, &endpoints, style));
            Ok(())
        }
        Listing::Models => {
            text(&render_models(&snapshot, style));
            Ok(())
        }
        Listing::Agents => {
            text(&render_agents(&snapshot.agents, style));
            Ok(())
        }
    }
}

/// Each connected provider's base URL (or script), from the data directory's `providers.json`, for the
/// connections whose generation matches the snapshot's (so it is this daemon's file, as it is now).
fn local_endpoints(args: &ClientArgs, providers: &[ProviderInfo]) -> BTreeMap<String, String> {
    let Ok(data_dir) = DataDir::resolve(args.data_dir.clone()) else {
        return BTreeMap::new();
    };
    let Ok(store) = ProviderStore::open(data_dir.root()) else {
        return BTreeMap::new();
    };
    let mut endpoints = BTreeMap::new();
    for provider in providers.iter().filter(|provider| provider.connected) {
        let Some(stored) = store.contents.connections.get(&provider.provider_id) else { continue };
        if stored.generation != provider.generation {
            continue;
        }
        let endpoint = stored.setup_values.get("base_url").or_else(|| stored.setup_values.get("script"));
        let endpoint = match (endpoint, &provider.kind) {
            (Some(endpoint), _) => clean(endpoint),
            (None, ProviderKind::Openai) => troupe_runtime::model::openai::OPENAI_DEFAULT_BASE_URL.to_owned(),
            (None, ProviderKind::Anthropic) => troupe_runtime::model::anthropic::ANTHROPIC_DEFAULT_BASE_URL.to_owned(),
            (None, ProviderKind::Local) => continue,
        };
        endpoints.insert(provider.provider_id.clone(), endpoint);
    }
    endpoints
}

/// `troupe models`: model, provider, usable (or why not), context window, name.
pub fn render_models(snapshot: &RuntimeSnapshot, style: Style) -> String {
    if snapshot.models.is_empty() {
        return "no models: connect a provider with `troupe connect`\n".to_owned();
    }
    let mut rows = vec![["MODEL", "PROVIDER", "USABLE", "CONTEXT", "NAME"].map(str::to_owned).to_vec()];
    let verdicts: Vec<Usable> = snapshot.models.iter().map(|model| usable(snapshot, model)).collect();
    for (model, verdict) in snapshot.models.iter().zip(&verdicts) {
        let usable = match verdict {
            Usable::Yes => "yes",
            Usable::NotConnected => "no (not connected)",
            Usable::NoScript => "no (no script)",
        };
        rows.push(vec![
            clean(&model.model),
            clean(&model.provider_id),
            usable.to_owned(),
            model.context_window.map_or("-".to_owned(), |tokens| format!("{tokens}")),
            first_line(&model.name, 60),
        ]);
    }
    let mut text = header_table(&rows, style);
    if verdicts.contains(&Usable::NotConnected) {
        text.push_str("a model of a provider that is not connected cannot run: `troupe connect PROVIDER`\n");
    }
    if verdicts.contains(&Usable::NoScript) {
        text.push_str("local/scripted plays a script file: `troupe connect local --script FILE`\n");
    }
    text
}

/// `troupe agents`: agent, mode, model chain, description.
pub fn render_agents(agents: &[AgentInfo], style: Style) -> String {
    if agents.is_empty() {
        return "no agents\n".to_owned();
    }
    let mut rows = vec![["AGENT", "MODE", "MODELS", "DESCRIPTION"].map(str::to_owned).to_vec()];
    for agent in agents {
        let chain: Vec<String> = agent.models.iter().map(|model| clean(&model.model)).collect();
        let mode = match agent.mode {
            AgentMode::Primary => "primary",
            AgentMode::Subagent => "subagent",
            AgentMode::All => "all",
        };
        rows.push(vec![
            clean(&agent.agent),
            mode.to_owned(),
            if chain.is_empty() { "-".to_owned() } else { chain.join(" → ") },
            first_line(&agent.description, 80),
        ]);
    }
    header_table(&rows, style)
}

/// `troupe providers`: provider, kind, connected (and how), base URL.
pub fn render_providers(providers: &[ProviderInfo], endpoints: &BTreeMap<String, String>, style: Style) -> String {
    let mut rows = vec![["PROVIDER", "KIND", "CONNECTED", "BASE URL"].map(str::to_owned).to_vec()];
    for provider in providers {
        let kind = match provider.kind {
            ProviderKind::Local => "local",
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        };
        let connected = match (provider.connected, &provider.auth_state) {
            (true, AuthState::NotRequired) => "yes (no key needed)",
            (true, _) => "yes",
            (false, _) => "no",
        };
        let endpoint = match endpoints.get(&provider.provider_id) {
            Some(endpoint) => endpoint.clone(),
            None if provider.kind == ProviderKind::Local => "(built in)".to_owned(),
            None if provider.connected => "(unknown here)".to_owned(),
            None => "-".to_owned(),
        };
        rows.push(vec![clean(&provider.provider_id), kind.to_owned(), connected.to_owned(), endpoint]);
    }
    let mut text = header_table(&rows, style);
    if providers.iter().any(|provider| !provider.connected) {
        text.push_str(
            "connect one with `troupe connect PROVIDER` (e.g. `troupe connect openai --api-key-env OPENAI_API_KEY`)\n",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::common::ModelSelection;
    use troupe_protocol::types::runtime::ModelInfo;

    use super::*;

    fn provider(id: &str, kind: ProviderKind, connected: bool) -> ProviderInfo {
        ProviderInfo {
            provider_id: id.into(),
            name: id.into(),
            kind,
            connected,
            auth_state: if connected { AuthState::Configured } else { AuthState::Missing },
            generation: 1,
        }
    }

    #[test]
    fn models_say_whether_their_provider_is_connected() {
        let snapshot = RuntimeSnapshot {
            revision: 1,
            providers: vec![
                provider("local", ProviderKind::Local, true),
                provider("openai", ProviderKind::Openai, false),
            ],
            models: vec![
                ModelInfo {
                    model: "local/echo".into(),
                    name: "Echo".into(),
                    provider_id: "local".into(),
                    context_window: None,
                    pricing: None,
                },
                ModelInfo {
                    model: "openai/gpt".into(),
                    name: "GPT \u{1b}[2J".into(),
                    provider_id: "openai".into(),
                    context_window: Some(128000),
                    pricing: None,
                },
            ],
            agents: Vec::new(),
            sandbox: None,
            mcp_servers: Vec::new(),
        };
        let text = render_models(&snapshot, Style::plain());
        assert!(text.contains("local/echo  local     yes                 -        Echo\n"), "{text}");
        assert!(text.contains("openai/gpt  openai    no (not connected)  128000   GPT\n"), "{text}");
        assert!(text.contains("troupe connect PROVIDER"), "{text}");
    }

    #[test]
    fn local_scripted_is_not_usable_without_a_local_connection() {
        let mut snapshot = troupe_runtime::catalog::builtin_snapshot(1);
        let text = render_models(&snapshot, Style::plain());
        assert!(text.contains("local/echo      local     yes "), "{text}");
        assert!(text.contains("local/scripted  local     no (no script) "), "{text}");
        assert!(text.contains("troupe connect local --script FILE"), "{text}");
        let local = snapshot.providers.iter_mut().find(|provider| provider.provider_id == "local").unwrap();
        local.generation = 2;
        let text = render_models(&snapshot, Style::plain());
        assert!(text.contains("local/scripted  local     yes "), "{text}");
        assert!(!text.contains("--script"), "{text}");
    }

    #[test]
    fn agents_show_their_chain_and_providers_their_endpoint() {
        let agent = AgentInfo {
            agent: "coder".into(),
            description: "Writes code".into(),
            mode: AgentMode::Primary,
            models: vec![
                ModelSelection { model: "openai/a".into(), variant: None },
                ModelSelection { model: "local/echo".into(), variant: None },
            ],
        };
        let text = render_agents(&[agent], Style::plain());
        assert!(text.contains("coder  primary  openai/a → local/echo  Writes code"), "{text}");
        let endpoints = BTreeMap::from([("openai".to_owned(), "http://lan:11434/v1".to_owned())]);
        let text = render_providers(
            &[provider("anthropic", ProviderKind::Anthropic, true), provider("openai", ProviderKind::Openai, true)],
            &endpoints,
            Style::plain(),
        );
        assert!(text.contains("anthropic  anthropic  yes        (unknown here)"), "{text}");
        assert!(text.contains("openai     openai     yes        http://lan:11434/v1"), "{text}");
    }
}
