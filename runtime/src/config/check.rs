//! `check_config`: what is wrong with a data directory's configuration, as the daemon would see it at start.
//!
//! Errors are what the loader refuses (the daemon does not start). Warnings are what it accepts but is likely a
//! mistake: an agent whose chain names a provider that does not exist, a local model that does not exist, a
//! remote provider that is not connected or did not list the model, a `[models."p/m"]` entry no provider can use,
//! the same model twice in one chain. The daemon logs them at start and `troupe config check` prints them.
//!
//! Messages quote names from the file (agents, models), stripped of terminal controls, never other file text.

use std::collections::BTreeMap;
use std::path::Path;

use troupe_protocol::diagnostic::strip_terminal_controls;
use troupe_protocol::types::runtime::{ProviderKind, RuntimeSnapshot};

use crate::catalog::{apply_model_config, build_snapshot};
use crate::data_dir::{Consequence, DataDir, LayoutFile, Misplaced};
use crate::error::RuntimeError;
use crate::provider_store::{ProviderStore, StoredConnection};

use super::Config;

/// How bad a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemSeverity {
    /// The daemon refuses to start with it.
    Error,
    /// Accepted, but probably not what was meant.
    Warning,
}

impl ProblemSeverity {
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemSeverity::Error => "error",
            ProblemSeverity::Warning => "warning",
        }
    }
}

/// One thing wrong with the configuration: where (a file, a position or a key in it) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    pub severity: ProblemSeverity,
    pub location: String,
    pub message: String,
}

/// The problems of `data_dir`'s `config.toml` and `providers.json`, errors first. Reads both files (blocking).
/// Every error of `config.toml` is listed at once (see [`load_listing_errors`]); warnings need a loaded file.
pub fn check_config(data_dir: &DataDir) -> Vec<ConfigProblem> {
    let config_path = data_dir.config_path();
    let misplaced = data_dir.misplaced_files();
    let mut problems: Vec<ConfigProblem> = misplaced.iter().map(misplaced_problem).collect();
    // A config.toml that is a directory is read as the daemon reads it: as no file, the defaults.
    let config = if misplaced.iter().any(|misplaced| misplaced.file == LayoutFile::Config) {
        Config::default()
    } else {
        match load_listing_errors(&config_path) {
            Ok(config) => config,
            Err(errors) => {
                problems.extend(errors);
                return problems;
            }
        }
    };
    let connections = match ProviderStore::open(data_dir.root()) {
        Ok(store) => store.contents.connections.clone(),
        Err(error) => {
            let path = data_dir.root().join(crate::provider_store::PROVIDERS_FILE_NAME);
            problems.push(error_problem(&path, error));
            return problems;
        }
    };
    problems.extend(config_warnings(&config, &connections, &config_path));
    problems.sort_by_key(|problem| problem.severity != ProblemSeverity::Error);
    problems
}

/// A file of the data directory that is not a file, as the daemon reports it at start: an error when the daemon
/// refuses to start over it, a warning when it runs without it.
fn misplaced_problem(misplaced: &Misplaced) -> ConfigProblem {
    let severity = match misplaced.file.consequence() {
        Consequence::Refuse | Consequence::RefuseUnlessTokenFromEnvironment => ProblemSeverity::Error,
        Consequence::RunWithout(_) => ProblemSeverity::Warning,
    };
    ConfigProblem {
        severity,
        location: misplaced.path.display().to_string(),
        message: strip_terminal_controls(&misplaced.explanation()),
    }
}

/// How many refused keys [`load_listing_errors`] reports before it stops looking (a file of nothing but typos).
const MAX_KEY_ERRORS: usize = 50;

/// Loads `path` as the daemon does, but on failure lists every error it can find rather than the first:
/// - a TOML syntax error stops there (what follows cannot be read reliably);
/// - a key the loader refuses (unknown, or a value of the wrong type) is reported with its position, and the
///   file is read again without that entry (its lines blanked, or its whole table for a table header), to find
///   the next one;
/// - once every entry is accepted, every range and form problem of every section is listed.
pub fn load_listing_errors(path: &Path) -> Result<Config, Vec<ConfigProblem>> {
    let mut text = match super::read_text(path) {
        Ok(Some(text)) => text,
        Ok(None) => return Ok(Config::default()),
        Err(error) => return Err(vec![error_problem(path, error)]),
    };
    // Syntax first: the loader's own error, with its position.
    if text.parse::<toml::Table>().is_err() {
        return super::parse(&text, path).map_err(|error| vec![error_problem(path, error)]);
    }
    // Refused keys by position: the deserializer meets them in its own order, a person reads the file in order.
    let mut refused: Vec<((usize, usize), ConfigProblem)> = Vec::new();
    let in_file_order = |mut refused: Vec<((usize, usize), ConfigProblem)>| {
        refused.sort_by_key(|(position, _)| *position);
        refused.into_iter().map(|(_, problem)| problem).collect::<Vec<_>>()
    };
    loop {
        match toml::from_str::<Config>(&text) {
            Ok(mut config) => {
                let mut problems = in_file_order(refused);
                for detail in super::validation_problems(&mut config) {
                    problems
                        .push(error_problem(path, RuntimeError::ConfigInvalid { path: path.to_path_buf(), detail }));
                }
                return if problems.is_empty() { Ok(config) } else { Err(problems) };
            }
            Err(error) => {
                let position = super::error_position(&text, &error);
                refused.push((position, error_problem(path, super::syntax_error(&text, path, &error))));
                let Some(span) = error.span() else { return Err(in_file_order(refused)) };
                let last_line = super::line_and_column(&text, span.end.saturating_sub(1).max(span.start)).0;
                let without = blank_entry(&text, position.0, last_line);
                if refused.len() >= MAX_KEY_ERRORS || without == text || without.parse::<toml::Table>().is_err() {
                    return Err(in_file_order(refused));
                }
                text = without;
            }
        }
    }
}

/// `text` with lines `first..=last` (1-based) made empty, and when the first is a table header the lines of that
/// table too (up to the next header), so its keys do not fall into the table before it. Line numbers are kept.
fn blank_entry(text: &str, first: usize, last: usize) -> String {
    let is_header = |line: &str| line.trim_start().starts_with('[');
    let header = text.lines().nth(first - 1).is_some_and(is_header);
    let mut blanking = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if number == first {
            blanking = true;
        } else if blanking && number > last && (!header || is_header(line)) {
            // Past the entry; for a table, at the next header.
            blanking = false;
        }
        lines.push(if blanking { "" } else { line });
    }
    lines.join("\n")
}

/// The warnings of a loaded configuration against these provider connections; `path` names the file.
pub fn config_warnings(
    config: &Config,
    connections: &BTreeMap<String, StoredConnection>,
    path: &Path,
) -> Vec<ConfigProblem> {
    let mut snapshot = build_snapshot(0, connections, &config.agents);
    apply_model_config(&mut snapshot, &config.models);
    let mut problems = Vec::new();
    let mut warn = |key: String, message: String| {
        problems.push(ConfigProblem {
            severity: ProblemSeverity::Warning,
            location: format!("{}: {}", path.display(), strip_terminal_controls(&key)),
            message: strip_terminal_controls(&message),
        });
    };
    for (name, agent) in &config.agents {
        for (index, model) in agent.models.iter().enumerate() {
            let key = format!("agents.{name}.models[{index}]");
            if agent.models[..index].contains(model) {
                warn(key, format!("`{model}` is already earlier in the chain; falling back to it again cannot help"));
                continue;
            }
            if let Some(message) = model_problem(&snapshot, connections, model) {
                warn(key, message);
            }
        }
    }
    for model in config.models.keys() {
        let Some((provider_id, model_id)) = model.split_once('/') else { continue };
        let key = format!("models.\"{model}\"");
        match snapshot.providers.iter().find(|provider| provider.provider_id == provider_id) {
            None => {
                warn(key, format!("no provider is named `{provider_id}` ({}): no run can use it", known(&snapshot)))
            }
            Some(provider) if provider.kind == ProviderKind::Local && !listed(&snapshot, model) => {
                warn(key, format!("the local provider has no model `{model_id}` ({})", local_models(&snapshot)))
            }
            Some(_) => {}
        }
    }
    problems
}

/// Why a chain entry cannot run as it stands, if it cannot.
fn model_problem(
    snapshot: &RuntimeSnapshot,
    connections: &BTreeMap<String, StoredConnection>,
    model: &str,
) -> Option<String> {
    let (provider_id, model_id) = model.split_once('/')?;
    let Some(provider) = snapshot.providers.iter().find(|provider| provider.provider_id == provider_id) else {
        return Some(format!("`{model}`: no provider is named `{provider_id}` ({})", known(snapshot)));
    };
    if provider.kind == ProviderKind::Local {
        return (!listed(snapshot, model))
            .then(|| format!("`{model}`: the local provider has no model `{model_id}` ({})", local_models(snapshot)));
    }
    let Some(connection) = connections.get(provider_id) else {
        return Some(format!(
            "`{model}`: provider `{provider_id}` is not connected (connect it with `troupe connect {provider_id}`); \
             a run falls back past this model until then"
        ));
    };
    // A provider that listed nothing (some servers cannot list) says nothing either way.
    if !connection.models.is_empty() && !listed(snapshot, model) {
        return Some(format!(
            "`{model}`: provider `{provider_id}` did not list model `{model_id}` when it was connected; check the \
             spelling (`troupe models`), or add `[models.\"{model}\"]` if the server serves it unlisted"
        ));
    }
    None
}

fn listed(snapshot: &RuntimeSnapshot, model: &str) -> bool {
    snapshot.models.iter().any(|info| info.model == model)
}

fn known(snapshot: &RuntimeSnapshot) -> String {
    let names: Vec<&str> = snapshot.providers.iter().map(|provider| provider.provider_id.as_str()).collect();
    format!("known: {}", names.join(", "))
}

fn local_models(snapshot: &RuntimeSnapshot) -> String {
    let names: Vec<&str> =
        snapshot.models.iter().filter(|info| info.provider_id == "local").map(|info| info.model.as_str()).collect();
    format!("it has {}", names.join(", "))
}

/// A loader error as a problem: the file with the position (syntax) or the key (the detail names it).
fn error_problem(path: &Path, error: RuntimeError) -> ConfigProblem {
    let (location, message) = match error {
        RuntimeError::ConfigSyntax { path, line, column, message } => {
            (format!("{}:{line}:{column}", path.display()), message)
        }
        RuntimeError::ConfigInvalid { path, detail } => (path.display().to_string(), detail),
        other => (path.display().to_string(), other.to_string()),
    };
    ConfigProblem { severity: ProblemSeverity::Error, location, message: strip_terminal_controls(&message) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_dir_with(config: &str, providers: Option<&str>) -> (tempfile::TempDir, DataDir) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        if let Some(providers) = providers {
            std::fs::write(dir.path().join("providers.json"), providers).unwrap();
        }
        let data_dir = DataDir::new(dir.path().to_path_buf());
        (dir, data_dir)
    }

    fn messages(problems: &[ConfigProblem]) -> Vec<String> {
        problems.iter().map(|problem| format!("{} {}", problem.location, problem.message)).collect()
    }

    #[test]
    fn a_sound_config_and_a_missing_one_have_no_problems() {
        let (_dir, data_dir) = data_dir_with("[agents.coder]\nmodels = [\"local/echo\", \"local/scripted\"]\n", None);
        assert_eq!(check_config(&data_dir), Vec::new());
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(check_config(&DataDir::new(empty.path().to_path_buf())), Vec::new());
    }

    #[test]
    fn what_the_loader_refuses_is_an_error_with_its_position_or_key() {
        let (_dir, data_dir) = data_dir_with("[limits]\nmax_frame_bites = 3\n", None);
        let problems = check_config(&data_dir);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].severity, ProblemSeverity::Error);
        assert!(problems[0].location.ends_with("config.toml:2:1"), "{problems:?}");
        assert!(problems[0].message.contains("max_frame_bites"), "{problems:?}");

        let (_dir, data_dir) = data_dir_with("[agents.coder]\nmodels = []\n", None);
        let problems = check_config(&data_dir);
        assert_eq!(problems[0].severity, ProblemSeverity::Error);
        assert!(problems[0].message.contains("agents.coder.models"), "{problems:?}");

        let (_dir, data_dir) = data_dir_with("", Some("{ not json"));
        let problems = check_config(&data_dir);
        assert_eq!(problems[0].severity, ProblemSeverity::Error);
        assert!(problems[0].location.ends_with("providers.json"), "{problems:?}");
    }

    #[test]
    fn every_refused_key_and_every_range_problem_is_listed_at_once() {
        let config = "[limits]\nmax_frame_bites = 3\nhibernate_after_secs = \"soon\"\n[nosuch]\nx = 1\n\
                      [tools]\nshell_timeout_secs = 5\nshel = 1\n";
        let (_dir, data_dir) = data_dir_with(config, None);
        let problems = check_config(&data_dir);
        let text = messages(&problems).join("\n");
        assert_eq!(problems.len(), 4, "{text}");
        assert!(problems.iter().all(|problem| problem.severity == ProblemSeverity::Error), "{text}");
        assert!(problems[0].location.ends_with("config.toml:2:1") && text.contains("max_frame_bites"), "{text}");
        assert!(problems[1].location.ends_with("config.toml:3:24"), "{text}");
        assert!(problems[2].location.ends_with("config.toml:4:2") && problems[2].message.contains("nosuch"), "{text}");
        assert!(problems[3].location.ends_with("config.toml:8:1") && problems[3].message.contains("shel"), "{text}");

        let config = "[limits]\nmax_frame_bytes = 0\nmax_in_flight = 0\n[agents.a]\nmodels = []\n\
                      [agents.b]\nmodels = [\"nothing\"]\n[sandbox]\nwritable = [\"relative\"]\n";
        let (_dir, data_dir) = data_dir_with(config, None);
        let text = messages(&check_config(&data_dir)).join("\n");
        for expected in [
            "limits.max_frame_bytes must be greater than 0",
            "limits.max_in_flight must be greater than 0",
            "agents.a.models must name at least one model",
            "agents.b.models: `nothing` is not of the form",
            "sandbox.writable[0] must be an absolute path",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }

        // A syntax error stops there: what follows cannot be read reliably.
        let (_dir, data_dir) = data_dir_with("[limits\nmax_frame_bites = 3\n", None);
        assert_eq!(check_config(&data_dir).len(), 1);
    }

    #[test]
    fn unknown_providers_models_and_repeats_are_warnings() {
        let config = r#"
            [agents.coder]
            models = ["nosuch/x", "local/ekho", "openai/gpt-4o", "local/echo", "local/echo"]
            [agents.lan]
            models = ["anthropic/claude-typo", "anthropic/claude-unlisted-ok"]
            [models."nosuch/y"]
            context_window = 1000
            [models."local/other"]
            context_window = 1000
            [models."openai/gpt-4o"]
            context_window = 1000
            [models."anthropic/claude-unlisted-ok"]
            context_window = 1000
        "#;
        let providers = r#"{ "connections": { "anthropic": { "generation": 1, "connected_at": "",
            "setup_values": {}, "auth_method": "api_key", "auth_values": {},
            "models": ["claude-sonnet"] } } }"#;
        let (_dir, data_dir) = data_dir_with(config, Some(providers));
        let problems = check_config(&data_dir);
        assert!(problems.iter().all(|problem| problem.severity == ProblemSeverity::Warning), "{problems:?}");
        let text = messages(&problems).join("\n");
        for expected in [
            "agents.coder.models[0] `nosuch/x`: no provider is named `nosuch`",
            "agents.coder.models[1] `local/ekho`: the local provider has no model `ekho`",
            "agents.coder.models[2] `openai/gpt-4o`: provider `openai` is not connected",
            "agents.coder.models[4] `local/echo` is already earlier in the chain",
            "agents.lan.models[0] `anthropic/claude-typo`: provider `anthropic` did not list",
            "models.\"nosuch/y\" no provider is named `nosuch`",
            "models.\"local/other\" the local provider has no model `other`",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert_eq!(problems.len(), 7, "{text}");
        assert!(!text.contains("agents.lan.models[1]"), "a [models] entry makes an unlisted model known: {text}");
    }

    #[test]
    fn a_connected_provider_that_lists_nothing_is_not_second_guessed() {
        let providers = r#"{ "connections": { "openai": { "generation": 1, "connected_at": "",
            "setup_values": {}, "auth_method": "none", "auth_values": {}, "models": [] } } }"#;
        let (_dir, data_dir) = data_dir_with("[agents.a]\nmodels = [\"openai/anything\"]\n", Some(providers));
        assert_eq!(check_config(&data_dir), Vec::new());
    }
}
