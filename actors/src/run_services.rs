//! What runs share: the model router (which provider serves `<provider>/<model>`), the tool registry and its
//! limits, and the retry policy.
//!
//! The router is updated by the `RuntimeActor` when providers are connected or disconnected, and read by every
//! run at each model request, so a run started before a connection change uses the provider in place when it
//! asks.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use troupe_protocol::types::events::{EventPayload, UsagePurpose};
use troupe_protocol::types::runtime::{ModelPricing, ProviderKind};
use troupe_runtime::config::PermissionsConfig;
use troupe_runtime::model::local::{EchoModel, ScriptedModel};
use troupe_runtime::model::{ErrorStage, ModelError, ModelErrorKind, ModelProvider, RetryPolicy, TokenUsage};
use troupe_runtime::policy::{PermissionRule, Policy};
use troupe_runtime::redact::Secrets;
use troupe_runtime::sandbox::Sandbox;
use troupe_runtime::tools::{SkillTool, ToolLimits, ToolRegistry};

use crate::error::EngineError;

pub struct RunServices {
    pub models: ModelRouter,
    pub tools: ToolRegistry,
    pub tool_limits: ToolLimits,
    pub retry: RetryPolicy,
    /// The permission rules of `config.toml`, and each agent's own.
    pub permissions: PermissionsConfig,
    pub agent_rules: HashMap<String, Vec<PermissionRule>>,
    /// The agents `config.toml` defines, each naming its own models. The built-in `default` agent's chain is only
    /// the offline fallback, so a child delegated to it runs on its parent's model instead (`run_actor/delegate.rs`).
    pub configured_agents: HashSet<String>,
    /// The daemon's data directory: writing into it is a hard deny.
    pub data_dir: PathBuf,
    /// The kernel's bounds on tool processes and the denied paths file tools check by identity.
    pub sandbox: Arc<Sandbox>,
    /// The daemon token and connected providers' keys, masked in tool output before it is stored or sent.
    pub secrets: Secrets,
    /// What file tools replaced, for `session.diff` and `session.undo` (`troupe_runtime::changes`).
    pub changes: Arc<troupe_runtime::changes::ChangeStore>,
    /// The session of each active or recently ended run; each run actor registers itself here.
    pub runs: crate::run_registry::RunRegistry,
    /// The configured plugins' statuses and the tools of the ready ones (`plugin_host`).
    pub plugins: Arc<crate::plugin_tools::PluginDirectory>,
    /// The `[mcp_servers]`: their statuses and the ready ones' tools (`troupe_runtime::mcp`).
    pub mcp: Arc<troupe_runtime::mcp::McpServers>,
    /// `[delegation]`: how deep trees grow and how many children a run has at once (`run_actor/delegate.rs`).
    pub delegation: troupe_runtime::config::DelegationConfig,
    /// `[compaction]`: whether runs compact by themselves, and the answer reserve (`run_actor/compaction.rs`).
    pub compaction: troupe_runtime::config::CompactionConfig,
    /// `[titles]`: whether a root session's first run asks its model for a title (`session_actor/title.rs`).
    pub titles: troupe_runtime::config::TitlesConfig,
    /// The daemon's metrics (`troupe_runtime::metrics`): runs, model requests and tool calls count here, and the
    /// session actors' logs reach it through the run context they are given.
    pub metrics: troupe_runtime::metrics::Metrics,
    /// Where session logs are replicated before an append is durable (the cluster's JetStream); `None` on a single
    /// node. The session actors reach it, as the metrics, through the run context they are given.
    pub log_replica: Option<Arc<dyn troupe_runtime::event_log::LogReplica>>,
    /// Where the live output of this node's running tools goes to other nodes, and theirs comes from (a cluster);
    /// `None` on a single node.
    pub live_output: Option<Arc<dyn troupe_runtime::live_output_share::LiveOutputShare>>,
    /// Policies built so far, by agent.
    policies: RwLock<HashMap<String, Arc<Policy>>>,
}

impl RunServices {
    pub fn new(
        sandbox: Arc<Sandbox>,
        secrets: Secrets,
        permissions: PermissionsConfig,
        agent_rules: HashMap<String, Vec<PermissionRule>>,
    ) -> Self {
        // Hard denies compare resolved paths: the sandbox holds the data directory in its canonical form.
        let data_dir = sandbox.data_dir().to_path_buf();
        let mut tools = ToolRegistry::builtin();
        tools.register(Box::new(SkillTool::new(data_dir.clone())));
        RunServices {
            models: ModelRouter::new(),
            tools,
            tool_limits: ToolLimits::default(),
            retry: RetryPolicy::default(),
            permissions,
            agent_rules,
            configured_agents: HashSet::new(),
            changes: Arc::new(troupe_runtime::changes::ChangeStore::new(&data_dir, Default::default())),
            data_dir,
            sandbox,
            secrets,
            runs: Default::default(),
            plugins: Default::default(),
            mcp: Default::default(),
            delegation: Default::default(),
            compaction: Default::default(),
            titles: Default::default(),
            metrics: Default::default(),
            log_replica: None,
            live_output: None,
            policies: RwLock::new(HashMap::new()),
        }
    }

    /// The tool a run calls `name`: a built-in one, a ready plugin's (`plugin__<plugin>__<tool>`) or a ready MCP
    /// server's (`mcp__<server>__<tool>`).
    pub fn tool(&self, name: &str) -> Option<crate::plugin_tools::ToolRef<'_>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(crate::plugin_tools::ToolRef::Builtin(tool));
        }
        if let Some(tool) = self.plugins.tool(name) {
            return Some(crate::plugin_tools::ToolRef::Plugin(tool));
        }
        self.mcp.tool(name).map(crate::plugin_tools::ToolRef::Mcp)
    }

    /// What a run offers the model: the built-in tools, then the ready plugins' tools, then the ready MCP servers',
    /// each in name order.
    pub fn tool_definitions(&self) -> Vec<troupe_runtime::tools::ToolDefinition> {
        let mut definitions = self.tools.specs();
        definitions.extend(self.plugins.tool_definitions());
        definitions.extend(self.mcp.tool_definitions());
        definitions
    }

    /// The tools as `tools.list` describes them: built-in, then the ready plugins' and MCP servers' (which stream no
    /// output: theirs arrives with the result), each in name order.
    pub fn tool_descriptors(&self) -> Vec<troupe_protocol::types::tool_output::ToolDescriptor> {
        let mut descriptors = self.tools.descriptors();
        let extra = self.plugins.tool_definitions().into_iter().chain(self.mcp.tool_definitions());
        descriptors.extend(extra.map(|definition| troupe_protocol::types::tool_output::ToolDescriptor {
            name: definition.name,
            description: definition.description,
            output_channels: Vec::new(),
        }));
        descriptors
    }

    /// The policy that governs runs of `agent` (built once per agent).
    pub fn policy_for(&self, agent: &str) -> Result<Arc<Policy>, EngineError> {
        if let Some(policy) = self.policies.read().get(agent) {
            return Ok(policy.clone());
        }
        let rules = self.agent_rules.get(agent).map(Vec::as_slice).unwrap_or_default();
        let policy = Policy::new(&self.permissions, rules, &self.data_dir)
            .map_err(|error| EngineError::Internal { detail: format!("the permission rules are invalid: {error}") })?;
        let policy = Arc::new(policy);
        self.policies.write().insert(agent.to_owned(), policy.clone());
        Ok(policy)
    }
}

/// Maps `<provider>/<model id>` to the provider that serves it.
pub struct ModelRouter {
    echo: Arc<EchoModel>,
    /// `local/scripted`, once the local provider was given a script.
    scripted: RwLock<Option<Arc<ScriptedModel>>>,
    /// Connected remote providers by provider id (`openai`, `anthropic`).
    remote: RwLock<HashMap<String, Arc<dyn ModelProvider>>>,
    /// Known prices by full model name.
    pricing: RwLock<HashMap<String, ModelPricing>>,
    /// `[models]` of `config.toml`: context windows and prices that override the catalog's.
    configured: RwLock<troupe_runtime::config::ModelsConfig>,
}

impl ModelRouter {
    pub fn new() -> Self {
        ModelRouter {
            echo: Arc::new(EchoModel),
            scripted: RwLock::new(None),
            remote: RwLock::new(HashMap::new()),
            pricing: RwLock::new(HashMap::new()),
            configured: RwLock::new(Default::default()),
        }
    }

    /// Installs `[models]`: their context windows and prices win over the catalog's and the built-in table's.
    pub fn configure(&self, models: troupe_runtime::config::ModelsConfig) {
        *self.configured.write() = models;
    }

    /// `[models]` as configured, for the runtime snapshot.
    pub fn configured(&self) -> troupe_runtime::config::ModelsConfig {
        self.configured.read().clone()
    }

    /// Whether `model` is sent attached images and PDFs as files (`[models."<model>"] attachments`, on unless set
    /// to false); a model that is not gets a text note for each instead (`local/*` models always do).
    pub fn takes_files(&self, model: &str) -> bool {
        self.configured.read().get(model).and_then(|config| config.attachments).unwrap_or(true)
    }

    /// The context window of `model`, when known: configured (`[models."<model>"] context_window`), else from
    /// the built-in table of well-known models.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        let configured = self.configured.read().get(model).and_then(|config| config.context_window);
        configured.or_else(|| troupe_runtime::model::context_window::builtin_context_window(model))
    }

    pub fn set_scripted(&self, scripted: Option<Arc<ScriptedModel>>) {
        *self.scripted.write() = scripted;
    }

    pub fn set_remote(&self, provider_id: &str, provider: Option<Arc<dyn ModelProvider>>) {
        let mut remote = self.remote.write();
        match provider {
            Some(provider) => remote.insert(provider_id.to_owned(), provider),
            None => remote.remove(provider_id),
        };
    }

    pub fn set_pricing(&self, model: &str, pricing: ModelPricing) {
        self.pricing.write().insert(model.to_owned(), pricing);
    }

    /// The provider of `model` and the model id to send it.
    pub fn resolve(&self, model: &str) -> Result<(Arc<dyn ModelProvider>, String), ModelError> {
        let not_available =
            |message: String| ModelError::new(ModelErrorKind::ModelNotFound, ErrorStage::Connect, message);
        let Some((provider_id, model_id)) = model.split_once('/') else {
            return Err(not_available(format!("`{model}` is not of the form <provider>/<model id>")));
        };
        let local = ProviderKind::of_provider_id(provider_id) == Some(ProviderKind::Local);
        let provider: Arc<dyn ModelProvider> = match (local, model_id) {
            (true, "echo") => self.echo.clone(),
            (true, "scripted") => match self.scripted.read().clone() {
                Some(scripted) => scripted,
                None => {
                    return Err(not_available(
                        "local/scripted has no script: connect the `local` provider with setup_values.script set \
                         to a script file"
                            .into(),
                    ));
                }
            },
            (true, _) => {
                return Err(not_available(format!("there is no local model `{model_id}`")));
            }
            (false, _) => match self.remote.read().get(provider_id) {
                Some(provider) => provider.clone(),
                None => {
                    return Err(ModelError::new(
                        ModelErrorKind::Auth,
                        ErrorStage::Connect,
                        format!("the provider `{provider_id}` is not connected; connect it with provider.connect"),
                    ));
                }
            },
        };
        Ok((provider, model_id.to_owned()))
    }

    /// The estimated cost of a turn, when the model's prices are known.
    pub fn estimate_cost_usd(&self, model: &str, usage: &TokenUsage) -> Option<f64> {
        let configured = self.configured.read().get(model).and_then(|config| config.pricing.as_ref().map(Into::into));
        // The `local` provider's models (echo, a script) run inside the daemon: they cost nothing, not "unknown".
        if configured.is_none() && model.split_once('/').is_some_and(|(provider, _)| provider == "local") {
            return Some(0.0);
        }
        let pricing = configured.or_else(|| self.pricing.read().get(model).cloned()).or_else(|| {
            let model_id = model.split_once('/').map_or(model, |(_, id)| id);
            troupe_runtime::model::pricing::builtin_pricing(model_id)
        })?;
        Some(troupe_runtime::model::pricing::estimate_cost_usd(&pricing, usage))
    }

    /// The `model_usage_recorded` of an attempt on `model` for `agent`, its cost estimated now.
    pub fn usage_recorded(
        &self,
        attempt_id: String,
        model: &str,
        agent: &str,
        tokens: &TokenUsage,
        purpose: UsagePurpose,
    ) -> EventPayload {
        EventPayload::ModelUsageRecorded {
            attempt_id,
            model: model.to_owned(),
            agent: agent.to_owned(),
            input_tokens: tokens.input_tokens,
            output_tokens: tokens.output_tokens,
            reasoning_tokens: tokens.reasoning_tokens,
            cache_read_tokens: tokens.cache_read_tokens,
            cache_write_tokens: tokens.cache_write_tokens,
            estimated_cost_usd: self.estimate_cost_usd(model, tokens),
            purpose,
        }
    }
}

impl Default for ModelRouter {
    fn default() -> Self {
        Self::new()
    }
}
