//! One tool call of a run: the permission check, `tool_call_started` (accepted, or queued in the session's mailbox,
//! before the tool runs), the execution with its live output masked and streamed to the session, and the masked
//! result. A call of a tool that runs in place and is allowed outright runs where it was judged (`permission.rs`),
//! and only its result comes back here.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{EmittedMessagesError, PersistedToolResult, ToolResultStatus};
use troupe_runtime::model::ToolCallRequest;
use troupe_runtime::model::attachments::check_artifact;
use troupe_runtime::tool_stdin::{MAX_QUEUED_STDIN_BYTES, stdin_queue};
use troupe_runtime::tools::{OutputChunk, ToolContext};

use super::masking::{OutputMasks, mask_result};
use super::permission::{InPlace, Judged};
use super::progress::ProgressRecorder;
use super::{RunLoop, tool_result};
use crate::error::EngineError;
use crate::plugin_tools::{CallIdentity, ToolRef};
use crate::ports::SessionPort;
use crate::ports::session::{AppendTrackedRunEvent, RunOutput, WriteBatchNow};

/// A tool call that ran at least this long looks for data dirs that appeared meanwhile before its result is masked.
const REFRESH_SECRETS_AFTER: Duration = Duration::from_millis(250);

impl RunLoop {
    /// Checks permission, then executes one tool call with its output streamed to the session.
    pub(super) async fn execute_tool_call(&self, call: &ToolCallRequest) -> PersistedToolResult {
        if let Some(result) = self.goal_tool_call(call).await {
            return result;
        }
        if let Some(result) = self.delegate_call(call).await {
            return result;
        }
        let services = &self.setup.services;
        let Some(tool) = services.tool(&call.tool) else {
            let known: Vec<String> = services.tool_definitions().into_iter().map(|spec| spec.name).collect();
            return tool_result(
                ToolResultStatus::Error,
                format!("there is no tool `{}`; the tools are: {}", call.tool, known.join(", ")),
            );
        };
        if let ToolRef::Builtin(tool) = &tool
            && let Some(refusal) = tool.refusal(&services.sandbox)
        {
            return tool_result(ToolResultStatus::Denied, refusal);
        }
        let cancel = self.control.cancel.child_token();
        let judged_at = std::time::Instant::now();
        let abandon_in_place = Arc::new(Mutex::new(false));
        let in_place = match &tool {
            ToolRef::Builtin(builtin) if builtin.in_place().is_some() => Some(InPlace {
                context: self.tool_context(call, cancel.clone()),
                session: self.setup.session.clone(),
                run_id: self.setup.run_id.clone(),
                tool_call_id: call.tool_call_id.clone(),
                abandoned: abandon_in_place.clone(),
            }),
            _ => None,
        };
        // A call that runs where it is judged is abandoned like any other once the run is cancelled; its start is
        // then sent before this, or never.
        let judged = tokio::select! {
            judged = self.judge_call(call, in_place) => judged,
            () = abandon_after_grace(&cancel) => {
                *abandon_in_place.lock() = true;
                return abandoned(&call.tool, &call.tool_call_id);
            }
        };
        let request = match judged {
            Judged::Refused(refusal) => return self.finish_result(call, refusal, &[], judged_at).await,
            Judged::Ran(result) => return self.finish_result(call, result, &[], judged_at).await,
            Judged::Allowed(request) => request,
            Judged::Ask { request, reason } => match self.ask_user(call, &request, reason).await {
                Some(refusal) => return refusal,
                None => request,
            },
        };
        let started = EventPayload::ToolCallStarted {
            tool_call_id: call.tool_call_id.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            action: request.action,
            resource: request.resource.clone(),
        };
        // Accepted (its place in the log fixed) before the call runs, but not waited on to be durable: the turn
        // that asked for the call is durable already. Live output is published at once, though, so the first
        // chunk waits until this event is durable: a subscriber never sees output of a call it has not seen start.
        let tracked = AppendTrackedRunEvent { run_id: self.setup.run_id.clone(), payload: started };
        let mut started = match self.setup.session.send(tracked).await {
            Ok(Ok(tracked)) => Some(tracked.durable),
            // The session stopped or the run is no longer active; the run's next durable point notices it.
            Ok(Err(_)) | Err(_) => None,
        };

        let (output_sender, mut output) = mpsc::channel::<OutputChunk>(64);
        let (stdin_sender, stdin) = stdin_queue(MAX_QUEUED_STDIN_BYTES);
        *self.control.stdin.lock() = Some((call.tool_call_id.clone(), stdin_sender));
        let mut context = self.tool_context(call, cancel.clone());
        context.output = Some(output_sender);
        context.stdin = Some(stdin);
        // The call was allowed as described, including a resource outside the cwd when the mode allows it.
        context.approved_request = Some(request);
        let started_at = std::time::Instant::now();
        let mut progress = ProgressRecorder::new(call.tool_call_id.clone());
        let mut masks = OutputMasks::new(&services.secrets);
        let execution: futures::future::BoxFuture<'_, PersistedToolResult> = match &tool {
            ToolRef::Builtin(tool) => tool.execute(call.arguments.clone(), context),
            ToolRef::Mcp(tool) => troupe_runtime::tools::Tool::execute(tool.as_ref(), call.arguments.clone(), context),
            ToolRef::Plugin(tool) => {
                let identity = CallIdentity {
                    session_id: &self.setup.session_id,
                    run_id: &self.setup.run_id,
                    tool_call_id: &call.tool_call_id,
                };
                Box::pin(tool.call(identity, call.arguments.clone(), context.cancel))
            }
        };
        tokio::pin!(execution);
        let abandon = abandon_after_grace(&cancel);
        tokio::pin!(abandon);
        let result = loop {
            tokio::select! {
                result = &mut execution => break result,
                () = &mut abandon => break abandoned(&call.tool, &call.tool_call_id),
                Some(chunk) = output.recv() => {
                    if let Some(chunk) = masks.mask(chunk) {
                        wait_until_started(&self.setup.session, &mut started).await;
                        self.forward_output(&mut progress, &call.tool_call_id, chunk).await;
                    }
                }
            }
        };
        let mut rest: Vec<OutputChunk> = Vec::new();
        while let Ok(chunk) = output.try_recv() {
            rest.extend(masks.mask(chunk));
        }
        rest.extend(masks.finish());
        for chunk in rest {
            wait_until_started(&self.setup.session, &mut started).await;
            self.forward_output(&mut progress, &call.tool_call_id, chunk).await;
        }
        *self.control.stdin.lock() = None;
        for payload in progress.finish() {
            self.emit(payload).await;
        }
        self.finish_result(call, result, &masks.labels(), started_at).await
    }

    /// What a call's tool runs with, but its output, its stdin and its approved request (the caller's to set).
    fn tool_context(&self, call: &ToolCallRequest, cancel: CancellationToken) -> ToolContext {
        let services = &self.setup.services;
        ToolContext {
            cwd: self.setup.cwd.clone(),
            limits: services.tool_limits.clone(),
            output: None,
            stdin: None,
            cancel,
            approved_request: None,
            sandbox: services.sandbox.clone(),
            temp_dir: self.workspace.as_ref().and_then(|workspace| workspace.temp_dir.clone()),
            writable: self.workspace.as_ref().map(|workspace| workspace.git_dirs.clone()).unwrap_or_default(),
            changes: Some(troupe_runtime::changes::ChangeRecorder {
                store: services.changes.clone(),
                session_id: self.setup.session_id.clone(),
                run_id: self.setup.run_id.clone(),
                tool_call_id: call.tool_call_id.clone(),
            }),
        }
    }

    /// The result as recorded: secrets masked (`streamed`: the labels already masked in its live output), and its
    /// emitted messages checked. A call that ran since `started_at` for a while looks for new data dirs first.
    async fn finish_result(
        &self,
        call: &ToolCallRequest,
        result: PersistedToolResult,
        streamed: &[String],
        started_at: std::time::Instant,
    ) -> PersistedToolResult {
        let services = &self.setup.services;
        if started_at.elapsed() >= REFRESH_SECRETS_AFTER {
            // Another daemon may have started while the call ran: its data dir's secrets are masked in the result
            // too (the live output was masked with the secrets known at the start).
            let sandbox = services.sandbox.clone();
            if let Err(error) = tokio::task::spawn_blocking(move || sandbox.refresh_masked_secrets()).await {
                tracing::warn!(%error, "could not look for new data dirs before masking a tool result");
            }
        }
        checked_messages(mask_result(&services.secrets, result, streamed), &call.tool, &services.data_dir)
    }

    async fn forward_output(&self, progress: &mut ProgressRecorder, tool_call_id: &str, chunk: OutputChunk) {
        // Awaited, so a command that writes faster than subscribers are served slows down at its pipe instead of
        // filling the session's mailbox.
        let _ = self
            .setup
            .session
            .send(RunOutput {
                run_id: self.setup.run_id.clone(),
                tool_call_id: tool_call_id.to_owned(),
                stream: chunk.stream,
                offset: chunk.offset,
                data: chunk.data.clone(),
            })
            .await;
        if let Some(payload) = progress.record(chunk) {
            self.emit(payload).await;
        }
    }
}

/// Enforces the reference's bounds on the messages a tool emits (`PersistedToolResult::validate`) and checks that
/// every artifact they attach is stored, before the result is recorded. Messages that break them are refused whole:
/// the result becomes an `error` without them and its output says why, so the model knows, and the log never holds
/// a result that a later load would have to repair or a reference to nothing.
pub(super) fn checked_messages(mut result: PersistedToolResult, tool: &str, data_dir: &Path) -> PersistedToolResult {
    let checked = result.validate().and_then(|()| {
        // At most MAX_RESULT_FILES `stat`s, on the run's task: not worth a blocking thread.
        result.file_parts().try_for_each(|(message, part, path)| {
            check_artifact(data_dir, path).map_err(|reason| EmittedMessagesError::BadFile { message, part, reason })
        })
    });
    if let Err(reason) = checked {
        tracing::warn!(tool, %reason, "a tool emitted additional messages out of bounds; they were refused");
        result.additional_messages.clear();
        if result.status == ToolResultStatus::Ok {
            result.status = ToolResultStatus::Error;
        }
        result.output.push_str(&format!("\n\n[the tool's additional messages were refused: {reason}]"));
    }
    result
}

/// How long a cancelled call may take to end of itself before the run stops waiting for it.
const CANCEL_GRACE: Duration = Duration::from_secs(3);

/// Ends `CANCEL_GRACE` after `cancel` is cancelled: once the run is cancelled, a call has that long to end of
/// itself (a shell kills its process group); after that the run stops waiting for it, so that no stuck tool keeps
/// the run (and its session) busy.
async fn abandon_after_grace(cancel: &CancellationToken) {
    cancel.cancelled().await;
    tokio::time::sleep(CANCEL_GRACE).await;
}

/// How many calls this daemon has stopped waiting for: each may hold a blocking thread that never returns.
static ABANDONED_CALLS: AtomicUsize = AtomicUsize::new(0);

/// The result of a call that did not end within [`CANCEL_GRACE`] of its run's cancellation. Dropping its future
/// detaches whatever blocking work it started (the thread is left to end by itself, or never); that is logged
/// with how many such calls this daemon has left behind.
fn abandoned(tool: &str, tool_call_id: &str) -> PersistedToolResult {
    let count = ABANDONED_CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::warn!(
        tool,
        tool_call_id,
        abandoned_calls = count,
        "a cancelled tool call did not end in time; the run stopped waiting for it (its blocking work may stay stuck)"
    );
    tool_result(
        ToolResultStatus::Cancelled,
        format!("cancelled; `{tool}` did not stop within {} s and was abandoned", CANCEL_GRACE.as_secs()),
    )
}

/// Waits once for the `tool_call_started` event to be durable (a later call returns at once).
async fn wait_until_started(session: &SessionPort, started: &mut Option<oneshot::Receiver<Result<(), EngineError>>>) {
    if let Some(durable) = started.take() {
        // The start may be waiting for company in the session's next batch: it is wanted now.
        session.do_send(WriteBatchNow);
        // A failure here means the session stopped; the next durable point of the run notices it.
        let _ = durable.await;
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::run::{MessagePart, MessageRole, ToolEmittedMessage};

    use super::*;

    fn with_messages(messages: Vec<ToolEmittedMessage>) -> PersistedToolResult {
        let mut result = tool_result(ToolResultStatus::Ok, "done".into());
        result.additional_messages = messages;
        result
    }

    #[test]
    fn messages_within_bounds_are_kept_and_out_of_bounds_ones_refused_with_an_error() {
        let data_dir = tempfile::tempdir().unwrap();
        let text = ToolEmittedMessage { role: MessageRole::User, parts: vec![MessagePart::Text { text: "t".into() }] };
        let kept = checked_messages(with_messages(vec![text.clone(); 4]), "probe", data_dir.path());
        assert_eq!(
            (kept.status, kept.additional_messages.len(), kept.output.as_str()),
            (ToolResultStatus::Ok, 4, "done")
        );

        let refused = checked_messages(with_messages(vec![text.clone(); 5]), "probe", data_dir.path());
        assert!(refused.additional_messages.is_empty());
        assert_eq!(refused.status, ToolResultStatus::Error);
        assert!(refused.output.starts_with("done") && refused.output.contains("at most 4"), "{}", refused.output);

        let empty = ToolEmittedMessage { role: MessageRole::System, parts: Vec::new() };
        let refused = checked_messages(with_messages(vec![text, empty]), "probe", data_dir.path());
        assert!(refused.additional_messages.is_empty());
        assert!(refused.output.contains("no content parts"), "{}", refused.output);
    }

    #[test]
    fn every_attached_artifact_must_be_a_stored_regular_file() {
        let data_dir = tempfile::tempdir().unwrap();
        let artifacts = data_dir.path().join("artifacts");
        std::fs::create_dir_all(artifacts.join("dir.png")).unwrap();
        std::fs::write(artifacts.join("chart.png"), b"png").unwrap();
        std::os::unix::fs::symlink(artifacts.join("chart.png"), artifacts.join("link.png")).unwrap();
        let attaching = |name: &str| {
            let file =
                MessagePart::File { path: format!("artifacts/{name}"), mime_type: "image/png".into(), name: None };
            with_messages(vec![ToolEmittedMessage { role: MessageRole::User, parts: vec![file] }])
        };
        let kept = checked_messages(attaching("chart.png"), "probe", data_dir.path());
        assert_eq!((kept.status, kept.additional_messages.len()), (ToolResultStatus::Ok, 1));
        for name in ["missing.png", "dir.png", "link.png"] {
            let refused = checked_messages(attaching(name), "probe", data_dir.path());
            assert_eq!((refused.status, refused.additional_messages.len()), (ToolResultStatus::Error, 0), "{name}");
            assert!(refused.output.contains("file part 0 of additional message 0: the artifact is not a stored"));
        }
    }
}
