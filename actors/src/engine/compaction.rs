//! `session.compact`: a manual compaction of an idle session.
//!
//! The session's next run would use its latest run's selection (else its creation selection); the summary is asked
//! of that agent's chain from that model on (`crate::compaction`). The compaction gets an id registered with the
//! runs, so `run.cancel {run_id: <compaction id>}` reaches the session, which cancels it. The work after the start
//! runs in its own task: a client that goes away mid-way does not leave the session busy, the compaction ends and
//! records its end either way.

use troupe_protocol::RpcError;
use troupe_protocol::types::events::{CompactionOutcome, CompactionTrigger};
use troupe_protocol::types::session::{SessionCompactParams, SessionCompactResult};
use troupe_runtime::clock::new_id;

use super::Engine;
use crate::compaction::{Summary, SummaryJob, chain_from, checkpoint_event, summarize};
use crate::error::EngineError;
use crate::runtime_actor::GetSnapshot;
use crate::session_actor::{BeginCompaction, ManualStart, NextRunSelection, RecordCompaction};

/// The `cancellation_reason` of a compaction cancelled by `run.cancel`.
const CANCELLED_BY_CLIENT: &str = "cancelled by a client";

impl Engine {
    pub(super) async fn compact(&self, params: SessionCompactParams) -> Result<SessionCompactResult, RpcError> {
        let session_id = params.session_id;
        if let Some(focus) = &params.focus {
            self.check_input_size("the focus", focus)?;
        }
        let selection = self.ask_session(&session_id, || NextRunSelection).await?;
        let snapshot = self.runtime.send(GetSnapshot).await.map_err(|_| EngineError::ShuttingDown)?;
        let agent_chain = crate::run_start::agent_chain(&snapshot, &selection.agent);
        let chain = chain_from(&selection.model, &agent_chain);
        let compaction_id = new_id();
        let cancel = tokio_util::sync::CancellationToken::new();
        let registration = self.services.runs.register(&compaction_id, &session_id);
        let focus = params.focus.filter(|focus| !focus.trim().is_empty());
        let start = self
            .ask_session(&session_id, || BeginCompaction {
                compaction_id: compaction_id.clone(),
                focus: focus.clone(),
                model: selection.model.model.clone(),
                cancel: cancel.clone(),
            })
            .await?;
        let source = match start {
            ManualStart::Skipped { reason } => {
                return Ok(SessionCompactResult { compacted: false, reason: Some(reason), cancellation_reason: None });
            }
            ManualStart::Started(source) => source,
        };
        let services = self.services.clone();
        let router = self.router().clone();
        let work = async move {
            let _registration = registration;
            let outcome = summarize(SummaryJob {
                services: &services,
                compaction_id: &compaction_id,
                chain: &chain,
                agent: &selection.agent,
                source: &source,
                focus: focus.as_deref(),
                cancel: &cancel,
                budget: None,
            })
            .await;
            let mut events = outcome.events;
            let (result, ended) = match outcome.summary {
                Summary::Written(summary) => {
                    events.push(checkpoint_event(&compaction_id, summary, &source, CompactionTrigger::Manual));
                    let result = SessionCompactResult { compacted: true, reason: None, cancellation_reason: None };
                    (result, (CompactionOutcome::Committed, None))
                }
                Summary::Failed(reason) => {
                    let result = SessionCompactResult {
                        compacted: false,
                        reason: Some(reason.clone()),
                        cancellation_reason: None,
                    };
                    (result, (CompactionOutcome::Failed, Some(reason)))
                }
                Summary::Cancelled => {
                    let reason = CANCELLED_BY_CLIENT.to_owned();
                    let result = SessionCompactResult {
                        compacted: false,
                        reason: None,
                        cancellation_reason: Some(reason.clone()),
                    };
                    (result, (CompactionOutcome::Cancelled, Some(reason)))
                }
            };
            router
                .ask(&session_id, || RecordCompaction {
                    compaction_id: compaction_id.clone(),
                    events: events.clone(),
                    outcome: Some(ended.clone()),
                })
                .await?;
            Ok::<_, EngineError>(result)
        };
        let joined = tokio::spawn(work).await;
        let result =
            joined.map_err(|error| EngineError::Internal { detail: format!("the compaction failed: {error}") })??;
        Ok(result)
    }
}
