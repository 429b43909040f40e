//! The run methods that are more than one message: `run.start`, `run.steer` and `run.tool_stdin`. The files a
//! start or a steer attaches are checked first and stored (`troupe_runtime::input_files`) before the session is
//! asked, so the event naming them never names a file that is not on disk.

use std::path::Path;

use troupe_protocol::RpcError;
use troupe_protocol::types::attachment::AttachedFile;
use troupe_protocol::types::run::{
    RunStartParams, RunStartResult, RunSteerParams, RunSteerResult, RunToolStdinParams, RunToolStdinResult,
};
use troupe_runtime::catalog::validate_selection;
use troupe_runtime::input_files::{CheckedAttachment, check_attachments, store_attachments};
use troupe_runtime::tools::{CwdProblem, check_session_cwd};

use super::Engine;
use super::skills::literal_input;
use crate::error::{EngineError, check_idempotency_key};
use crate::run_start::{PreparedRun, RunRequest, StartRun};
use crate::runtime_actor::GetSnapshot;
use crate::session_actor::{SteerRun, ToolStdin};
use crate::session_supervisor::{ApprovalsFor, IndexedMeta};

impl Engine {
    /// `run.start`: checks the input and the selection, resolves the agent's model chain, the tree's approvals,
    /// the policy and a skill invocation, and asks the session to start the run.
    pub(super) async fn start_run(&self, params: RunStartParams) -> Result<RunStartResult, RpcError> {
        check_idempotency_key("client_run_id", &params.client_run_id)?;
        if params.input.trim().is_empty() {
            return Err(EngineError::EmptyInput { what: "the run's input" }.into());
        }
        self.check_input_size("the run's input", &params.input)?;
        let checked = check_attachments(&params.attachments).map_err(EngineError::InvalidAttachment)?;
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| RpcError::from(EngineError::ShuttingDown))?;
        validate_selection(&snapshot, &params.selection).map_err(EngineError::InvalidSelection)?;
        let approvals = self.supervisor_ask(ApprovalsFor { session_id: params.session_id.clone() }).await??;
        self.check_session_cwd(&params.session_id).await?;
        let prepared = PreparedRun::new(&self.services, &snapshot, params.selection.clone(), approvals)?;
        let skill = self.skill_invocation(&params.session_id, &params.selection, &params.input).await?;
        // Durable before the event that names them is appended, so no event names a file a crash could lose.
        let attachments = self.store_attachments(checked).await?;
        let request = RunRequest {
            client_run_id: params.client_run_id.clone(),
            input: literal_input(&params.input),
            attachments,
            reset_fallback: params.reset_fallback,
            skill,
        };
        let start = StartRun { request, prepared };
        let run_id = self.ask_session(&params.session_id, || start.clone()).await?;
        self.services.runs.note_started(&run_id, &params.session_id);
        Ok(RunStartResult { run_id })
    }

    /// Refuses (`session_cwd_unusable`) a run in a session whose recorded cwd meets a symlink now (another
    /// process replaced the folder, or one above it) or is no longer a directory: its tools would refuse the cwd
    /// anyway, and its skills would be read from wherever the link leads. A cwd that is merely missing is left to
    /// the tools to report, as before. One `openat2` on a blocking thread.
    async fn check_session_cwd(&self, session_id: &str) -> Result<(), EngineError> {
        let meta = self.supervisor_ask(IndexedMeta { session_id: session_id.to_owned() }).await??;
        let cwd = meta.cwd.clone();
        let checked = tokio::task::spawn_blocking(move || check_session_cwd(Path::new(&cwd)))
            .await
            .map_err(|error| EngineError::Internal { detail: format!("checking the session's cwd failed: {error}") })?;
        match checked {
            Ok(()) | Err(CwdProblem::Inaccessible { .. }) => Ok(()),
            Err(problem) => Err(EngineError::SessionCwdUnusable {
                session_id: session_id.to_owned(),
                cwd: meta.cwd,
                reason: problem.to_string(),
            }),
        }
    }

    /// Writes checked attachments as artifacts of the data directory, durably, on a blocking thread.
    async fn store_attachments(&self, checked: Vec<CheckedAttachment>) -> Result<Vec<AttachedFile>, EngineError> {
        if checked.is_empty() {
            return Ok(Vec::new());
        }
        let data_dir = self.services.data_dir.clone();
        tokio::task::spawn_blocking(move || store_attachments(&data_dir, checked))
            .await
            .map_err(|error| EngineError::Internal { detail: format!("storing the attachments failed: {error}") })?
            .map_err(|error| EngineError::Internal { detail: format!("the attachments could not be stored: {error}") })
    }

    /// `run.steer`: input for the run's next turn.
    pub(super) async fn steer_run(&self, params: RunSteerParams) -> Result<RunSteerResult, RpcError> {
        if params.input.trim().is_empty() {
            return Err(EngineError::EmptyInput { what: "the steering input" }.into());
        }
        self.check_input_size("the steering input", &params.input)?;
        let checked = check_attachments(&params.attachments).map_err(EngineError::InvalidAttachment)?;
        let session_id = self.session_of_run(&params.run_id).await?;
        let attachments = self.store_attachments(checked).await?;
        let accepted = self
            .ask_session(&session_id, || SteerRun {
                run_id: params.run_id.clone(),
                input: params.input.clone(),
                attachments: attachments.clone(),
            })
            .await?;
        Ok(RunSteerResult { accepted })
    }

    /// `run.tool_stdin`: bytes (or the end) for a running tool's stdin.
    pub(super) async fn tool_stdin(&self, params: RunToolStdinParams) -> Result<RunToolStdinResult, RpcError> {
        let session_id = self.session_of_run(&params.run_id).await?;
        let accepted = self
            .ask_session(&session_id, || ToolStdin {
                run_id: params.run_id.clone(),
                tool_call_id: params.tool_call_id.clone(),
                data: params.data.clone(),
                eof: params.eof,
            })
            .await?;
        Ok(RunToolStdinResult { accepted })
    }
}
