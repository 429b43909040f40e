//! What a client command says when something goes wrong: the daemon's own words (its `data.detail`), plus a
//! hint that names the command or flag that fixes it. The daemon's typed error codes decide the hint; the
//! message itself is never rewritten, so nothing the daemon said is lost.

use anyhow::anyhow;
use troupe_protocol::client::ClientError;
use troupe_protocol::error_code::ErrorCode;

/// A command line that cannot work as given (exit code 2, as clap's own usage errors).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Turns a failed call into an error for a person at a terminal.
pub fn explained(error: ClientError) -> anyhow::Error {
    let ClientError::Rpc(rpc) = &error else {
        return match &error {
            ClientError::Timeout => {
                anyhow!("{error}\n  hint: the daemon is busy or stuck; try again, or restart it with `troupe serve`")
            }
            ClientError::Disconnected => anyhow!("{error}\n  hint: is `troupe serve` still running?"),
            _ => anyhow!(error),
        };
    };
    let said = said(&error);
    let run_id = rpc.data.as_ref().and_then(|data| data.get("run_id")).and_then(|id| id.as_str()).map(str::to_owned);
    match (rpc.error_code(), run_id) {
        (Some(ErrorCode::RunNotFound), Some(run_id)) => {
            return anyhow!(
                "no run {run_id}\n  hint: use the run id that `troupe run` or `troupe watch` printed (\"run … \
                 started\"), or --session SESSION for a session's active run"
            );
        }
        (Some(ErrorCode::RunNotActive), Some(run_id)) => {
            return anyhow!("run {run_id} has ended\n  hint: start another with `troupe run --session SESSION TEXT`");
        }
        _ => {}
    }
    let hint = match rpc.error_code() {
        Some(ErrorCode::SessionNotFound) => "list the sessions with `troupe sessions`",
        Some(ErrorCode::RunNotFound) => {
            "use the run id that `troupe run` printed (\"run … started\"); `troupe watch SESSION` shows every run"
        }
        Some(ErrorCode::RunNotActive) => "the run has ended; start another with `troupe run --session SESSION TEXT`",
        Some(ErrorCode::SessionBusy) => {
            "a run is active in that session: steer it with `troupe steer RUN_ID TEXT` or stop it with \
             `troupe cancel RUN_ID`"
        }
        Some(ErrorCode::ModelNotFound | ErrorCode::InvalidSelection) => {
            "choose the model with --model PROVIDER/MODEL (e.g. --model local/echo); connect a provider first with \
             `troupe connect`"
        }
        Some(ErrorCode::AgentNotFound) => "choose an agent with --agent (agents are defined in config.toml)",
        Some(ErrorCode::InvalidCwd) => "give an existing directory with --cwd",
        Some(ErrorCode::InvalidTitle) => "give a title of printable text, or use --clear or --reset",
        Some(ErrorCode::InvalidInput) => "give the text to send as the last argument, in quotes",
        // The daemon's words list the providers already.
        Some(ErrorCode::ProviderNotFound) => "`troupe connect --help` shows what each provider needs",
        Some(ErrorCode::ProviderUnreachable) => unreachable_provider_hint(rpc.data.as_ref()),
        Some(ErrorCode::InvalidProviderSetup) => {
            "check --base-url, --api-key-env (the name of a variable holding the key) or --script"
        }
        Some(ErrorCode::ApprovalNotFound | ErrorCode::ApprovalNotPending) => {
            "the approval was answered or withdrawn; `troupe watch SESSION` shows what is pending"
        }
        Some(ErrorCode::GoalAlreadyActive) => {
            "the session already has a goal: `troupe goal show SESSION`; cancel it with `troupe goal cancel SESSION`"
        }
        Some(ErrorCode::GoalNotFound) => "set a goal first with `troupe goal set SESSION OBJECTIVE`",
        Some(ErrorCode::GoalIdMismatch | ErrorCode::GoalRevisionConflict) => {
            "the goal changed meanwhile: look at it with `troupe goal show SESSION` and try again"
        }
        Some(ErrorCode::GoalTerminal) => "the goal is finished; set a new one with `troupe goal set SESSION OBJECTIVE`",
        Some(ErrorCode::GoalInvalidTransition) => {
            "`troupe goal show SESSION` shows whether the goal is active or paused"
        }
        Some(ErrorCode::GoalSelectionNotAllowed) => "--agent and --model go with `troupe goal resume` only",
        Some(ErrorCode::NotRootSession) => {
            "goals and approvals belong to root sessions: use the id `troupe sessions` lists"
        }
        _ => return anyhow!(said),
    };
    anyhow!("{said}\n  hint: {hint}")
}

/// What to fix when `troupe connect` could not list a provider's models, by why (`data.model_error_kind`).
fn unreachable_provider_hint(data: Option<&serde_json::Value>) -> &'static str {
    let kind = data.and_then(|data| data.get("model_error_kind")).and_then(|kind| kind.as_str()).unwrap_or_default();
    match kind {
        "auth" => {
            "the server refused the API key: put a valid key in the environment variable you name with \
             --api-key-env (e.g. `OPENAI_API_KEY=… troupe connect openai --api-key-env OPENAI_API_KEY`)"
        }
        "permission_denied" => "the key may not list the models: use a key of a project allowed to, with --api-key-env",
        "transport" | "timeout" => {
            "nothing answered at the provider's address: start its server, or fix --base-url (e.g. \
             --base-url http://127.0.0.1:11434/v1 for Ollama); the daemon itself must be able to reach it"
        }
        "model_not_found" | "invalid_response" => {
            "no model list at that address: --base-url is the API's root, ending in /v1 for an OpenAI-compatible \
             server (e.g. http://127.0.0.1:11434/v1)"
        }
        _ => "check --base-url and --api-key-env; the daemon's log says more",
    }
}

/// What a failed call says, in CLI words: the daemon's detail (not the JSON-RPC class and code around it) for an
/// error it answered, else the client's own words.
pub fn said(error: &ClientError) -> String {
    match error {
        ClientError::Rpc(rpc) => speak_cli(rpc.detail().unwrap_or(&rpc.message)),
        other => crate::style::clean(&other.to_string()),
    }
}

/// The daemon's words with protocol names replaced by the flags and commands a person types, cleaned of
/// terminal controls (an error may quote a vendor's body).
pub fn speak_cli(said: &str) -> String {
    // Longer phrases first: a shorter one may be part of a longer one.
    const PHRASES: [(&str, &str); 21] = [
        ("connect it with provider.connect", "connect it with `troupe connect PROVIDER` (see `troupe connect --help`)"),
        ("connect the `local` provider with setup_values.script set", "run `troupe connect local --script FILE`"),
        ("needs setup_values.script", "needs --script FILE"),
        ("without an api_key, setup_values.base_url is required", "without --api-key-env, --base-url URL is required"),
        ("setup_values.base_url", "--base-url URL"),
        ("setup_values.script", "--script FILE"),
        ("setup_values.allow_insecure_http", "--allow-insecure-http"),
        ("needs auth_method `api_key`", "needs a key: --api-key-env VARIABLE"),
        ("auth_method `api_key` needs exactly one auth value, a non-empty `api_key`", "the key must not be empty"),
        ("cancel it (run.cancel)", "cancel it (`troupe cancel RUN_ID`)"),
        ("pause or cancel it (session.goal.lifecycle)", "pause or cancel it (`troupe goal pause|cancel SESSION`)"),
        ("set one with session.goal.set", "set one with `troupe goal set SESSION OBJECTIVE`"),
        ("read it again (session.goal.get)", "read it again (`troupe goal show SESSION`)"),
        ("events.subscribe shows their seqs", "`troupe watch SESSION` shows their numbers (#N)"),
        ("its events are 1 to ", "its events are #1 to #"),
        ("the result of `events.subscribe`", "the daemon's answer to watching the session"),
        ("fork from a seq at or after the first run_started", "fork from the #N of a \"user:\" line or later"),
        ("through_seq ", "#"),
        ("through seq ", "#"),
        ("use `clear`", "use --clear"),
        ("use `reset`", "use --reset"),
    ];
    let mut text = crate::style::clean(said);
    // A JSON-RPC error shown whole starts with its class and code ("Engine error (-32000): "): words for the
    // protocol, not for a person; what follows is the daemon's detail.
    if let Some((head, rest)) = text.split_once("): ")
        && head.rsplit_once(" (-32").is_some_and(|(_, code)| code.chars().all(|c| c.is_ascii_digit()))
    {
        text = rest.to_owned();
    }
    for (protocol, cli) in PHRASES {
        text = text.replace(protocol, cli);
    }
    text
}

/// A command given text that is empty, before anything is sent.
pub fn require_text(text: &str, what: &str, example: &str) -> anyhow::Result<()> {
    if text.trim().is_empty() {
        anyhow::bail!("{what} is empty\n  hint: give it as the last argument, in quotes, e.g. {example}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::RpcError;

    #[test]
    fn a_typed_error_keeps_the_daemons_words_and_gains_a_hint() {
        let error = ClientError::Rpc(RpcError::engine(ErrorCode::SessionNotFound, "no session s-1", &[]));
        let text = explained(error).to_string();
        assert!(text.starts_with("no session s-1\n"), "{text}");
        assert!(text.contains("troupe sessions"), "{text}");
    }

    #[test]
    fn an_unknown_code_is_shown_as_is() {
        // A code from a newer daemon, which this build's `ErrorCode` does not know.
        let newer = serde_json::json!({"code": "something_new", "detail": "it broke"});
        let error = ClientError::Rpc(RpcError { code: -32000, message: "Engine error".into(), data: Some(newer) });
        assert_eq!(explained(error).to_string(), "it broke");
        // A follower's one-line report says the daemon's detail, in CLI words, not the JSON-RPC class and code.
        let error = ClientError::Rpc(RpcError::engine(ErrorCode::SessionBusy, "s: cancel it (run.cancel) first", &[]));
        assert_eq!(said(&error), "s: cancel it (`troupe cancel RUN_ID`) first");
        assert_eq!(said(&ClientError::Timeout), ClientError::Timeout.to_string());
    }

    #[test]
    fn protocol_words_become_flags_and_an_unknown_run_is_named() {
        let error = ClientError::Rpc(RpcError::engine(
            ErrorCode::RunNotFound,
            "there is no run `r-1`",
            &[("run_id", serde_json::Value::String("r-1".into()))],
        ));
        let text = explained(error).to_string();
        assert!(text.starts_with("no run r-1\n"), "{text}");
        assert_eq!(speak_cli("the local provider needs setup_values.script"), "the local provider needs --script FILE");
        assert!(!speak_cli("not connected; connect it with provider.connect").contains("provider.connect"));
        assert_eq!(speak_cli("title empty; use `clear` to remove"), "title empty; use --clear to remove");
        let range = speak_cli(
            "through_seq 99 is not an event of session `s`: its events are 1 to 8; events.subscribe shows their seqs",
        );
        assert_eq!(
            range,
            "#99 is not an event of session `s`: its events are #1 to #8; `troupe watch SESSION` shows their numbers (#N)"
        );
        let busy = speak_cli("s has an active run, `r`; cancel it (run.cancel) or let it end, then delete again");
        assert!(busy.contains("`troupe cancel RUN_ID`") && !busy.contains("run.cancel"), "{busy}");
        assert_eq!(speak_cli("Engine error (-32000): no session x"), "no session x");
        assert_eq!(speak_cli("Invalid params (-32602): bad cwd"), "bad cwd");
        assert_eq!(speak_cli("a (b): c"), "a (b): c");
    }

    #[test]
    fn empty_text_is_refused_with_an_example() {
        let error = require_text("  ", "the steering text", "`troupe steer RUN_ID \"look at the tests\"`").unwrap_err();
        assert!(error.to_string().contains("troupe steer RUN_ID"), "{error}");
        assert!(require_text("go", "the steering text", "").is_ok());
    }
}
