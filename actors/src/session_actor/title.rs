//! Automatic session titles: the session actor's side.
//!
//! When a run starts in a session that waits for a title ([`SessionState::awaits_auto_title`]: untitled, and no
//! client chose that), the actor starts a title job next to the run. The job is not a run: it records no
//! `run_started`, does not keep the session busy and never delays the run. It asks the run's models, in order (one
//! attempt each, all within [`TITLE_TIMEOUT`]), for a short title of the run's input
//! (`troupe_runtime::title::title_request`), records each attempt's usage as `model_usage_recorded` with purpose
//! `title` and each failed model request as `internal_agent_failed` (agent `session_title`, with the failure's
//! `ModelErrorSummary`, whose vendor body is a bounded, terminal-safe `DiagnosticText`), and commits
//! `session_title_committed` with change `auto`. Without an answer it commits the first line of the input instead
//! (`first_line_title`).
//!
//! A client that sets or clears the title meanwhile wins: the job's request is abandoned at once, and the title is
//! checked again at commit anyway (the usage reported so far is still recorded: it was paid for). One job at a
//! time per actor; after a restart a session that has a title (automatic or a client's) is done, and a job lost to
//! a crash or a stop before its commit is simply made again by the next run. While a job is in flight the actor
//! does not hibernate.
//!
//! No model is asked for a delegated session (its title is the first line of its task: the parent's model already
//! wrote that line for the purpose), with `[titles] auto = false`, or when the run's first model is a `local/*` one:
//! `local/echo` would answer with the input itself and `local/scripted` with the next step of a test's script,
//! which the title request would consume; the first line says as much as either, without the detour.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::StreamExt;
use troupe_protocol::types::common::{ModelSelection, SessionOrigin};
use troupe_protocol::types::events::{EventPayload, InternalAgent, TitleChangeKind, UsagePurpose};
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::new_id;
use troupe_runtime::model::{ModelError, StreamEvent, TokenUsage};
use troupe_runtime::session_state::SessionState;
use troupe_runtime::title::{first_line_title, title_from_answer, title_request};

use super::SessionActor;
use crate::run_services::RunServices;

/// How long a title job waits for the models in all before it falls back to the first line.
pub const TITLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a title job needs from the run that started it.
pub(super) struct TitleRequest<'a> {
    pub input: &'a str,
    /// The agent the usage is attributed to.
    pub agent: &'a str,
    /// The run's models, in order.
    pub chain: &'a [ModelSelection],
    pub services: &'a Arc<RunServices>,
}

/// What a title job came back with.
struct TitleOutcome {
    /// The model's title, when one answered with something usable.
    title: Option<String>,
    /// In attempt order: `model_usage_recorded` (purpose `title`) of each attempt that reported usage,
    /// `internal_agent_failed` of each whose model request failed.
    events: Vec<EventPayload>,
}

impl SessionActor {
    /// Cancels the title job in flight, if any (a client set or cleared the title). Its usage so far is recorded;
    /// its title is not.
    pub(super) fn cancel_title_job(&mut self) {
        self.jobs.cancel_title();
    }

    /// Starts the title job of a run that was just accepted, when the session waits for a title.
    pub(super) fn begin_auto_title(&mut self, ctx: &mut Context<Self>, request: TitleRequest<'_>) {
        let Some(state) = self.state.as_ref() else { return };
        if self.jobs.title_running() || !state.awaits_auto_title() {
            return;
        }
        let Some(fallback) = first_line_title(request.input) else { return };
        let asks_model = state.origin == SessionOrigin::Root
            && request.services.titles.auto
            && request.chain.first().is_some_and(|model| !model.model.starts_with("local/"));
        if !asks_model {
            self.commit_auto_title(ctx, fallback, Vec::new());
            return;
        }
        let cancel = self.jobs.begin_title();
        let services = request.services.clone();
        let chain = request.chain.to_vec();
        let agent = request.agent.to_owned();
        let input = request.input.to_owned();
        let job = async move {
            let mut events = Vec::new();
            let asked = ask_models(&services, &chain, &agent, &input, &mut events);
            let title = tokio::select! {
                title = tokio::time::timeout(TITLE_TIMEOUT, asked) => title.unwrap_or_else(|_| {
                    tracing::debug!("no model named the session in time; its title is the input's first line");
                    None
                }),
                // A client named the session: the request is dropped, and with it the connection to the vendor.
                _ = cancel.cancelled() => None,
            };
            TitleOutcome { title, events }
        };
        ctx.spawn(job.into_actor(self).map(move |outcome, actor, ctx| {
            actor.jobs.end_title();
            let title = outcome.title.unwrap_or(fallback);
            actor.commit_auto_title(ctx, title, outcome.events);
        }));
    }

    /// Records the job's usage and failures, then its title unless the session no longer waits for one (a client's
    /// title won).
    fn commit_auto_title(&mut self, ctx: &mut Context<Self>, title: String, events: Vec<EventPayload>) {
        for payload in events {
            if let Err(error) = self.append(ctx, None, Some(Origin::TITLE), payload) {
                tracing::debug!(session_id = %self.session_id, %error, "a title request's usage was not recorded");
                return;
            }
        }
        if !self.state.as_ref().is_some_and(SessionState::awaits_auto_title) {
            return;
        }
        let payload = EventPayload::SessionTitleCommitted {
            title: Some(title),
            change: TitleChangeKind::Auto,
            client_rename_id: format!("auto-{}", new_id()),
        };
        if let Err(error) = self.append(ctx, None, Some(Origin::TITLE), payload) {
            tracing::debug!(session_id = %self.session_id, %error, "the automatic title was not recorded");
        }
    }
}

/// Asks the models in order for a title; the first usable answer wins.
async fn ask_models(
    services: &RunServices,
    chain: &[ModelSelection],
    agent: &str,
    input: &str,
    events: &mut Vec<EventPayload>,
) -> Option<String> {
    for model in chain {
        match ask(services, model, agent, input, events).await {
            Ok(title) => return Some(title),
            Err(TitleFailure::Unusable(reason)) => {
                tracing::debug!(model = %model.model, %reason, "a model answered without a usable title")
            }
            Err(TitleFailure::Model(error)) => {
                tracing::debug!(model = %model.model, reason = %error.message, "a title request failed");
                events.push(EventPayload::InternalAgentFailed {
                    agent: InternalAgent::SessionTitle,
                    model: model.model.clone(),
                    compaction_id: None,
                    error: error.summary(),
                });
            }
        }
    }
    None
}

/// Why one model gave no title.
enum TitleFailure {
    /// The request failed (or the model could not be resolved): recorded as `internal_agent_failed`.
    Model(ModelError),
    /// The model answered, with nothing a title can be made of.
    Unusable(String),
}

async fn ask(
    services: &RunServices,
    model: &ModelSelection,
    agent: &str,
    input: &str,
    usage: &mut Vec<EventPayload>,
) -> Result<String, TitleFailure> {
    let (provider, model_id) = services.models.resolve(&model.model).map_err(TitleFailure::Model)?;
    let request = title_request(input, model_id, model.variant.clone());
    let mut stream = provider.stream(request).await.map_err(TitleFailure::Model)?;
    let mut text = String::new();
    let mut reported: Option<TokenUsage> = None;
    let failure = loop {
        match stream.next().await {
            Some(Ok(StreamEvent::TextDelta(delta))) => text.push_str(&delta),
            Some(Ok(StreamEvent::Usage(tokens))) => reported = Some(tokens),
            Some(Ok(StreamEvent::Finished { .. })) | None => break None,
            Some(Ok(_)) => {}
            Some(Err(error)) => break Some(error),
        }
    };
    if let Some(tokens) = reported {
        usage.push(services.models.usage_recorded(new_id(), &model.model, agent, &tokens, UsagePurpose::Title));
    }
    match failure {
        Some(error) => Err(TitleFailure::Model(error)),
        None => title_from_answer(&text)
            .ok_or_else(|| TitleFailure::Unusable("the model answered without a title".to_owned())),
    }
}
