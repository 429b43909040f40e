//! `shell`: runs a command line with `/bin/sh -c` in the session's cwd.
//!
//! The child leads its own process group so that a timeout, a cancellation or the end of the command can kill
//! everything it started. stdout and stderr are read concurrently; each chunk streams live with its byte offset
//! and a bounded head and tail of each is kept for the result. stdin is a pipe fed from `run.tool_stdin` when the
//! run offers stdin, and `/dev/null` otherwise, so a command that reads input never waits for nothing.
//!
//! Every command runs in the kernel sandbox ([`crate::sandbox`]): the rules are prepared on a blocking thread
//! before the spawn and entered between clone and exec ([`crate::sandbox::spawn`]), `TMPDIR` is the run's temp
//! dir, and the process group is recorded durably while it lives. A sandbox that cannot be enforced refuses the command (`denied`).
//!
//! When the shell exits, whatever it left in its group (background jobs) is killed too: a tool call must not
//! leave processes behind, and one holding our pipes open would otherwise keep the call from ending.

mod capture;
mod confine;
mod process_group;

use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_protocol::types::tool_output::{OutputChannel, OutputStream};

use self::capture::{CapturedOutput, pump};
use self::confine::{CallTempDir, NotStarted};
use self::process_group::ProcessGroup;
use super::context::StdinInput;
use super::error::ToolError;
use super::results::{self, parse_arguments};
use super::{PermissionRequest, Tool, ToolContext, ToolDefinition};
use crate::changes::shell::SnapshotPhase;
use crate::sandbox::ToolCommand;
use crate::tool_stdin::StdinReceiver;

const NAME: &str = "shell";

/// The longest timeout a call may ask for; longer work belongs in the background of a separate tool.
pub const MAX_SHELL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the output is still read after the group is gone. Only a process that left the group (`setsid`)
/// can hold the pipes open past the kill, and it must not hold the call.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How long reaping a SIGKILLed shell may take before the call ends anyway.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// The longest command text shown in a permission summary.
const SUMMARY_COMMAND_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    command: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

fn parse(arguments: &serde_json::Value) -> Result<Arguments, ToolError> {
    let arguments: Arguments = parse_arguments(NAME, arguments)?;
    if arguments.command.trim().is_empty() {
        return Err(ToolError::InvalidArguments { tool: NAME, message: "command is empty".to_owned() });
    }
    if arguments.timeout_ms == Some(0) {
        return Err(ToolError::InvalidArguments { tool: NAME, message: "timeout_ms must be at least 1".to_owned() });
    }
    Ok(arguments)
}

pub struct ShellTool;

impl Tool for ShellTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: NAME.to_owned(),
            description: format!(
                "Run a command with /bin/sh -c in the working directory. Returns the exit code and the output \
                 of stdout and stderr (long output keeps its beginning and end). The command is killed, with \
                 everything it started, when it times out; background processes are killed when it exits. \
                 It runs in a sandbox: it cannot read troupe's data directory and other denied paths, writes only \
                 the working directory and $TMPDIR (only $TMPDIR in read-only mode), and may have no network. \
                 timeout_ms may be at most {} ms.",
                MAX_SHELL_TIMEOUT.as_millis()
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_SHELL_TIMEOUT.as_millis() as u64, "description": "Kill the command after this many milliseconds. Default 120000."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn output_channels(&self) -> Vec<OutputChannel> {
        vec![OutputStream::Stdout.into(), OutputStream::Stderr.into()]
    }

    fn permission(&self, arguments: &serde_json::Value, _cwd: &Path) -> Result<PermissionRequest, ToolError> {
        let arguments = parse(arguments)?;
        let mut shown: String = arguments.command.chars().take(SUMMARY_COMMAND_CHARS).collect();
        if shown.len() < arguments.command.len() {
            shown.push('…');
        }
        Ok(PermissionRequest {
            action: PermissionAction::Execute,
            summary: format!("run {shown}"),
            resource: arguments.command,
            inside_cwd: true,
        })
    }

    fn execute(&self, arguments: serde_json::Value, context: ToolContext) -> BoxFuture<'static, PersistedToolResult> {
        async move {
            let arguments = match parse(&arguments) {
                Ok(arguments) => arguments,
                Err(error) => return error.into_result(),
            };
            let timeout = match arguments.timeout_ms {
                Some(milliseconds) => Duration::from_millis(milliseconds).min(MAX_SHELL_TIMEOUT),
                None => context.limits.shell_timeout,
            };
            run(&arguments.command, timeout, context).await
        }
        .boxed()
    }
}

/// How the command stopped.
enum Ending {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
    Cancelled,
}

async fn run(command: &str, timeout: Duration, context: ToolContext) -> PersistedToolResult {
    if context.cancel.is_cancelled() {
        return results::cancelled("cancelled before the command started");
    }
    let ToolContext {
        cwd,
        limits,
        output,
        stdin,
        cancel,
        // The shell's reach is judged from the command line, not from paths.
        approved_request: _,
        sandbox,
        temp_dir,
        writable,
        // What a command changes is snapshotted in a git work tree (`crate::changes::shell`).
        changes,
    } = context;

    let temp_dir = match CallTempDir::new(temp_dir) {
        Ok(temp_dir) => temp_dir,
        Err(error) => return results::error(format!("could not create a temp dir for the command: {error}")),
    };
    let (session_cwd, prepared) =
        match confine::prepare(Arc::clone(&sandbox), cwd.clone(), temp_dir.path().to_path_buf(), writable).await {
            Ok(prepared) => prepared,
            Err(NotStarted::Cwd(problem)) => {
                temp_dir.remove().await;
                return results::error(format!("the command did not run: {problem}"));
            }
            Err(NotStarted::Sandbox(reason)) => {
                temp_dir.remove().await;
                return results::denied(format!("refused by the sandbox, the command did not run: {reason}"));
            }
        };

    let changes = changes.filter(|_| limits.shell_snapshots);
    if let Some(changes) = &changes {
        changes.snapshot_shell(&cwd, &sandbox, SnapshotPhase::Before).await;
    }

    let mut shell = ToolCommand::new("/bin/sh");
    shell
        .arg("-c")
        .arg(command)
        // Only the allowlisted variables of the daemon's environment and those `[sandbox] env` lists: whatever
        // secrets the daemon's own environment holds stay out of the model's reach.
        .envs(sandbox.tool_environment())
        .env("TMPDIR", temp_dir.path())
        .env("TMP", temp_dir.path())
        .env("TEMP", temp_dir.path())
        .piped_stdin(stdin.is_some())
        // Into the folder opened and verified above, by its descriptor: first, before the sandbox's own setup.
        .cwd_descriptor(session_cwd.as_fd(), &cwd);
    // The child leads a new session (and so its own process group) from `setsid` between clone and exec, and is
    // killed and reaped if this future is dropped (`ProcessGroup` kills the rest). Spawned from this runtime
    // thread, which outlives the child: PR_SET_PDEATHSIG fires when the spawning thread ends.
    let confined = prepared.is_some();
    let spawned = shell.spawn(prepared);
    drop(shell);
    drop(session_cwd);
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            temp_dir.remove().await;
            let inside = if confined { " inside the sandbox" } else { "" };
            return results::error(format!("could not start /bin/sh in {}{inside}: {error}", cwd.display()));
        }
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        // Unreachable: every tool process gets both pipes.
        let _ = child.start_kill();
        return results::error("the shell started without its pipes");
    };
    // The shell leads its session and so its process group.
    let pgid = child.id();
    let mut group = ProcessGroup::new(pgid);
    // Recorded while the command runs rather than before: the two fsyncs of the record would otherwise come on top
    // of every command's time. The leader is reaped only once the record is written, so that its start time (read
    // from `/proc`) is still there to record.
    let recording = confine::record_group(&sandbox, pgid);
    tokio::pin!(recording);
    let mut record = None;
    let mut recorded = false;

    let limit = limits.max_output_bytes;
    let mut stdout_capture = CapturedOutput::new(limit);
    let mut stderr_capture = CapturedOutput::new(limit);
    let mut pumps = Box::pin(futures::future::join(
        pump(stdout, OutputStream::Stdout, output.clone(), &mut stdout_capture),
        pump(stderr, OutputStream::Stderr, output, &mut stderr_capture),
    ));
    let mut pumps_done = false;
    let mut stdin_forwarding = Box::pin(forward_stdin(child.stdin.take(), stdin));
    let mut stdin_done = false;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);

    let ending = loop {
        tokio::select! {
            written = &mut recording, if !recorded => {
                record = written;
                recorded = true;
            }
            status = child.wait(), if recorded => break Ending::Exited(status),
            () = &mut deadline => break Ending::TimedOut,
            () = cancel.cancelled() => break Ending::Cancelled,
            _ = &mut pumps, if !pumps_done => pumps_done = true,
            () = &mut stdin_forwarding, if !stdin_done => stdin_done = true,
        }
    };

    if !recorded {
        record = recording.await;
    }
    // Kill the group in every case: after a timeout or cancellation to stop the command, after an exit to stop
    // what it left in the background.
    let kill_error = group.kill().err();
    let reaped = match ending {
        Ending::Exited(_) => true,
        Ending::TimedOut | Ending::Cancelled => {
            matches!(tokio::time::timeout(REAP_GRACE, child.wait()).await, Ok(Ok(_)))
        }
    };
    let group_gone = reaped && kill_error.is_none();
    if group_gone {
        group.disarm();
    }
    confine::release_group(record, group_gone).await;
    drop(stdin_forwarding);
    let drained = pumps_done || tokio::time::timeout(DRAIN_GRACE, &mut pumps).await.is_ok();
    drop(pumps);
    if let Some(changes) = &changes {
        changes.snapshot_shell(&cwd, &sandbox, SnapshotPhase::After).await;
    }

    let (status, mut text) = match ending {
        Ending::Exited(Ok(status)) => describe_exit(status),
        Ending::Exited(Err(error)) => (ToolResultStatus::Error, format!("could not wait for the command: {error}")),
        Ending::TimedOut => (
            ToolResultStatus::Error,
            format!(
                "timed out after {}; the command and everything it started were killed",
                describe_duration(timeout)
            ),
        ),
        Ending::Cancelled => {
            (ToolResultStatus::Cancelled, "cancelled; the command and everything it started were killed".to_owned())
        }
    };
    if let Some(error) = kill_error {
        text.push_str(&format!(" (killing its process group failed: {error})"));
    }
    if !drained {
        text.push_str(" (output may be incomplete: a detached process kept the pipes open)");
    }
    append_stream(&mut text, "stdout", &stdout_capture);
    append_stream(&mut text, "stderr", &stderr_capture);
    if stdout_capture.total() == 0 && stderr_capture.total() == 0 {
        text.push_str("\n(no output)");
    }
    // Whether or not the command failed as a whole: `a; b` succeeds although `a` was refused.
    if let Some(note) = confine::refusal_note(&sandbox, &cwd, &stderr_capture.render(), &stdout_capture.render()) {
        text.push('\n');
        text.push_str(&note);
    }
    temp_dir.remove().await;
    results::result(status, text)
}

/// Writes run input to the child until end of input. A closed queue is end of input too, since nobody can
/// send more; a child that stopped reading ends the forwarding quietly. Each input counts against the queue's bound
/// until it is written (it is dropped after the write).
async fn forward_stdin(writer: Option<pipe::Sender>, input: Option<StdinReceiver>) {
    let (Some(mut writer), Some(mut input)) = (writer, input) else {
        return;
    };
    while let Some(item) = input.recv().await {
        match &item.input {
            StdinInput::Data(data) => {
                if writer.write_all(data).await.is_err() || writer.flush().await.is_err() {
                    return;
                }
            }
            // Dropping the writer closes the pipe, which the child reads as end of file.
            StdinInput::Eof => return,
        }
    }
}

fn describe_exit(status: ExitStatus) -> (ToolResultStatus, String) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => (ToolResultStatus::Ok, "exit code 0".to_owned()),
        (Some(code), _) => (ToolResultStatus::Error, format!("exit code {code}")),
        (None, Some(signal)) => (ToolResultStatus::Error, format!("killed by signal {signal}")),
        (None, None) => (ToolResultStatus::Error, format!("ended with {status}")),
    }
}

fn describe_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

fn append_stream(text: &mut String, name: &str, capture: &CapturedOutput) {
    if capture.total() == 0 {
        return;
    }
    text.push_str(&format!("\n--- {name} ---\n"));
    text.push_str(&capture.render());
}
