//! Shell completion that knows the daemon: session ids (the short prefixes `troupe sessions` prints, with their
//! titles), permission modes, agents and models, besides the commands and flags. The shell's script calls `troupe`
//! back at each Tab (clap_complete's dynamic completion, `TROUPE_COMPLETE=bash troupe -- troupe watch 01a`); values that
//! live in the daemon are asked of it, reached as every client command reaches it from the environment
//! (`TROUPE_URL`, `TROUPE_TOKEN`, `TROUPE_TOKEN_FILE`, `TROUPE_HOME`). A daemon that cannot be reached within
//! [`ASK_WITHIN`] completes nothing: a Tab never hangs or prints an error into the command line.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::{ArgValueCandidates, ArgValueCompleter, CompletionCandidate};
use troupe_protocol::client::{Client, ClientOptions, ClientProtocol};
use troupe_protocol::types::common::Empty;
use troupe_protocol::types::session::SessionListParams;

use crate::commands::Connection;
use crate::style::{clean, id_prefix, unique_prefix_len};

/// The environment variable through which the shell's script asks for completions (`TROUPE_COMPLETE=bash`).
pub const VARIABLE: &str = "TROUPE_COMPLETE";

/// How long a Tab may wait for the daemon.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// The names of the permission modes, as `troupe mode` and `exec --mode` take them.
const MODES: [(&str, &str); 5] = [
    ("ask", "every command and write waits for `troupe approve`"),
    ("auto_approve", "the rules decide; what they do not cover asks"),
    ("auto_approve_n", "what the rules do not cover is refused"),
    ("auto_approve_y", "what the rules do not cover is allowed"),
    ("yolo", "everything is allowed"),
];

/// `command` with value completers on the arguments that name a session, a mode, an agent or a model, in every
/// subcommand (by the argument's id, as the commands spell them).
pub fn with_completers(command: clap::Command) -> clap::Command {
    let command = command.mut_args(|arg| match arg.get_id().as_str() {
        "session" | "session_id" | "tree" => arg.add(ArgValueCompleter::new(sessions)),
        "mode" => arg.add(ArgValueCandidates::new(modes)),
        "agent" => arg.add(ArgValueCompleter::new(agents)),
        "model" => arg.add(ArgValueCompleter::new(models)),
        _ => arg,
    });
    command.mut_subcommands(with_completers)
}

/// The permission modes.
fn modes() -> Vec<CompletionCandidate> {
    MODES.iter().map(|(mode, help)| CompletionCandidate::new(*mode).help(Some((*help).into()))).collect()
}

/// Root sessions whose id starts with `current`: each as its shortest unambiguous prefix (the whole id once
/// `current` is longer), its title and status as help.
pub fn sessions(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let listed = ask(|client| async move {
        let listed = client.session_list(SessionListParams { cwd: None, include_archived: false }).await.ok()?;
        Some(listed.sessions)
    });
    let Some(sessions) = listed else { return Vec::new() };
    let len = unique_prefix_len(sessions.iter().map(|session| session.session_id.as_str()));
    sessions
        .iter()
        .filter(|session| session.session_id.starts_with(current.as_ref()))
        .map(|session| {
            let id = &session.session_id;
            let shown = if current.len() >= len { id.as_str() } else { id_prefix(id, len) };
            let help =
                format!("{} ({})", crate::commands::title_of(session), crate::commands::status_name(session.status));
            CompletionCandidate::new(shown.to_owned()).help(Some(help.into()))
        })
        .collect()
}

/// The agents whose name starts with `current`, with their description.
pub fn agents(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let snapshot = ask(|client| async move { client.runtime_snapshot_get(Empty {}).await.ok() });
    let Some(snapshot) = snapshot.map(|result| result.snapshot) else { return Vec::new() };
    snapshot
        .agents
        .iter()
        .filter(|agent| agent.agent.starts_with(current.as_ref()))
        .map(|agent| CompletionCandidate::new(clean(&agent.agent)).help(Some(clean(&agent.description).into())))
        .collect()
}

/// The models whose `provider/model` starts with `current`: the ones that can run now (their provider is
/// connected) first; the others hidden unless nothing else matches.
pub fn models(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let snapshot = ask(|client| async move { client.runtime_snapshot_get(Empty {}).await.ok() });
    let Some(snapshot) = snapshot.map(|result| result.snapshot) else { return Vec::new() };
    snapshot
        .models
        .iter()
        .filter(|model| model.model.starts_with(current.as_ref()))
        .map(|model| {
            let usable = crate::selection::usable(&snapshot, model) == crate::selection::Usable::Yes;
            let help = if usable { clean(&model.name) } else { format!("{} (cannot run now)", clean(&model.name)) };
            CompletionCandidate::new(clean(&model.model)).help(Some(help.into())).hide(!usable)
        })
        .collect()
}

/// Asks the daemon something, within [`ASK_WITHIN`]; `None` when it cannot be reached or does not answer.
fn ask<T, F>(question: impl FnOnce(Client) -> F) -> Option<T>
where
    F: std::future::Future<Output = Option<T>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    runtime.block_on(async {
        tokio::time::timeout(ASK_WITHIN, async {
            let connection = Connection::from_environment();
            let options = ClientOptions { request_timeout: ASK_WITHIN, ..ClientOptions::default() };
            let (client, _deliveries) = connection.connect(options).await.ok()?;
            let answer = question(client.clone()).await;
            client.close().await;
            answer
        })
        .await
        .ok()
        .flatten()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_mode_the_parser_takes_is_offered() {
        for (mode, _) in super::MODES {
            let parsed: Result<troupe_protocol::types::session::PermissionMode, _> =
                serde_json::from_value(serde_json::Value::String(mode.to_owned()));
            assert!(parsed.is_ok(), "{mode}");
        }
    }
}
