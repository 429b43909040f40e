//! The log of both kinds of `troupe` process, on stderr.
//!
//! `troupe serve` logs at `info` what an operator wants to read: the config it loaded and its problems, provider
//! connections, each run's start and end, model failures, retries and fallbacks. A client command logs at `warn`
//! only: it says what it has to say itself, and its own connect/disconnect/reconnect lines would be noise.
//! `RUST_LOG` overrides both. Colours (ANSI escapes) only when stderr is a terminal, so a log redirected to a file
//! or a journal holds plain text.
//!
//! Two formats ([`LogFormat`], `troupe serve --log-format` or `TROUPE_LOG_FORMAT`): `text` for people, and `json`
//! for log shippers, one object per line with `timestamp`, `level`, `target`, `fields` (the message among them),
//! `span` (the innermost span's fields) and `spans` (every open span, outermost first). The daemon's spans are
//! `connection{connection_id, client}` (the gateway, per WebSocket), `request{method, session_id, run_id}` (the
//! protocol layer, per request) and `run{session_id, run_id}` (the run actor, for everything a run does).

use std::io::IsTerminal;

use troupe_runtime::config::{Config, ProblemSeverity, config_warnings};
use troupe_runtime::data_dir::DataDir;
use troupe_runtime::provider_store::{PROVIDERS_FILE_NAME, ProviderStore};

/// The kind of process, which decides the default level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessKind {
    /// `troupe serve`: `info` by default, but actix's own start-up lines (workers, "Actix runtime found", the
    /// service it starts) at `warn`: they said nothing a person acts on and buried the daemon's banner.
    Daemon,
    /// Every other command: `warn` by default.
    Client,
}

impl ProcessKind {
    /// The filter used when `RUST_LOG` is not set.
    pub fn default_filter(self) -> &'static str {
        match self {
            ProcessKind::Daemon => "info,actix_server=warn,actix_web=warn",
            ProcessKind::Client => "warn",
        }
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event, span fields as a prefix.
    #[default]
    Text,
    /// One JSON object per line, with the fields of the event and of its spans.
    Json,
}

/// Installs the process's log subscriber; call once, first thing.
pub fn init(kind: ProcessKind, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(kind.default_filter()));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| LossyStderr);
    match format {
        // Untrusted text in a field (a vendor's error body) cannot start a line of its own.
        LogFormat::Text => {
            builder.with_ansi(std::io::stderr().is_terminal()).fmt_fields(crate::log_fields::EscapedFields).init()
        }
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).init(),
    }
}

/// Stderr for log lines, whose writes never fail. A log that cannot be written (stderr on a full disk, a closed
/// pipe) must not cost what was being logged: `tracing-subscriber` reports a failed write with `eprintln!`, which
/// panics when stderr fails, and that panic would take down the task that logged (a request, a run). The line is
/// lost; there is nowhere else to say so.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Writes a line to stdout as `println!` would, but a failed write (stdout on a full disk, a closed pipe) is
/// ignored instead of panicking: the daemon's own announcements are for whoever reads them, and it serves whether
/// or not anyone can.
pub fn print_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(line).and_then(|()| stdout.write_all(b"\n")).and_then(|()| stdout.flush());
}

/// Logs, at the daemon's start, what configuration it runs with: the files read, the counts of agents,
/// connected providers and known models, each problem `troupe config check` would print (at warn), and that
/// changes apply on restart. Reads `providers.json` (blocking; called before the daemon serves).
pub fn log_config(data_dir: &DataDir, config: &Config) {
    let config_path = data_dir.config_path();
    let providers_path = data_dir.root().join(PROVIDERS_FILE_NAME);
    let connections = match ProviderStore::open(data_dir.root()) {
        Ok(store) => store.contents.connections.clone(),
        // The engine opens the file too and refuses to start with its own error; nothing to add here.
        Err(_) => return,
    };
    let mut snapshot = troupe_runtime::catalog::build_snapshot(0, &connections, &config.agents);
    troupe_runtime::catalog::apply_model_config(&mut snapshot, &config.models);
    let read = |path: &std::path::Path| if path.is_file() { "read" } else { "absent, defaults" };
    tracing::info!(
        config = %format!("{} ({})", config_path.display(), read(&config_path)),
        providers_file = %format!("{} ({})", providers_path.display(), read(&providers_path)),
        agents = snapshot.agents.len(),
        providers_connected = snapshot.providers.iter().filter(|provider| provider.connected).count(),
        models = snapshot.models.len(),
        "config loaded; changes to config.toml apply when the daemon restarts"
    );
    for problem in config_warnings(config, &connections, &config_path) {
        match problem.severity {
            ProblemSeverity::Error => {
                tracing::error!(location = %problem.location, "config problem: {}", problem.message)
            }
            ProblemSeverity::Warning => {
                tracing::warn!(location = %problem.location, "config problem: {}", problem.message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_logs_info_and_clients_warn_by_default() {
        assert!(ProcessKind::Daemon.default_filter().starts_with("info,"));
        assert_eq!(ProcessKind::Client.default_filter(), "warn");
    }
}
