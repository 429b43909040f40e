//! One model turn of a run: the request (the run's history, its attachments loaded, the tools offered), streamed
//! deltas appended as they arrive, transient failures retried on the same model while nothing was produced, and a
//! fall back along the run's model chain otherwise; the turn committed (a turn with tool calls durably, before its
//! calls run), and its usage recorded.

use futures::StreamExt;
use troupe_protocol::types::common::ModelSelection;
use troupe_protocol::types::events::{EventPayload, ToolCallRecord};
use troupe_runtime::clock::new_id;
use troupe_runtime::model::attachments::load_attachments;
use troupe_runtime::model::{
    ChatMessage, FailurePolicy, ModelError, ModelRequest, StreamEvent, TokenUsage, ToolCallRequest, UserPart,
};

use super::{RunLoop, RunOutcome};

/// One model turn. A turn with tool calls is durable when it is returned; a turn without any is not yet
/// recorded: its events are in `unrecorded`, for `end_tool_free_turn` to append with the run's end.
pub(super) struct Turn {
    pub(super) text: String,
    pub(super) tool_calls: Vec<ToolCallRequest>,
    /// `model_turn_committed`, then `model_usage_recorded` when the provider reported usage.
    pub(super) unrecorded: Option<Vec<EventPayload>>,
}

pub(super) enum TurnError {
    Outcome(RunOutcome),
}

impl RunLoop {
    /// Reads the artifacts the messages' file parts name, on a blocking thread, so providers can send them.
    pub(super) async fn with_attachments(&self, mut messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
        let is_file = |part: &UserPart| matches!(part, UserPart::File { .. });
        let has_files =
            messages.iter().any(|message| matches!(message, ChatMessage::User { parts } if parts.iter().any(is_file)));
        if !has_files {
            return messages;
        }
        let data_dir = self.setup.services.data_dir.clone();
        let unread = messages.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            load_attachments(&mut messages, &data_dir);
            messages
        })
        .await;
        // A panic while reading leaves the parts unread: they go as text notes.
        loaded.unwrap_or(unread)
    }

    /// One committed model turn, retrying and falling back as the error policy says.
    pub(super) async fn request_turn(&mut self) -> Result<Turn, TurnError> {
        let retry = self.setup.services.retry;
        let mut retry_ordinal: u32 = 0;
        // One automatic compaction and one overflow recovery per turn (`compaction.rs`).
        let (mut auto_compacted, mut overflow_recovered) = (false, false);
        loop {
            let model = self.setup.model_chain[self.chain_index].clone();
            self.compact_if_needed(&model, &mut auto_compacted).await?;
            let attempt_id = new_id();
            self.post(EventPayload::ModelAttemptStarted {
                attempt_id: attempt_id.clone(),
                model: model.model.clone(),
                fallback_index: self.chain_index as u32,
                retry_ordinal,
            });
            let (error, produced_output) = match self.stream_attempt(&attempt_id, &model).await {
                Ok(turn) => return Ok(turn),
                Err(AttemptError::Cancelled) => {
                    return Err(TurnError::Outcome(RunOutcome::Cancelled));
                }
                Err(AttemptError::SessionLost) => {
                    return Err(TurnError::Outcome(RunOutcome::SessionLost));
                }
                Err(AttemptError::Model { error, produced_output }) => (error, produced_output),
            };
            if self.recover_overflow(&error, &mut overflow_recovered, &attempt_id, &model).await? {
                retry_ordinal += 1;
                continue;
            }

            let policy = error.policy();
            let retry_same = policy == FailurePolicy::RetrySameModel
                && !produced_output
                && retry_ordinal + 1 < retry.max_attempts_per_model;
            tracing::warn!(
                run = %self.setup.run_id,
                model = %model.model,
                kind = error.kind.as_str(),
                http_status = error.http_status.unwrap_or(0),
                will_retry = retry_same,
                error = %error.message,
                "a model request failed"
            );
            self.post(EventPayload::AttemptAbandoned {
                attempt_id,
                model: model.model.clone(),
                error: error.summary(),
                will_retry: retry_same,
            });
            if retry_same {
                let delay = retry.delay_for(retry_ordinal + 1, error.retry_after_ms);
                retry_ordinal += 1;
                tokio::select! {
                    _ = tokio::time::sleep(delay) => continue,
                    _ = self.control.cancel.cancelled() => return Err(TurnError::Outcome(RunOutcome::Cancelled)),
                }
            }
            let next = self.chain_index + 1;
            if policy == FailurePolicy::FailRun || next >= self.setup.model_chain.len() {
                return Err(TurnError::Outcome(RunOutcome::Failed {
                    error: if policy == FailurePolicy::FailRun {
                        format!("{} failed: {}", model.model, error.message)
                    } else {
                        format!("every model of the chain failed; the last, {}, said: {}", model.model, error.message)
                    },
                    model_error: Some(error.summary()),
                    resolved_model: Some(model.model.clone()),
                }));
            }
            let to = self.setup.model_chain[next].model.clone();
            tracing::warn!(run = %self.setup.run_id, from = %model.model, to = %to, "falling back to the next model");
            self.post(EventPayload::ModelFallback {
                from: model.model.clone(),
                to,
                from_fallback_index: self.chain_index as u32,
                to_fallback_index: next as u32,
                attempts_on_from: retry_ordinal + 1,
                error: error.summary(),
            });
            self.chain_index = next;
            retry_ordinal = 0;
        }
    }

    pub(super) async fn stream_attempt(&self, attempt_id: &str, model: &ModelSelection) -> Result<Turn, AttemptError> {
        let (provider, model_id) =
            self.setup.services.models.resolve(&model.model).map_err(|error| AttemptError::model(error, false))?;
        let messages = if self.setup.services.models.takes_files(&model.model) {
            self.history.clone()
        } else {
            troupe_runtime::model::attachments::without_files(&self.history, &model.model)
        };
        let request = ModelRequest {
            model_id,
            variant: model.variant.clone(),
            system: Some(self.system_prompt.clone()),
            messages,
            tools: self.tool_specs.clone(),
            max_output_tokens: None,
        };
        let cancel = self.control.cancel.clone();
        // The selection resolved, so its provider is a configured one: a bounded label.
        let provider_id = model.model.split_once('/').map_or("unknown", |(provider_id, _)| provider_id);
        let started = std::time::Instant::now();
        let observe = |error: Option<&ModelError>| {
            self.setup.services.metrics.model_request(provider_id, started.elapsed(), error.map(|error| error.kind));
        };
        let mut stream = tokio::select! {
            opened = provider.stream(request) => opened.map_err(|error| {
                observe(Some(&error));
                AttemptError::model(error, false)
            })?,
            _ = cancel.cancelled() => return Err(AttemptError::Cancelled),
        };
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut tool_calls = Vec::new();
        let mut usage: Option<TokenUsage> = None;
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                _ = cancel.cancelled() => {
                    // Tokens the provider already reported were paid for, whatever becomes of the attempt.
                    self.record_usage(attempt_id, model, usage);
                    return Err(AttemptError::Cancelled);
                }
            };
            match item {
                Some(Ok(StreamEvent::TextDelta(delta))) => {
                    text.push_str(&delta);
                    self.emit(EventPayload::TextDelta { attempt_id: attempt_id.to_owned(), text: delta }).await;
                }
                Some(Ok(StreamEvent::ReasoningDelta(delta))) => {
                    reasoning.push_str(&delta);
                    self.emit(EventPayload::ReasoningDelta { attempt_id: attempt_id.to_owned(), text: delta }).await;
                }
                Some(Ok(StreamEvent::ToolCall(call))) => tool_calls.push(call),
                Some(Ok(StreamEvent::Usage(reported))) => usage = Some(reported),
                Some(Ok(StreamEvent::Finished { .. })) | None => {
                    observe(None);
                    break;
                }
                Some(Err(error)) => {
                    observe(Some(&error));
                    self.record_usage(attempt_id, model, usage);
                    let produced = !text.is_empty() || !tool_calls.is_empty();
                    return Err(AttemptError::model(error, produced));
                }
            }
        }
        let committed = EventPayload::ModelTurnCommitted {
            attempt_id: attempt_id.to_owned(),
            model: model.model.clone(),
            fallback_index: self.chain_index as u32,
            text: text.clone(),
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            tool_calls: tool_calls
                .iter()
                .map(|call: &ToolCallRequest| ToolCallRecord {
                    tool_call_id: call.tool_call_id.clone(),
                    tool: call.tool.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect(),
        };
        if tool_calls.is_empty() {
            // Nothing waits on this turn being on disk: it is recorded with the run's end (`end_tool_free_turn`).
            let mut unrecorded = vec![committed];
            unrecorded.extend(self.usage_event(attempt_id, model, usage));
            return Ok(Turn { text, tool_calls, unrecorded: Some(unrecorded) });
        }
        self.commit(committed, None).await.map_err(|_| AttemptError::SessionLost)?;
        self.record_usage(attempt_id, model, usage);
        Ok(Turn { text, tool_calls, unrecorded: None })
    }

    /// Records what the provider reported for an attempt, if it reported anything, with its cost stamped now.
    pub(super) fn record_usage(&self, attempt_id: &str, model: &ModelSelection, usage: Option<TokenUsage>) {
        if let Some(recorded) = self.usage_event(attempt_id, model, usage) {
            self.post(recorded);
        }
    }

    /// The `model_usage_recorded` of an attempt whose provider reported usage, with its cost stamped now.
    pub(super) fn usage_event(
        &self,
        attempt_id: &str,
        model: &ModelSelection,
        usage: Option<TokenUsage>,
    ) -> Option<EventPayload> {
        let usage = usage?;
        let agent = &self.setup.selection.agent;
        Some(self.setup.services.models.usage_recorded(
            attempt_id.to_owned(),
            &model.model,
            agent,
            &usage,
            Default::default(),
        ))
    }
}

pub(super) enum AttemptError {
    /// The model failed; `produced_output` says whether deltas or tool calls had already streamed.
    Model {
        error: ModelError,
        produced_output: bool,
    },
    Cancelled,
    SessionLost,
}

impl AttemptError {
    fn model(error: ModelError, produced_output: bool) -> Self {
        AttemptError::Model { error, produced_output }
    }
}
