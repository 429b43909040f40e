//! Compaction inside a run: before a request whose estimate would not fit the model's context window (`[models]`
//! gives the window, `[compaction] auto` allows it), and after a provider answered that a request did not fit
//! (`context_length`): one overflow recovery per model turn, then the request is retried from the checkpoint; a
//! second overflow, or a recovery that commits no checkpoint, fails the run.
//!
//! The run records the compaction as its own events (`compaction_started`, the usage, the checkpoint, awaited until
//! durable, `compaction_ended`), asks its session what to summarize, and after the checkpoint replaces its
//! in-memory history with the session's, which now starts with the summary.

use std::sync::Arc;

use troupe_protocol::types::common::ModelSelection;
use troupe_protocol::types::events::{CompactionOutcome, CompactionTrigger, EventPayload};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::new_id;
use troupe_runtime::compaction::{SUMMARY_MAX_OUTPUT_TOKENS, answer_reserve, estimate_tokens, exceeds_window};
use troupe_runtime::model::{ModelError, ModelErrorKind};

use super::{RunLoop, RunOutcome, TurnError};
use crate::compaction::{Summary, SummaryJob, checkpoint_event, summarize};
use crate::ports::session::{CompactionSourceOfRun, RunHistory};

impl RunLoop {
    /// Whether the next request on `model` would not fit its context window (when known) less the answer reserve.
    ///
    /// Not when compacting cannot help: a history of the run's input alone has nothing to summarize, and when the
    /// system prompt, the tools, a summary and the reserve alone exceed the window, no checkpoint makes it fit (the
    /// request goes as it is, and an overflow says so).
    fn needs_compaction(&self, model: &ModelSelection) -> bool {
        let services = &self.setup.services;
        if !services.compaction.auto || self.history.len() <= 1 {
            return false;
        }
        let Some(window) = services.models.context_window(&model.model) else { return false };
        let reserve = answer_reserve(window, services.compaction.reserve_tokens);
        let fixed = estimate_tokens(Some(&self.system_prompt), &[], &self.tool_specs);
        if exceeds_window(fixed + u64::from(SUMMARY_MAX_OUTPUT_TOKENS), window, reserve) {
            return false;
        }
        exceeds_window(estimate_tokens(Some(&self.system_prompt), &self.history, &self.tool_specs), window, reserve)
    }

    /// Compacts first when the next request on `model` would not fit; once per model turn (`tried`).
    pub(super) async fn compact_if_needed(
        &mut self,
        model: &ModelSelection,
        tried: &mut bool,
    ) -> Result<(), TurnError> {
        if *tried || !self.needs_compaction(model) {
            return Ok(());
        }
        *tried = true;
        self.compact(CompactionTrigger::Auto, None).await.map(|_| ()).map_err(TurnError::Outcome)
    }

    /// After a failed attempt: when the provider said the request did not fit and this turn has not recovered from
    /// that yet, records the attempt as abandoned, compacts and says to retry. A recovery that commits nothing fails
    /// the run (the request cannot fit as it is); any other error takes its ordinary course (`Ok(false)`).
    pub(super) async fn recover_overflow(
        &mut self,
        error: &ModelError,
        tried: &mut bool,
        attempt_id: &str,
        model: &ModelSelection,
    ) -> Result<bool, TurnError> {
        if error.kind != ModelErrorKind::ContextLength || *tried {
            return Ok(false);
        }
        *tried = true;
        self.post(EventPayload::AttemptAbandoned {
            attempt_id: attempt_id.to_owned(),
            model: model.model.clone(),
            error: error.summary(),
            will_retry: true,
        });
        // The summary request must be smaller than the request the provider refused, whatever the estimate says.
        let refused = estimate_tokens(Some(&self.system_prompt), &self.history, &self.tool_specs);
        if self.compact(CompactionTrigger::Overflow, Some(refused * 3 / 4)).await.map_err(TurnError::Outcome)? {
            return Ok(true);
        }
        Err(TurnError::Outcome(RunOutcome::Failed {
            error: format!(
                "{} failed: {}; compacting the history to recover did not commit a checkpoint",
                model.model, error.message
            ),
            model_error: Some(error.summary()),
            resolved_model: Some(model.model.clone()),
        }))
    }

    /// Summarizes the session's history with the run's models (from the one in use on) and continues from the
    /// checkpoint. Whether a checkpoint was committed; `Err` when the run must end (cancelled, session gone).
    async fn compact(&mut self, trigger: CompactionTrigger, budget: Option<u64>) -> Result<bool, RunOutcome> {
        let session = self.setup.session.clone();
        let run_id = self.setup.run_id.clone();
        let source = match session.send(CompactionSourceOfRun { run_id: run_id.clone() }).await {
            Ok(Ok(Some(source))) => source,
            // Nothing since the last checkpoint: there is nothing to make smaller.
            Ok(Ok(None)) => return Ok(false),
            _ => return Err(RunOutcome::SessionLost),
        };
        let chain: Vec<ModelSelection> = self.setup.model_chain[self.chain_index..].to_vec();
        let compaction_id = new_id();
        let started = EventPayload::CompactionStarted {
            compaction_id: compaction_id.clone(),
            trigger,
            focus: None,
            model: chain[0].model.clone(),
        };
        self.emit_as(started, Some(Origin::COMPACTION)).await;
        let outcome = summarize(SummaryJob {
            services: &self.setup.services,
            compaction_id: &compaction_id,
            chain: &chain,
            agent: &self.setup.selection.agent,
            source: &source,
            focus: None,
            cancel: &self.control.cancel,
            budget,
        })
        .await;
        for event in outcome.events {
            self.emit_as(event, Some(Origin::COMPACTION)).await;
        }
        let ended =
            |outcome, reason| EventPayload::CompactionEnded { compaction_id: compaction_id.clone(), outcome, reason };
        match outcome.summary {
            Summary::Written(summary) => {
                let checkpoint = checkpoint_event(&compaction_id, summary, &source, trigger);
                self.commit(checkpoint, Some(Origin::COMPACTION)).await.map_err(|_| RunOutcome::SessionLost)?;
                self.emit_as(ended(CompactionOutcome::Committed, None), Some(Origin::COMPACTION)).await;
                let history = match session.send(RunHistory { run_id }).await {
                    Ok(Ok(history)) => history,
                    _ => return Err(RunOutcome::SessionLost),
                };
                self.history = Arc::new(self.with_attachments(history).await);
                Ok(true)
            }
            Summary::Failed(reason) => {
                tracing::warn!(run_id = %self.setup.run_id, %reason, "a compaction in a run failed");
                self.emit_as(ended(CompactionOutcome::Failed, Some(reason)), Some(Origin::COMPACTION)).await;
                Ok(false)
            }
            Summary::Cancelled => {
                self.emit_as(
                    ended(CompactionOutcome::Cancelled, Some("the run was cancelled".to_owned())),
                    Some(Origin::COMPACTION),
                )
                .await;
                Err(RunOutcome::Cancelled)
            }
        }
    }
}
