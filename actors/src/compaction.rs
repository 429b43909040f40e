//! A compaction's summary request, shared by `session.compact` (`engine/compaction.rs`, the session side in
//! `session_actor/compaction.rs`) and by a run that compacts before a request that would not fit, or after a
//! provider said it did not (`run_actor/compaction.rs`).
//!
//! The session's model is asked for a summary of its history: the models of the chain in order, the first that
//! answers with a non-empty text wins (one attempt each: a compaction that cannot be made now is reported, and a
//! manual one can simply be asked again). When the model's context window is known, the request is made to fit it
//! by eliding the oldest tool units (`troupe_runtime::compaction::summary_request`). Each attempt that reported
//! usage gives a `model_usage_recorded` with purpose `compaction`, stamped with its cost as the run loop does, and
//! each whose model request failed an `internal_agent_failed` carrying the failure's `ModelErrorSummary` (the
//! vendor's body as a bounded, terminal-safe `DiagnosticText`, as for a run's failures); the caller appends them,
//! attributed to its agent.

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use troupe_protocol::types::common::ModelSelection;
use troupe_protocol::types::events::{CompactionTrigger, EventPayload, InternalAgent, UsagePurpose};
use troupe_runtime::clock::new_id;
use troupe_runtime::compaction::{BYTES_PER_TOKEN, SUMMARY_MAX_OUTPUT_TOKENS, answer_reserve, summary_request};
use troupe_runtime::model::{ModelError, StreamEvent, TokenUsage};
use troupe_runtime::transcript::{CompactionCounts, Transcript};

use crate::run_services::RunServices;

/// What a compaction summarizes: a copy of the history as the session has it, and what a checkpoint of it covers.
#[derive(Clone, Debug)]
pub struct CompactionSource {
    pub transcript: Transcript,
    /// The last event the checkpoint will cover.
    pub through_seq: u64,
    pub counts: CompactionCounts,
}

/// One summary request to make.
pub struct SummaryJob<'a> {
    pub services: &'a RunServices,
    /// The compaction the request is for, named by its `internal_agent_failed` events.
    pub compaction_id: &'a str,
    /// Models to try, in order.
    pub chain: &'a [ModelSelection],
    /// The agent the usage is attributed to.
    pub agent: &'a str,
    pub source: &'a CompactionSource,
    pub focus: Option<&'a str>,
    pub cancel: &'a CancellationToken,
    /// An upper bound on the summary request's estimated tokens: after a provider said a request did not fit, the
    /// summary request must be smaller than that request, whatever the estimate says about the window.
    pub budget: Option<u64>,
}

/// How a summary request ended.
pub enum Summary {
    Written(String),
    /// Every model failed; the reason names the last failure.
    Failed(String),
    Cancelled,
}

/// The summary and the records of its attempts, in order: `model_usage_recorded` (purpose `compaction`) of each
/// that reported usage, `internal_agent_failed` of each whose model request failed.
pub struct SummaryOutcome {
    pub summary: Summary,
    pub events: Vec<EventPayload>,
}

/// Asks the chain's models, in order, for a summary of `job.source`.
pub async fn summarize(job: SummaryJob<'_>) -> SummaryOutcome {
    let mut events = Vec::new();
    let mut last_failure = "the session has no model to summarize with".to_owned();
    for model in job.chain {
        if job.cancel.is_cancelled() {
            return SummaryOutcome { summary: Summary::Cancelled, events };
        }
        let reason = match attempt(&job, model, &mut events).await {
            Attempt::Written(text) => return SummaryOutcome { summary: Summary::Written(text), events },
            Attempt::Cancelled => return SummaryOutcome { summary: Summary::Cancelled, events },
            Attempt::Failed(reason) => reason,
            Attempt::ModelFailed(error) => {
                let reason = error.message.clone();
                events.push(EventPayload::InternalAgentFailed {
                    agent: InternalAgent::ContextCompaction,
                    model: model.model.clone(),
                    compaction_id: Some(job.compaction_id.to_owned()),
                    error: error.summary(),
                });
                reason
            }
        };
        tracing::debug!(model = %model.model, %reason, "a compaction's summary request failed");
        last_failure = format!("{} could not summarize: {reason}", model.model);
    }
    SummaryOutcome { summary: Summary::Failed(last_failure), events }
}

enum Attempt {
    Written(String),
    /// The model answered, but not with a usable summary.
    Failed(String),
    /// The model request itself failed (or the model could not be resolved).
    ModelFailed(ModelError),
    Cancelled,
}

async fn attempt(job: &SummaryJob<'_>, model: &ModelSelection, usage: &mut Vec<EventPayload>) -> Attempt {
    let models = &job.services.models;
    let (provider, model_id) = match models.resolve(&model.model) {
        Ok(resolved) => resolved,
        Err(error) => return Attempt::ModelFailed(error),
    };
    let window = models.context_window(&model.model);
    // The request fits when its estimate is at most `limit`: the window less the answer reserve, and the budget.
    let window_limit =
        window.map(|window| window.saturating_sub(answer_reserve(window, job.services.compaction.reserve_tokens)));
    let limit = match (window_limit, job.budget) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let fit = limit.map(|limit| (limit, 0));
    let tool_units = job.source.counts.tool_units as usize;
    let (request, _) =
        summary_request(&job.source.transcript, model_id, model.variant.clone(), job.focus, fit, tool_units);
    let mut stream = tokio::select! {
        opened = provider.stream(request) => match opened {
            Ok(stream) => stream,
            Err(error) => return Attempt::ModelFailed(error),
        },
        _ = job.cancel.cancelled() => return Attempt::Cancelled,
    };
    let mut text = String::new();
    let mut reported: Option<TokenUsage> = None;
    let record = |reported: Option<TokenUsage>, usage: &mut Vec<EventPayload>| {
        if let Some(tokens) = reported {
            usage.push(models.usage_recorded(new_id(), &model.model, job.agent, &tokens, UsagePurpose::Compaction));
        }
    };
    let failure = loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = job.cancel.cancelled() => {
                // Tokens the provider already reported were paid for, cancelled or not.
                record(reported, usage);
                return Attempt::Cancelled;
            }
        };
        match item {
            Some(Ok(StreamEvent::TextDelta(delta))) => text.push_str(&delta),
            Some(Ok(StreamEvent::Usage(tokens))) => reported = Some(tokens),
            Some(Ok(StreamEvent::Finished { .. })) | None => break None,
            Some(Ok(_)) => {}
            Some(Err(error)) => break Some(error),
        }
    };
    record(reported, usage);
    let summary_tokens = (text.trim().len() as u64).div_ceil(BYTES_PER_TOKEN);
    let summary_limit = max_summary_tokens(window);
    match failure {
        Some(error) => Attempt::ModelFailed(error),
        None if text.trim().is_empty() => Attempt::Failed("the model answered with an empty summary".to_owned()),
        // A summary that would crowd out the work it is meant to make room for is not one.
        None if summary_tokens > summary_limit => Attempt::Failed(format!(
            "the summary was about {summary_tokens} tokens, more than the {summary_limit} a summary may take"
        )),
        None => Attempt::Written(text.trim().to_owned()),
    }
}

/// The most (estimated) tokens a summary may take: twice what is asked of the model, and at most half the window.
fn max_summary_tokens(window: Option<u64>) -> u64 {
    let asked = 2 * u64::from(SUMMARY_MAX_OUTPUT_TOKENS);
    window.map_or(asked, |window| asked.min(window / 2))
}

/// The checkpoint event of a written summary.
pub fn checkpoint_event(
    compaction_id: &str,
    summary: String,
    source: &CompactionSource,
    trigger: CompactionTrigger,
) -> EventPayload {
    EventPayload::ContextCheckpointCommitted {
        compaction_id: compaction_id.to_owned(),
        summary,
        through_seq: source.through_seq,
        trigger,
        compacted_messages: source.counts.messages,
        elided_tool_results: source.counts.tool_units,
    }
}

/// The models a compaction of a session whose next run would use `selection` tries: the agent's chain from that
/// model on (the model alone when the chain does not hold it).
pub fn chain_from(selection: &ModelSelection, agent_chain: &[ModelSelection]) -> Vec<ModelSelection> {
    match agent_chain.iter().position(|model| model == selection) {
        Some(index) => agent_chain[index..].to_vec(),
        None => vec![selection.clone()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> ModelSelection {
        ModelSelection { model: name.into(), variant: None }
    }

    #[test]
    fn the_chain_starts_at_the_selected_model_or_is_that_model_alone() {
        let chain = [model("a/1"), model("b/2"), model("c/3")];
        assert_eq!(chain_from(&model("b/2"), &chain), [model("b/2"), model("c/3")]);
        assert_eq!(chain_from(&model("z/9"), &chain), [model("z/9")]);
        let variant = ModelSelection { model: "b/2".into(), variant: Some("high".into()) };
        assert_eq!(chain_from(&variant, &chain), std::slice::from_ref(&variant), "identity includes the variant");
    }
}
