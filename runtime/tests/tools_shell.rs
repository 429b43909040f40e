//! The `shell` tool against real processes: live output with per-stream offsets, stdin, cancellation and
//! timeouts that kill the whole process group, and output capping.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_protocol::types::tool_output::OutputStream;
use troupe_runtime::tool_stdin::{MAX_QUEUED_STDIN_BYTES, stdin_queue};
use troupe_runtime::tools::{OutputChunk, StdinInput, Tool, ToolContext, ToolRegistry};

const STEP: Duration = Duration::from_secs(20);

fn shell() -> &'static dyn Tool {
    static REGISTRY: std::sync::OnceLock<ToolRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(ToolRegistry::builtin).get("shell").expect("shell is built in")
}

/// Collects every live chunk until the sender side is gone.
fn collect(mut receiver: mpsc::Receiver<OutputChunk>) -> JoinHandle<Vec<OutputChunk>> {
    tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(chunk) = receiver.recv().await {
            chunks.push(chunk);
        }
        chunks
    })
}

/// Concatenates one stream's chunks, checking that their offsets are contiguous from zero.
fn stream_bytes(chunks: &[OutputChunk], stream: OutputStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    for chunk in chunks.iter().filter(|chunk| chunk.stream == stream) {
        assert_eq!(chunk.offset, bytes.len() as u64, "offsets of {stream:?} must be contiguous");
        bytes.extend_from_slice(&chunk.data);
    }
    bytes
}

async fn run(command: &str, context: ToolContext) -> PersistedToolResult {
    tokio::time::timeout(STEP, shell().execute(json!({"command": command}), context))
        .await
        .expect("the shell call ends in time")
}

/// Runs `command` with a live output channel of `capacity` chunks and returns the result with every chunk
/// streamed. The capacity is the caller's because a small one is how a test makes the child wait on the reader.
async fn run_streaming(
    command: &str,
    mut context: ToolContext,
    capacity: usize,
) -> (PersistedToolResult, Vec<OutputChunk>) {
    let (sender, receiver) = mpsc::channel(capacity);
    let collector = collect(receiver);
    context.output = Some(sender);
    let result = run(command, context).await;
    let chunks = tokio::time::timeout(STEP, collector).await.unwrap().unwrap();
    (result, chunks)
}

fn process_is_gone(pid: u32) -> bool {
    // A killed process whose parent is gone may linger as a zombie until init reaps it; it no longer runs.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_until_gone(pid: u32) {
    troupe_test_support::eventually(&format!("process {pid} to be gone"), STEP, || process_is_gone(pid)).await;
}

#[tokio::test]
async fn permission_is_execute_on_the_command_line() {
    let directory = tempfile::tempdir().unwrap();
    let request = shell().permission(&json!({"command": "ls -la"}), directory.path()).unwrap();
    assert_eq!(request.action, PermissionAction::Execute);
    assert_eq!(request.resource, "ls -la");
    assert!(request.inside_cwd);
    assert!(shell().permission(&json!({"command": "  "}), directory.path()).is_err());
    assert!(shell().permission(&json!({"cmd": "ls"}), directory.path()).is_err());
}

#[tokio::test]
async fn output_streams_live_with_offsets_per_stream() {
    let directory = tempfile::tempdir().unwrap();
    let context = ToolContext::new(directory.path());

    let (result, chunks) = run_streaming("printf 'abc'; printf 'de' >&2; printf 'fgh'", context, 64).await;

    assert_eq!(stream_bytes(&chunks, OutputStream::Stdout), b"abcfgh");
    assert_eq!(stream_bytes(&chunks, OutputStream::Stderr), b"de");
    assert_eq!(result.status, ToolResultStatus::Ok);
    assert_eq!(result.output, "exit code 0\n--- stdout ---\nabcfgh\n--- stderr ---\nde");
}

#[tokio::test]
async fn runs_in_the_cwd_and_reports_failures() {
    let directory = tempfile::tempdir().unwrap();
    std::fs::write(directory.path().join("marker.txt"), "x").unwrap();
    let listed = run("ls", ToolContext::new(directory.path())).await;
    assert_eq!(listed.output, "exit code 0\n--- stdout ---\nmarker.txt\n");

    let failed = run("echo oops >&2; exit 3", ToolContext::new(directory.path())).await;
    assert_eq!(failed.status, ToolResultStatus::Error);
    assert_eq!(failed.output, "exit code 3\n--- stderr ---\noops\n");

    let quiet = run("true", ToolContext::new(directory.path())).await;
    assert_eq!(quiet.output, "exit code 0\n(no output)");
}

#[tokio::test]
async fn stdin_round_trips_through_cat() {
    let directory = tempfile::tempdir().unwrap();
    let (input, stdin) = stdin_queue(MAX_QUEUED_STDIN_BYTES);
    let (sender, receiver) = mpsc::channel(64);
    let collector = collect(receiver);
    let mut context = ToolContext::new(directory.path());
    context.stdin = Some(stdin);
    context.output = Some(sender);

    let call = tokio::spawn(shell().execute(json!({"command": "cat"}), context));
    input.try_send(StdinInput::Data(b"hello ".to_vec())).unwrap();
    input.try_send(StdinInput::Data(b"world\n".to_vec())).unwrap();
    input.try_send(StdinInput::Eof).unwrap();
    let result = tokio::time::timeout(STEP, call).await.unwrap().unwrap();
    let chunks = tokio::time::timeout(STEP, collector).await.unwrap().unwrap();

    assert_eq!(result.status, ToolResultStatus::Ok);
    assert_eq!(result.output, "exit code 0\n--- stdout ---\nhello world\n");
    assert_eq!(stream_bytes(&chunks, OutputStream::Stdout), b"hello world\n");
}

#[tokio::test]
async fn read_takes_a_line_from_stdin() {
    let directory = tempfile::tempdir().unwrap();
    let (input, stdin) = stdin_queue(MAX_QUEUED_STDIN_BYTES);
    let mut context = ToolContext::new(directory.path());
    context.stdin = Some(stdin);

    let call =
        tokio::spawn(shell().execute(json!({"command": "printf 'name? '; read line; echo \"got:$line\""}), context));
    // No end of file: `read` returns on the newline alone.
    input.try_send(StdinInput::Data(b"troupe\n".to_vec())).unwrap();
    let result = tokio::time::timeout(STEP, call).await.unwrap().unwrap();
    assert_eq!(result.output, "exit code 0\n--- stdout ---\nname? got:troupe\n");
}

#[tokio::test]
async fn without_run_stdin_the_child_reads_dev_null() {
    let directory = tempfile::tempdir().unwrap();
    let result = run("cat; echo done", ToolContext::new(directory.path())).await;
    assert_eq!(result.output, "exit code 0\n--- stdout ---\ndone\n");
}

#[tokio::test]
async fn a_closed_stdin_channel_is_end_of_input() {
    let directory = tempfile::tempdir().unwrap();
    let (input, stdin) = stdin_queue(MAX_QUEUED_STDIN_BYTES);
    drop(input);
    let mut context = ToolContext::new(directory.path());
    context.stdin = Some(stdin);
    let result = run("cat; echo done", context).await;
    assert_eq!(result.output, "exit code 0\n--- stdout ---\ndone\n");
}

/// Starts `sleep` in the background of the shell and returns the call and the grandchild's pid, read from the
/// live output.
async fn start_with_grandchild(
    context_cwd: &std::path::Path,
    arguments: serde_json::Value,
) -> (JoinHandle<PersistedToolResult>, u32, tokio_util::sync::CancellationToken) {
    let (sender, mut receiver) = mpsc::channel(64);
    let mut context = ToolContext::new(context_cwd);
    context.output = Some(sender);
    let cancel = context.cancel.clone();
    let call = tokio::spawn(shell().execute(arguments, context));
    let mut printed = Vec::new();
    let pid = tokio::time::timeout(STEP, async {
        loop {
            let chunk = receiver.recv().await.expect("the pid is printed");
            printed.extend_from_slice(&chunk.data);
            if let Some(line) = printed.strip_suffix(b"\n") {
                return std::str::from_utf8(line).unwrap().trim().parse::<u32>().unwrap();
            }
        }
    })
    .await
    .unwrap();
    // Keep draining so the shell never blocks on a full channel.
    tokio::spawn(async move { while receiver.recv().await.is_some() {} });
    (call, pid, cancel)
}

#[tokio::test]
async fn cancel_kills_the_whole_process_tree() {
    let directory = tempfile::tempdir().unwrap();
    let (call, grandchild, cancel) =
        start_with_grandchild(directory.path(), json!({"command": "sleep 100 & echo $!; wait"})).await;
    assert!(!process_is_gone(grandchild), "the grandchild runs before the cancel");

    cancel.cancel();
    let result = tokio::time::timeout(STEP, call).await.unwrap().unwrap();
    assert_eq!(result.status, ToolResultStatus::Cancelled);
    assert!(result.output.starts_with("cancelled; the command and everything it started were killed"));
    wait_until_gone(grandchild).await;
}

#[tokio::test]
async fn timeout_kills_the_tree_and_is_an_error() {
    let directory = tempfile::tempdir().unwrap();
    let (call, grandchild, _cancel) =
        start_with_grandchild(directory.path(), json!({"command": "sleep 100 & echo $!; wait", "timeout_ms": 300}))
            .await;
    let result = tokio::time::timeout(STEP, call).await.unwrap().unwrap();
    assert_eq!(result.status, ToolResultStatus::Error);
    assert!(
        result.output.starts_with("timed out after 300 ms; the command and everything it started were killed"),
        "{}",
        result.output
    );
    wait_until_gone(grandchild).await;
}

#[tokio::test]
async fn background_jobs_are_killed_when_the_command_exits() {
    let directory = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let (call, grandchild, _cancel) =
        start_with_grandchild(directory.path(), json!({"command": "sleep 100 & echo $!"})).await;
    let result = tokio::time::timeout(STEP, call).await.unwrap().unwrap();
    assert_eq!(result.status, ToolResultStatus::Ok);
    assert!(started.elapsed() < Duration::from_secs(10), "the call did not wait for the background job");
    wait_until_gone(grandchild).await;
}

#[tokio::test]
async fn a_dropped_call_kills_its_process_group() {
    let directory = tempfile::tempdir().unwrap();
    let (call, grandchild, _cancel) =
        start_with_grandchild(directory.path(), json!({"command": "sleep 100 & echo $!; wait"})).await;
    call.abort();
    let _ = tokio::time::timeout(STEP, call).await.unwrap();
    wait_until_gone(grandchild).await;
}

#[tokio::test]
async fn large_output_is_capped_in_the_result_but_fully_streamed() {
    let directory = tempfile::tempdir().unwrap();
    let mut context = ToolContext::new(directory.path());
    context.limits.max_output_bytes = 1000;

    // 300 000 bytes: "0123456789" repeated, then a distinct ending.
    let command =
        "i=0; while [ $i -lt 3000 ]; do printf '0123456789%.0s' 1 2 3 4 5 6 7 8 9 10; i=$((i+1)); done; printf END";
    let (result, chunks) = run_streaming(command, context, 16).await;

    let streamed = stream_bytes(&chunks, OutputStream::Stdout);
    assert_eq!(streamed.len(), 300_003);
    assert!(streamed.ends_with(b"789END"));
    assert_eq!(result.status, ToolResultStatus::Ok);
    let expected_head = "0123456789".repeat(50);
    let expected_tail = format!("{}END", &"0123456789".repeat(50)[3..]);
    assert_eq!(
        result.output,
        format!("exit code 0\n--- stdout ---\n{expected_head}…[299003 bytes elided]…{expected_tail}")
    );
}

#[tokio::test]
async fn a_cancelled_context_never_starts_the_command() {
    let directory = tempfile::tempdir().unwrap();
    let context = ToolContext::new(directory.path());
    context.cancel.cancel();
    let result = run("touch started", context).await;
    assert_eq!(result.status, ToolResultStatus::Cancelled);
    assert!(!directory.path().join("started").exists());
}

#[tokio::test]
async fn stdout_and_stderr_chunks_arrive_in_order_per_stream() {
    let directory = tempfile::tempdir().unwrap();
    let context = ToolContext::new(directory.path());
    let (result, chunks) = run_streaming("for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done", context, 4).await;
    let by_stream: HashMap<_, _> = [OutputStream::Stdout, OutputStream::Stderr]
        .into_iter()
        .map(|stream| (stream, String::from_utf8(stream_bytes(&chunks, stream)).unwrap()))
        .collect();
    assert_eq!(by_stream[&OutputStream::Stdout], "out1\nout2\nout3\nout4\nout5\n");
    assert_eq!(by_stream[&OutputStream::Stderr], "err1\nerr2\nerr3\nerr4\nerr5\n");
    assert_eq!(result.status, ToolResultStatus::Ok);
}
