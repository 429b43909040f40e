//! Running the command clap parsed: each subcommand handed to the module that implements it, its result turned
//! into an exit code, and an error printed for a person.

use std::process::ExitCode;

use clap::CommandFactory as _;
use troupe::attach_files::read_attachments;
use troupe::cli_errors::UsageError;
use troupe::commands::{self, ConnectRequest, block_on};
use troupe::follow;
use troupe::history_cmd;
use troupe::run_cmd::{self, RunRequest, Shown};
use troupe::run_control::{self, RunTarget};
use troupe::style::Style;
use troupe_protocol::types::session::TitleChange;
use troupe_protocol::types::tool_output::OutputStream;

use super::command::{Cli, Command, SandboxCommand};
use super::serve::serve;

/// Prints an error for a person (never a backtrace): `error: …`, then its hints. Exit code 2 for a command line
/// that cannot work as given, 1 otherwise.
pub(crate) fn report(error: &anyhow::Error) -> ExitCode {
    let style = Style::stderr();
    // The chain can quote the daemon, a provider or a file: terminal controls removed at this one exit.
    let text = troupe::style::clean(&format!("{error:#}"));
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("failed");
    // A stderr that cannot be written (a full disk) must not turn the error into a panic and its exit code 101.
    use std::io::Write as _;
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{} {first}", style.red("error:"));
    for line in lines {
        let _ = writeln!(stderr, "{line}");
    }
    let usage = error.downcast_ref::<UsageError>().is_some();
    ExitCode::from(if usage { 2 } else { 1 })
}

/// Runs one command; its exit code.
pub(crate) fn dispatch(command: Command) -> anyhow::Result<u8> {
    use troupe::output::Output;
    match command {
        Command::Serve { listen, data_dir, hibernate_after_ms, log_format: _, cluster, node } => {
            serve(listen, data_dir, hibernate_after_ms, troupe::daemon::ClusterFlags { nats: cluster, node }).map(done)
        }
        Command::Token { data_dir, create, json } => {
            commands::token(data_dir, create, Output::from_flag(json)).map(done)
        }
        Command::Sessions { client, cwd, json, all } => {
            block_on(commands::sessions(&client.connection(), cwd, all, Output::from_flag(json))).map(done)
        }
        Command::Create { client, cwd, selection, json } => {
            block_on(commands::create(&client.connection(), cwd, selection, Output::from_flag(json))).map(done)
        }
        Command::Rename { client, session, title, clear, reset, json } => {
            let change = match (title, clear, reset) {
                (Some(title), _, _) => TitleChange::Set { title },
                (None, true, _) => TitleChange::Clear,
                _ => TitleChange::Reset,
            };
            block_on(commands::rename(&client.connection(), session, change, Output::from_flag(json))).map(done)
        }
        Command::Run { client, place, selection, reset_fallback, json, attach, input } => {
            let attachments = read_attachments(&attach)?;
            let request = RunRequest {
                session: place.session,
                cwd: place.cwd,
                flags: selection,
                reset_fallback,
                mode: None,
                input: run_cmd::input_or_stdin(input, "troupe run \"make the tests pass\"")?,
                attachments,
                shown: Shown::Follow(Output::from_flag(json)),
            };
            block_on(run_cmd::run(&client.connection(), request)).map(|end| end.exit_code())
        }
        Command::Exec { client, place, selection, reset_fallback, mode, verbose, json, attach, input } => {
            let attachments = read_attachments(&attach)?;
            let request = RunRequest {
                session: place.session,
                cwd: place.cwd,
                flags: selection,
                reset_fallback,
                mode,
                input: run_cmd::input_or_stdin(input, "troupe exec \"summarize README.md\"")?,
                attachments,
                shown: Shown::Exec { verbose, json },
            };
            let end = block_on(run_cmd::run(&client.connection(), request))?;
            if json {
                run_cmd::print_json_end(&end);
            }
            Ok(end.exit_code())
        }
        Command::Continue { client, selection, reset_fallback, json, attach, text } => {
            let attachments = read_attachments(&attach)?;
            let connection = client.connection();
            let session = block_on(run_cmd::latest_here(&connection))?;
            let out = Output::from_flag(json);
            match text {
                Some(input) => {
                    let request = RunRequest {
                        session: Some(session),
                        cwd: None,
                        flags: selection,
                        reset_fallback,
                        mode: None,
                        input,
                        attachments,
                        shown: Shown::Follow(out),
                    };
                    block_on(run_cmd::run(&connection, request)).map(|end| end.exit_code())
                }
                None => block_on(follow::watch(&connection, session, None, out)).map(done),
            }
        }
        Command::Steer { client, session, json, attach, mut args } => {
            let text = args.pop().unwrap_or_default();
            let target = RunTarget::from_args(args.pop(), session)?;
            let attachments = read_attachments(&attach)?;
            block_on(run_control::steer(&client.connection(), target, text, attachments, Output::from_flag(json)))
                .map(done)
        }
        Command::Recall { client, run, json } => {
            let target = RunTarget::from_args(run.run_id, run.session)?;
            block_on(run_control::recall(&client.connection(), target, Output::from_flag(json))).map(done)
        }
        Command::Cancel { client, run, json } => {
            let target = RunTarget::from_args(run.run_id, run.session)?;
            block_on(run_control::cancel(&client.connection(), target, Output::from_flag(json))).map(done)
        }
        Command::Stdin { client, session, call, eof, no_newline, json, args } => {
            let request = run_control::stdin_request(session, call, args, eof, no_newline)?;
            block_on(run_control::stdin(&client.connection(), request, Output::from_flag(json))).map(done)
        }
        Command::Mode { client, session, mode, json } => {
            block_on(commands::mode(&client.connection(), session, mode, Output::from_flag(json))).map(done)
        }
        Command::Connect { client, provider, base_url, api_key_env, script, allow_insecure_http, json } => {
            let api_key = match api_key_env {
                Some(variable) => Some(std::env::var(&variable).map_err(|_| {
                    anyhow::anyhow!(
                        "the environment variable {variable} is not set\n  hint: export it first, e.g. \
                         `export {variable}=sk-…`; keys are never taken on the command line"
                    )
                })?),
                None => None,
            };
            let request = ConnectRequest { provider_id: provider, base_url, script, api_key, allow_insecure_http };
            block_on(commands::connect(&client.connection(), request, Output::from_flag(json))).map(done)
        }
        Command::Approve { client, session, approval_id, tree, reject, feedback, cancel, json } => {
            use troupe_protocol::types::approval::ApprovalDecision;
            let decision = match (tree, reject, cancel) {
                (true, _, _) => ApprovalDecision::ApproveTree,
                (_, true, _) => ApprovalDecision::Reject,
                (_, _, true) => ApprovalDecision::Cancel,
                _ => ApprovalDecision::ApproveOnce,
            };
            let answer = commands::Answer { decision, feedback };
            let out = Output::from_flag(json);
            block_on(commands::approve(&client.connection(), session, approval_id, answer, out)).map(done)
        }
        Command::Disconnect { client, provider, json } => {
            block_on(commands::disconnect(&client.connection(), provider, Output::from_flag(json))).map(done)
        }
        Command::Sandbox { command: SandboxCommand::Explain { client, session_id, json } } => {
            block_on(troupe::sandbox_explain::explain_command(&client.connection(), session_id, json)).map(done)
        }
        Command::Goal { command } => command.run(),
        Command::Revert { client, session_id, seq, json } => {
            block_on(history_cmd::revert(&client.connection(), session_id, seq, json)).map(done)
        }
        Command::Fork { client, session_id, seq, json } => {
            block_on(history_cmd::fork(&client.connection(), session_id, seq, json)).map(done)
        }
        Command::Compact { client, session_id, focus, json } => {
            let compacted = block_on(history_cmd::compact(&client.connection(), session_id, focus, json))?;
            Ok(if compacted { 0 } else { 1 })
        }
        Command::Tree { client, session_id, json } => {
            block_on(history_cmd::tree(&client.connection(), session_id, json)).map(done)
        }
        Command::Usage { client, session, agent, tree, json } => {
            let scope = troupe::usage_cmd::UsageScope::from_flags(session, agent, tree);
            block_on(troupe::usage_cmd::usage(&client.connection(), scope, json)).map(done)
        }
        Command::Output { client, session, output_ref, stderr } => {
            let stream = if stderr { OutputStream::Stderr } else { OutputStream::Stdout };
            block_on(troupe::tool_output_cmd::output(&client.connection(), &session, &output_ref, stream)).map(done)
        }
        Command::Watch { client, session, from, json } => {
            block_on(follow::watch(&client.connection(), session, from, Output::from_flag(json))).map(done)
        }
        #[cfg(feature = "tui")]
        Command::Tui { client, session } => block_on(troupe::tui::run(client.connection(), session)).map(done),
        Command::Completions { shell } => {
            // The script calls `troupe` back at each Tab (`TROUPE_COMPLETE=SHELL troupe -- …`, answered in `main`), so
            // it completes what only the daemon knows: session ids, agents, models.
            let mut buffer = Vec::new();
            shell.completer().write_registration(
                troupe::completion::VARIABLE,
                "troupe",
                "troupe",
                "troupe",
                &mut buffer,
            )?;
            print_all(&buffer)
        }
        Command::Man { dir, command } => troupe::man_cmd::man(Cli::command(), dir.as_deref(), &command).map(done),
        Command::Inspect(command) => command.run(),
        Command::Status(command) => command.run(),
        Command::Open(command) => command.run(),
        Command::SessionAdmin(command) => command.run(),
        Command::Changes(command) => command.run(),
        Command::Mcp(command) => command.run(),
    }
}

/// Writes generated text to stdout (a closed pipe ends the command quietly).
fn print_all(bytes: &[u8]) -> anyhow::Result<u8> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    troupe::output::checked(stdout.write_all(bytes).and_then(|()| stdout.flush()));
    Ok(0)
}

/// Exit code 0 for a command that returned.
fn done(_: ()) -> u8 {
    0
}
