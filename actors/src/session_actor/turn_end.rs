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
use crate::ports::session::{EndToolFreeTurn, TurnEnd};

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
