//! The steering lane of the active run: a steering input is admitted (`user_input_admitted`) while the run works,
//! can be taken back until it is used (`user_input_recalled`), and is promoted into the conversation at the run's
//! next boundary (`user_input_submitted`, with the producer messages waiting in `steer` mode).

use actix::prelude::*;
use troupe_protocol::types::attachment::AttachedFile;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::new_id;

use super::SessionActor;
use crate::error::EngineError;
use crate::ports::session::{PromotePendingInputs, PromotedInput};

/// Admits a steering input for the active run (`user_input_admitted`).
#[derive(Message)]
#[rtype(result = "Result<bool, EngineError>")]
pub struct SteerRun {
    pub run_id: String,
    pub input: String,
    /// The files it attached, already stored as artifacts.
    pub attachments: Vec<AttachedFile>,
}

/// Takes back the newest pending steering input (`user_input_recalled`), if any.
#[derive(Message)]
#[rtype(result = "Result<Option<String>, EngineError>")]
pub struct RecallSteer {
    pub run_id: String,
}

impl Handler<SteerRun> for SessionActor {
    type Result = ResponseFuture<Result<bool, EngineError>>;

    fn handle(&mut self, message: SteerRun, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = (|| {
            self.require_active_run(&message.run_id)?;
            let payload = EventPayload::UserInputAdmitted {
                input_id: new_id(),
                input: message.input,
                attachments: message.attachments,
            };
            let seq = self.append(ctx, Some(message.run_id), Some(Origin::User), payload)?;
            Ok((seq, true))
        })();
        self.durable_reply(accepted)
    }
}

impl Handler<RecallSteer> for SessionActor {
    type Result = ResponseFuture<Result<Option<String>, EngineError>>;

    fn handle(&mut self, message: RecallSteer, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = (|| {
            let state = self.ready_state()?;
            let Some(active) = state.runs.active.as_ref().filter(|active| active.run_id == message.run_id) else {
                return Err(self.run_not_active(&message.run_id));
            };
            // The lane is empty: nothing to recall, and no event.
            let Some(newest) = active.pending.back().cloned() else {
                return Ok((0, None));
            };
            let payload = EventPayload::UserInputRecalled {
                input_id: newest.input_id,
                input: newest.input.clone(),
                attachments: newest.attachments.clone(),
            };
            let seq = self.append(ctx, Some(message.run_id), Some(Origin::User), payload)?;
            Ok((seq, Some(newest.input)))
        })();
        self.durable_reply(accepted)
    }
}

impl Handler<PromotePendingInputs> for SessionActor {
    type Result = ResponseFuture<Result<Vec<PromotedInput>, EngineError>>;

    fn handle(&mut self, message: PromotePendingInputs, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.promote_pending(ctx, &message.run_id);
        self.durable_reply(accepted)
    }
}

impl SessionActor {
    /// Appends every pending steering input of the active run `run_id` as `user_input_submitted`, oldest first,
    /// then the producer messages waiting in `steer` mode. Returns the last sequence appended (0 when nothing
    /// was) and the texts, in order.
    pub(super) fn promote_pending(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: &str,
    ) -> Result<(u64, Vec<PromotedInput>), EngineError> {
        let state = self.ready_state()?;
        let Some(active) = state.runs.active.as_ref().filter(|active| active.run_id == run_id) else {
            return Err(self.run_not_active(run_id));
        };
        let pending: Vec<_> = active.pending.iter().cloned().collect();
        let mut last_seq = 0;
        let mut promoted = Vec::with_capacity(pending.len());
        for input in pending {
            let payload = EventPayload::UserInputSubmitted {
                input_id: input.input_id,
                input: input.input.clone(),
                attachments: input.attachments.clone(),
            };
            last_seq = self.append(ctx, Some(run_id.to_owned()), Some(Origin::User), payload)?;
            promoted.push(PromotedInput { text: input.input, attachments: input.attachments });
        }
        // Producer messages in `steer` mode enter at the same boundary, after the user's.
        if let Some((seq, bodies)) = self.claim_steer_messages(ctx, run_id)? {
            last_seq = seq;
            promoted.extend(bodies.into_iter().map(PromotedInput::text));
        }
        Ok((last_seq, promoted))
    }
}
