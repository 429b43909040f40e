//! Which agent and model a run or a new session uses, decided by the CLI before anything is created. The
//! first that applies:
//!
//! 1. `--model` (with `--agent`, else the session's agent, else `default`);
//! 2. `--agent`: the first model of its chain;
//! 3. the session's last selection (what its latest `run_started` asked for: the requested model, so a sticky
//!    fallback stays a fallback, noted on each run, and `--reset-fallback` can go back);
//! 4. the session's creation selection (`troupe create --model`);
//! 5. for a new session, the `default` agent's first model, as in 2.
//!
//! Nothing is switched here. A model named with `--model` must be able to run. Otherwise, when the chosen model
//! cannot run but a later model of its agent's chain can, the selection goes to the daemon unchanged: the run falls
//! back along the chain and records it (`model_fallback`, which every client shows). A selection none of whose
//! models can run is refused here, with the `troupe connect` command that fixes it, so a failed attempt never
//! leaves an empty session or a run that could only fail behind.

use anyhow::{anyhow, bail};
use troupe_protocol::client::ClientProtocol;
use troupe_protocol::types::common::{Empty, ModelSelection, RunSelection, SessionMeta};
use troupe_protocol::types::runtime::{ModelInfo, ProviderKind, RuntimeSnapshot};
use troupe_runtime::catalog::{DEFAULT_AGENT, LOCAL_SCRIPTED};
use troupe_runtime::runnable::selection_blocked;

use crate::cli_errors::explained;

/// What the person asked for on the command line (`--agent`, `--model`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SelectionFlags {
    /// The agent; its first model is used unless --model is given.
    #[arg(long)]
    pub agent: Option<String>,
    /// `<provider>/<model>`, e.g. local/echo or openai/gpt-4o.
    #[arg(long)]
    pub model: Option<String>,
}

/// What a session already knows about its selection.
#[derive(Clone, Debug, Default)]
pub struct SessionSelections {
    pub last: Option<RunSelection>,
    pub creation: Option<RunSelection>,
}

impl SessionSelections {
    pub fn of(session: &SessionMeta, last: Option<RunSelection>) -> Self {
        SessionSelections { last, creation: Some(session.creation_selection.clone()) }
    }
}

/// Fetches the runtime snapshot and resolves the selection (see the module docs).
pub async fn resolve(
    client: &impl ClientProtocol,
    flags: &SelectionFlags,
    session: &SessionSelections,
) -> anyhow::Result<RunSelection> {
    let snapshot = client.runtime_snapshot_get(Empty {}).await.map_err(explained)?.snapshot;
    let selection = decide(&snapshot, flags, session)?;
    if let Some(note) = flags.model.as_deref().and_then(|model| unlisted_note(&snapshot, model)) {
        eprintln!("{note}");
    }
    Ok(selection)
}

/// A note for a model a connected remote provider's catalog does not list: the run starts (the vendor may serve
/// models the catalog does not know), but a typo would only show when the vendor refuses it mid-run.
pub fn unlisted_note(snapshot: &RuntimeSnapshot, model: &str) -> Option<String> {
    let (provider_id, _) = model.split_once('/')?;
    let provider = snapshot.providers.iter().find(|provider| provider.provider_id == provider_id)?;
    if provider.kind == ProviderKind::Local || snapshot.models.iter().any(|info| info.model == model) {
        return None;
    }
    let listed: Vec<&str> = snapshot
        .models
        .iter()
        .filter(|info| info.provider_id == provider_id)
        .map(|info| info.model.as_str())
        .take(8)
        .collect();
    let known = if listed.is_empty() { String::new() } else { format!(" (it lists {})", listed.join(", ")) };
    Some(format!(
        "note: {} is not in {provider_id}'s catalog{}; the provider is asked for it as written (`troupe models` \
         lists the known ones)",
        crate::style::clean(model),
        crate::style::clean(&known)
    ))
}

/// The precedence, without I/O.
pub fn decide(
    snapshot: &RuntimeSnapshot,
    flags: &SelectionFlags,
    session: &SessionSelections,
) -> anyhow::Result<RunSelection> {
    let known = session.last.as_ref().or(session.creation.as_ref());
    // The session's own choice, as it is: the daemon's run falls back along its agent's chain if it must.
    if flags.agent.is_none()
        && flags.model.is_none()
        && let Some(known) = known
    {
        refuse_blocked(snapshot, known).map_err(|error| anyhow!("this session's model: {error}"))?;
        return Ok(known.clone());
    }
    let agent_name = flags
        .agent
        .clone()
        .or_else(|| known.map(|selection| selection.agent.clone()))
        .unwrap_or_else(|| DEFAULT_AGENT.to_owned());
    let Some(agent) = snapshot.agents.iter().find(|agent| agent.agent == agent_name) else {
        let names: Vec<&str> = snapshot.agents.iter().map(|agent| agent.agent.as_str()).collect();
        bail!(
            "no agent {agent_name:?} (the daemon knows: {})\n  hint: choose one with --agent; agents are defined in \
             config.toml",
            names.join(", ")
        );
    };
    let model = if let Some(model) = &flags.model {
        let model = ModelSelection { model: model.clone(), variant: None };
        check_model(snapshot, &model.model)?;
        model
    } else if let Some(first) = agent.models.first() {
        first.clone()
    } else {
        match known {
            Some(selection) => selection.model.clone(),
            None => bail!(
                "agent {agent_name:?} has no models\n  hint: choose one with --model PROVIDER/MODEL, or give the \
                 agent `models = [...]` in config.toml"
            ),
        }
    };
    let selection = RunSelection { agent: agent_name, model, preset: None };
    refuse_blocked(snapshot, &selection)?;
    Ok(selection)
}

/// Refuses a selection none of whose models can run now (its model, then the rest of its agent's chain), saying
/// why its model cannot. One that can fall back to a model that runs is the daemon's to run: it records the
/// fallback.
fn refuse_blocked(snapshot: &RuntimeSnapshot, selection: &RunSelection) -> anyhow::Result<()> {
    let Some(blocked) = selection_blocked(snapshot, selection, None) else {
        return Ok(());
    };
    check_model(snapshot, &selection.model.model)?;
    bail!("{}", crate::cli_errors::speak_cli(&blocked.detail))
}

/// Whether a run on a model can start now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usable {
    Yes,
    /// Its provider is not connected.
    NotConnected,
    /// `local/scripted` while the `local` provider has no script.
    NoScript,
}

/// Whether `model` can run on the daemon of `snapshot`. The built-in `local` provider is always connected, but
/// `local/scripted` plays the script of a `local` connection: the snapshot lists it either way, and only the
/// provider's generation tells (0 is the built-in provider alone; `troupe connect local --script` makes one, and
/// `troupe disconnect local` returns to 0). The one check behind `troupe models`' USABLE column, the refusals of
/// [`decide`] and the TUI's model picker.
pub fn usable(snapshot: &RuntimeSnapshot, model: &ModelInfo) -> Usable {
    let Some(provider) = snapshot.providers.iter().find(|provider| provider.provider_id == model.provider_id) else {
        return Usable::NotConnected;
    };
    if !provider.connected {
        Usable::NotConnected
    } else if model.model == LOCAL_SCRIPTED && provider.generation == 0 {
        Usable::NoScript
    } else {
        Usable::Yes
    }
}

/// Refuses a model that cannot run now: an unknown provider or local model, a provider that is not connected, or
/// `local/scripted` without a script. A model the catalog lists is judged by [`usable`], the very check behind
/// `troupe models`' USABLE column, so the two never disagree; a remote provider may run models its catalog does
/// not list, so for those only the connection counts.
fn check_model(snapshot: &RuntimeSnapshot, model: &str) -> anyhow::Result<()> {
    let Some((provider_id, _)) = model.split_once('/').filter(|(p, m)| !p.is_empty() && !m.is_empty()) else {
        bail!("{model:?} is not a model\n  hint: models are written PROVIDER/MODEL, e.g. --model openai/gpt-4o");
    };
    let Some(provider) = snapshot.providers.iter().find(|provider| provider.provider_id == provider_id) else {
        bail!("no provider {provider_id:?} (in {model})\n  hint: the providers are openai, anthropic and local");
    };
    let verdict = match snapshot.models.iter().find(|info| info.model == model) {
        Some(info) => usable(snapshot, info),
        None if provider.kind == ProviderKind::Local => {
            bail!("no model {model}\n  hint: the local models are local/echo and local/scripted")
        }
        None if provider.connected => Usable::Yes,
        None => Usable::NotConnected,
    };
    match verdict {
        Usable::Yes => Ok(()),
        Usable::NoScript => bail!(
            "{model} cannot run: it plays a script file, and the local provider has none (`troupe models` says \
             \"no (no script)\")\n  hint: connect one with `troupe connect local --script FILE`, or choose another \
             model with --model (local/echo needs nothing)"
        ),
        Usable::NotConnected => {
            let how = match provider.kind {
                ProviderKind::Anthropic => "`troupe connect anthropic --api-key-env ANTHROPIC_API_KEY`".to_owned(),
                _ => format!(
                    "`troupe connect {provider_id} --base-url https://api.openai.com/v1 --api-key-env OPENAI_API_KEY`"
                ),
            };
            bail!(
                "{model} needs provider {provider_id}, which is not connected\n  hint: connect it with {how}, or \
                 choose another model with --model"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_a_remote_catalog_does_not_list_gets_a_note_and_a_listed_or_local_one_none() {
        let mut snapshot = snapshot();
        let openai = snapshot.providers.iter_mut().find(|provider| provider.provider_id == "openai").unwrap();
        openai.connected = true;
        let mut gpt = snapshot.models.iter().find(|info| info.provider_id == "local").unwrap().clone();
        (gpt.provider_id, gpt.model) = ("openai".to_owned(), "openai/gpt-4o".to_owned());
        snapshot.models.push(gpt);
        let listed = "openai/gpt-4o".to_owned();
        assert_eq!(unlisted_note(&snapshot, &listed), None);
        assert_eq!(unlisted_note(&snapshot, "local/echo"), None);
        let note = unlisted_note(&snapshot, "openai/gtp-4o").expect("a note");
        assert!(note.starts_with("note: openai/gtp-4o is not in openai's catalog (it lists "), "{note}");
        assert!(note.contains(&listed), "{note}");
    }
    use troupe_protocol::types::runtime::{AgentInfo, AgentMode};

    /// The built-in catalog with a `local` script connected (generation 1), so `local/scripted` can run.
    fn snapshot() -> RuntimeSnapshot {
        let mut snapshot = troupe_runtime::catalog::builtin_snapshot(1);
        snapshot.providers.iter_mut().find(|provider| provider.provider_id == "local").unwrap().generation = 1;
        snapshot.agents.push(AgentInfo {
            agent: "coder".into(),
            description: String::new(),
            mode: AgentMode::Primary,
            models: vec![ModelSelection { model: "local/scripted".into(), variant: None }],
        });
        snapshot.agents.push(AgentInfo {
            agent: "bare".into(),
            description: String::new(),
            mode: AgentMode::Primary,
            models: Vec::new(),
        });
        snapshot
    }

    fn selection(agent: &str, model: &str) -> RunSelection {
        RunSelection { agent: agent.into(), model: ModelSelection { model: model.into(), variant: None }, preset: None }
    }

    fn flags(agent: Option<&str>, model: Option<&str>) -> SelectionFlags {
        SelectionFlags { agent: agent.map(str::to_owned), model: model.map(str::to_owned) }
    }

    #[test]
    fn the_model_flag_wins_then_the_agents_chain_then_the_session() {
        let snapshot = snapshot();
        let none = SessionSelections::default();
        let chosen = decide(&snapshot, &flags(Some("coder"), Some("local/echo")), &none).unwrap();
        assert_eq!(chosen, selection("coder", "local/echo"));
        let chosen = decide(&snapshot, &flags(Some("coder"), None), &none).unwrap();
        assert_eq!(chosen, selection("coder", "local/scripted"));
        let chosen = decide(&snapshot, &flags(None, None), &none).unwrap();
        assert_eq!(chosen, selection("default", "local/echo"));
        let session = SessionSelections {
            last: Some(selection("bare", "local/scripted")),
            creation: Some(selection("bare", "x/y")),
        };
        let chosen = decide(&snapshot, &flags(None, None), &session).unwrap();
        assert_eq!(chosen, selection("bare", "local/scripted"), "the last selection, for an agent without a chain");
        let session = SessionSelections { last: None, creation: Some(selection("bare", "local/scripted")) };
        assert_eq!(decide(&snapshot, &flags(None, None), &session).unwrap(), selection("bare", "local/scripted"));
        let session = SessionSelections { last: None, creation: Some(selection("default", "local/scripted")) };
        let chosen = decide(&snapshot, &flags(None, None), &session).unwrap();
        assert_eq!(chosen, selection("default", "local/scripted"), "troupe create --model is kept by later runs");
        let chosen = decide(&snapshot, &flags(Some("coder"), None), &session).unwrap();
        assert_eq!(chosen, selection("coder", "local/scripted"), "--agent names its chain");
    }

    #[test]
    fn an_unconnected_first_choice_falls_back_along_the_chain() {
        let mut snapshot = snapshot();
        snapshot.agents.push(AgentInfo {
            agent: "remote".into(),
            description: String::new(),
            mode: AgentMode::Primary,
            models: vec![
                ModelSelection { model: "openai/gpt-4o".into(), variant: None },
                ModelSelection { model: "local/echo".into(), variant: None },
            ],
        });
        let none = SessionSelections::default();
        let chosen = decide(&snapshot, &flags(Some("remote"), None), &none).unwrap();
        assert_eq!(chosen, selection("remote", "openai/gpt-4o"), "the daemon falls back, and records it");
        let stale = SessionSelections { last: Some(selection("remote", "openai/gpt-4o")), creation: None };
        let chosen = decide(&snapshot, &flags(None, None), &stale).unwrap();
        assert_eq!(chosen, selection("remote", "openai/gpt-4o"), "the session's model is kept, not switched");
        // Off its agent's chain, nothing can take over: refused, with the fix.
        let off_chain = SessionSelections { last: Some(selection("default", "openai/gpt-4o")), creation: None };
        let error = decide(&snapshot, &flags(None, None), &off_chain).unwrap_err().to_string();
        assert!(error.starts_with("this session's model: openai/gpt-4o needs provider openai"), "{error}");
        assert!(error.contains("troupe connect openai --base-url") && error.contains("--model"), "{error}");
    }

    #[test]
    fn local_scripted_without_a_script_is_refused_as_troupe_models_says() {
        let mut snapshot = snapshot();
        snapshot.providers.iter_mut().find(|provider| provider.provider_id == "local").unwrap().generation = 0;
        let none = SessionSelections::default();
        let error = decide(&snapshot, &flags(None, Some("local/scripted")), &none).unwrap_err().to_string();
        assert!(error.contains("no (no script)") && error.contains("troupe connect local --script FILE"), "{error}");
        // `troupe models` agrees: the same model is listed as not usable.
        let info = snapshot.models.iter().find(|info| info.model == "local/scripted").unwrap();
        assert_eq!(usable(&snapshot, info), Usable::NoScript);
        let error = decide(&snapshot, &flags(Some("coder"), None), &none).unwrap_err().to_string();
        assert!(error.contains("troupe connect local --script FILE"), "a chain of only local/scripted: {error}");
        // A session created on local/scripted whose script went away is refused, not moved to another model.
        let session = SessionSelections { last: Some(selection("default", "local/scripted")), creation: None };
        let error = decide(&snapshot, &flags(None, None), &session).unwrap_err().to_string();
        assert!(error.contains("this session's model: local/scripted cannot run"), "{error}");
        assert_eq!(
            decide(&snapshot, &flags(None, Some("local/echo")), &none).unwrap(),
            selection("default", "local/echo")
        );
    }

    #[test]
    fn an_unconnected_provider_or_unknown_agent_is_refused_with_the_fix() {
        let snapshot = snapshot();
        let none = SessionSelections::default();
        let error = decide(&snapshot, &flags(None, Some("openai/gpt-4o")), &none).unwrap_err().to_string();
        assert!(error.contains("not connected") && error.contains("troupe connect openai --base-url"), "{error}");
        let error = decide(&snapshot, &flags(Some("nosuch"), None), &none).unwrap_err().to_string();
        assert!(error.contains("no agent \"nosuch\"") && error.contains("coder"), "{error}");
        let error = decide(&snapshot, &flags(Some("bare"), None), &none).unwrap_err().to_string();
        assert!(error.contains("--model"), "{error}");
    }
}
