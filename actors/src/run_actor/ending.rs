//! The end of a run: its log line, the terminal event (unless the turn that completed it appended it already),
//! the pending approvals cancelled, and the end reported to the metrics and the run registry.

use troupe_protocol::types::events::EventPayload;
use troupe_runtime::metrics;

use super::{RunLoop, RunOutcome};
use crate::ports::session::CancelPendingApprovals;
use crate::run_registry::RunEnd;

impl RunLoop {
    /// The operator's log line for a run's end: its outcome, the model it ended on and how long it took.
    pub(super) fn log_end(&self, outcome: &RunOutcome, duration: std::time::Duration) {
        let (word, error) = match outcome {
            RunOutcome::Completed { .. } => ("completed", None),
            RunOutcome::Failed { error, .. } => ("failed", Some(error.as_str())),
            RunOutcome::Cancelled => ("cancelled", None),
            RunOutcome::SessionLost => ("interrupted", None),
        };
        let model = self.setup.model_chain.get(self.chain_index).map_or("", |model| model.model.as_str());
        tracing::info!(
            session = %self.setup.session_id,
            run = %self.setup.run_id,
            agent = %self.setup.selection.agent,
            model,
            outcome = word,
            duration_ms = duration.as_millis() as u64,
            error = error.unwrap_or(""),
            "run ended"
        );
    }

    /// Records the terminal event (unless the session is gone), then reports the end to whoever awaits it (a
    /// parent's `delegate` call).
    pub(super) async fn finish(&self, outcome: RunOutcome) {
        let (payload, end) = match outcome {
            RunOutcome::Completed { final_text } => {
                self.report_end(RunEnd::Completed { final_text });
                return;
            }
            RunOutcome::Failed { error, model_error, resolved_model } => (
                EventPayload::RunFailed { error: error.clone(), model_error, resolved_model },
                RunEnd::Failed { error },
            ),
            RunOutcome::Cancelled => {
                (EventPayload::RunCancelled { reason: Some("cancelled by a client".into()) }, RunEnd::Cancelled)
            }
            RunOutcome::SessionLost => {
                self.report_end(RunEnd::Interrupted);
                return;
            }
        };
        let cancel_approvals =
            CancelPendingApprovals { run_id: self.setup.run_id.clone(), reason: "the run ended".to_owned() };
        if let Ok(Err(error)) = self.setup.session.send(cancel_approvals).await {
            tracing::warn!(run_id = %self.setup.run_id, %error, "could not cancel the run's pending approvals");
        }
        match self.commit(payload, None).await {
            Ok(_) => self.report_end(end),
            Err(error) => {
                tracing::warn!(run_id = %self.setup.run_id, %error, "could not record the end of a run");
                self.report_end(RunEnd::Interrupted);
            }
        }
    }

    pub(super) fn report_end(&self, end: RunEnd) {
        let outcome = match end {
            RunEnd::Completed { .. } => metrics::RunOutcome::Completed,
            RunEnd::Failed { .. } => metrics::RunOutcome::Failed,
            RunEnd::Cancelled => metrics::RunOutcome::Cancelled,
            RunEnd::Interrupted => metrics::RunOutcome::Interrupted,
        };
        self.setup.services.metrics.run_ended(outcome);
        self.setup.services.runs.report_end(&self.setup.session_id, &self.setup.run_id, end);
    }
}
