//! The end of a model turn that asked for no tool: the turn, its usage and (unless steering inputs are pending)
//! the run's end, appended in one handler so that they become durable in one batch.
//!
//! A turn with tool calls is committed on its own and awaited, because its calls must not run before it is on
//! disk. A turn without any has nothing to wait for: the run either continues with the inputs pending at this
//! boundary or completes, and that choice is made here, atomically with the appends, so no steer can slip in
//! between the check and `run_completed`.

use actix::prelude::*;
use troupe_protocol::types::events::EventPayload;

use super::SessionActor;
use crate::error::EngineError;

/// Sent by the run after a model turn with no tool calls. `events` are the turn's own (its
/// `model_turn_committed`, then its `model_usage_recorded` if the provider reported usage). Replies once
/// everything appended is durable.
#[derive(Message)]
#[rtype(result = "Result<TurnEnd, EngineError>")]
pub struct EndToolFreeTurn {
    pub run_id: String,
    pub events: Vec<EventPayload>,
    /// The run's answer, recorded in `run_completed` if the run ends here.
    pub final_text: String,
}

/// What became of the run at the end of a tool-free turn.
#[derive(Debug, PartialEq, Eq)]
pub enum TurnEnd {
    /// Nothing was pending: `run_completed` is durable, after the pending approvals were cancelled.
    Completed,
    /// Steering inputs (or producer messages in `steer` mode) were pending: they are now submitted, in this
    /// order, and the run goes on with them.
    Continue(Vec<String>),
}

impl Handler<EndToolFreeTurn> for SessionActor {
    type Result = ResponseFuture<Result<TurnEnd, EngineError>>;

    fn handle(&mut self, message: EndToolFreeTurn, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.append_together(ctx, |actor, ctx| {
            actor.require_active_run(&message.run_id)?;
            for payload in message.events {
                actor.append(ctx, Some(message.run_id.clone()), None, payload)?;
            }
            let (seq, promoted) = actor.promote_pending(ctx, &message.run_id)?;
            if !promoted.is_empty() {
                return Ok((seq, TurnEnd::Continue(promoted)));
            }
            actor.cancel_pending_approvals(ctx, &message.run_id, "the run ended")?;
            let completed = EventPayload::RunCompleted { final_text: Some(message.final_text) };
            let seq = actor.append(ctx, Some(message.run_id), None, completed)?;
            Ok((seq, TurnEnd::Completed))
        });
        self.durable_reply(accepted)
    }
}
