//! The session actor's side of approvals: it records the approvals its runs ask for, validates and records
//! answers, and wakes the waiting run.
//!
//! Every answer to an approval of this session passes through this actor, one message at a time, so of two
//! racing answers exactly one finds the approval pending; the other gets `approval_not_pending`. Validation
//! order: a redelivered `client_response_id` first (answered like the first time, or a conflict), then existence,
//! pending status, revision, fingerprint, and whether the decision is allowed.

use std::collections::HashMap;

use actix::prelude::*;
use tokio::sync::oneshot;
use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRecord, ApprovalStatus, TreeGrant};
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_runtime::clock::{new_id, now_rfc3339};

use super::SessionActor;
use crate::error::EngineError;
use crate::ports::session::{
    ApprovalOutcome, CancelPendingApprovals, CommitTreeGrant, GetTreeGrants, ListSessionApprovals, RequestApproval,
    RespondToApproval,
};

/// Runs waiting for their approvals' answers, by approval id.
pub(crate) type ApprovalWaiters = HashMap<String, oneshot::Sender<ApprovalOutcome>>;

/// How many of this session's approvals wait for an answer (`daemon.status`).
#[derive(Message)]
#[rtype(result = "usize")]
pub struct CountPendingApprovals;

impl SessionActor {
    fn approval_error(&self, approval_id: &str, client_response_id: &str, kind: ApprovalErrorKind) -> EngineError {
        EngineError::Approval {
            session_id: self.session_id.clone(),
            approval_id: approval_id.to_owned(),
            client_response_id: client_response_id.to_owned(),
            kind,
        }
    }

    /// Appends `approval_cancelled` for every pending approval of `run_id` and wakes its waiter. Returns the
    /// last appended `seq` (0 when there was nothing to cancel).
    pub(super) fn cancel_pending_approvals(
        &mut self,
        ctx: &mut Context<Self>,
        run_id: &str,
        reason: &str,
    ) -> Result<u64, EngineError> {
        let pending: Vec<(String, u64)> = self
            .state
            .as_ref()
            .map(|state| {
                state
                    .approvals
                    .pending_of_run(run_id)
                    .map(|record| (record.approval_id.clone(), record.revision))
                    .collect()
            })
            .unwrap_or_default();
        let mut last = 0;
        for (approval_id, revision) in pending {
            let payload = EventPayload::ApprovalCancelled {
                approval_id: approval_id.clone(),
                revision: revision + 1,
                reason: reason.to_owned(),
            };
            last = self.append(ctx, Some(run_id.to_owned()), None, payload)?;
            if let Some(waiter) = self.approval_waiters.remove(&approval_id) {
                let _ = waiter.send(ApprovalOutcome::Cancelled { reason: reason.to_owned() });
            }
        }
        Ok(last)
    }

    fn respond(
        &mut self,
        ctx: &mut Context<Self>,
        message: RespondToApproval,
    ) -> Result<(u64, (ApprovalRecord, Option<TreeGrant>)), EngineError> {
        let state = self.ready_state()?;
        let RespondToApproval {
            approval_id,
            request_revision,
            operation_fingerprint,
            client_response_id,
            decision,
            feedback,
            answered_by,
        } = message;
        let error = |kind| (approval_id.clone(), client_response_id.clone(), kind);
        let checked: Result<Checked, (String, String, ApprovalErrorKind)> = (|| {
            if let Some(recorded) = state.approvals.response(&client_response_id) {
                let same = recorded.approval_id == approval_id
                    && recorded.decision == decision
                    && recorded.feedback == feedback;
                if !same {
                    return Err(error(ApprovalErrorKind::IdempotencyConflict));
                }
                // A redelivery of the answer that was recorded: the same record again (as the answer left it,
                // whatever a revert has hidden since).
                let record = recorded.record.clone().or_else(|| state.approvals.get(&approval_id).cloned());
                return record.map(Checked::Redelivered).ok_or_else(|| error(ApprovalErrorKind::NotFound));
            }
            let record = state.approvals.get(&approval_id).ok_or_else(|| error(ApprovalErrorKind::NotFound))?;
            if record.status != ApprovalStatus::Pending {
                return Err(error(ApprovalErrorKind::NotPending { status: record.status }));
            }
            if record.revision != request_revision {
                return Err(error(ApprovalErrorKind::RevisionConflict { found: record.revision }));
            }
            if record.operation_fingerprint != operation_fingerprint {
                return Err(error(ApprovalErrorKind::FingerprintMismatch));
            }
            let allowed = match decision {
                ApprovalDecision::ApproveOnce => record.constraints.allow_once,
                ApprovalDecision::ApproveTree => record.constraints.allow_tree_grant,
                ApprovalDecision::Cancel => record.constraints.cancellable,
                ApprovalDecision::Reject => true,
            };
            if !allowed {
                return Err(error(ApprovalErrorKind::DecisionNotAllowed));
            }
            if feedback.is_some() && decision != ApprovalDecision::Reject {
                return Err(error(ApprovalErrorKind::DecisionNotAllowed));
            }
            Ok(Checked::Answer(record.clone()))
        })();
        let record = match checked {
            Ok(Checked::Answer(record)) => record,
            // Nothing new to write; waiting for everything accepted so far covers the original answer.
            Ok(Checked::Redelivered(record)) => return Ok((self.lane.next_seq() - 1, (record, None))),
            Err((approval_id, client_response_id, kind)) => {
                return Err(self.approval_error(&approval_id, &client_response_id, kind));
            }
        };
        let run_id = Some(record.run_id.clone());
        let decided = EventPayload::ApprovalUserDecisionRecorded {
            approval_id: approval_id.clone(),
            revision: record.revision + 1,
            decision,
            feedback: feedback.clone(),
            answered_by: answered_by.clone(),
            client_response_id,
        };
        self.append(ctx, run_id.clone(), Some(Origin::User), decided)?;
        let (status, outcome) = match decision {
            ApprovalDecision::ApproveOnce => (ApprovalStatus::Approved, ApprovalOutcome::Approved { for_tree: false }),
            ApprovalDecision::ApproveTree => (ApprovalStatus::Approved, ApprovalOutcome::Approved { for_tree: true }),
            ApprovalDecision::Reject => (ApprovalStatus::Rejected, ApprovalOutcome::Rejected { feedback }),
            ApprovalDecision::Cancel => (
                ApprovalStatus::Cancelled,
                ApprovalOutcome::Cancelled { reason: format!("cancelled by {answered_by}") },
            ),
        };
        let finalized =
            // The answer and its outcome are one change of the record: both events carry its next revision.
            EventPayload::ApprovalFinalized { approval_id: approval_id.clone(), revision: record.revision + 1, status };
        let seq = self.append(ctx, run_id, None, finalized)?;
        if let Some(waiter) = self.approval_waiters.remove(&approval_id) {
            let _ = waiter.send(outcome);
        }
        let grant = (decision == ApprovalDecision::ApproveTree).then(|| TreeGrant {
            action: record.operation.action,
            resource: record.operation.resource.clone(),
            granted_at: now_rfc3339(),
            granted_by: answered_by,
        });
        let updated =
            self.state.as_ref().and_then(|state| state.approvals.get(&approval_id).cloned()).unwrap_or(record);
        Ok((seq, (updated, grant)))
    }
}

/// A valid `approval.respond`: a new answer to record, or the redelivery of one already recorded.
enum Checked {
    Answer(ApprovalRecord),
    Redelivered(ApprovalRecord),
}

pub use crate::error::ApprovalErrorKind;

impl Handler<RequestApproval> for SessionActor {
    type Result = ResponseFuture<Result<(String, oneshot::Receiver<ApprovalOutcome>), EngineError>>;

    fn handle(&mut self, message: RequestApproval, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = (|| {
            self.require_active_run(&message.run_id)?;
            let approval_id = new_id();
            let record = ApprovalRecord {
                session_id: self.session_id.clone(),
                run_id: message.run_id.clone(),
                tool_call_id: message.tool_call_id,
                approval_id: approval_id.clone(),
                revision: 1,
                status: ApprovalStatus::Pending,
                operation: message.operation,
                operation_fingerprint: message.operation_fingerprint,
                constraints: message.constraints,
                decision: None,
                feedback: None,
                answered_by: None,
                created_at: now_rfc3339(),
                decided_at: None,
            };
            let seq = self.append(
                ctx,
                Some(message.run_id),
                Some(Origin::APPROVAL),
                EventPayload::ApprovalRequested { approval: Box::new(record) },
            )?;
            let (sender, receiver) = oneshot::channel();
            self.approval_waiters.insert(approval_id.clone(), sender);
            Ok((seq, (approval_id, receiver)))
        })();
        self.durable_reply(accepted)
    }
}

impl Handler<RespondToApproval> for SessionActor {
    type Result = ResponseFuture<Result<(ApprovalRecord, Option<TreeGrant>), EngineError>>;

    fn handle(&mut self, message: RespondToApproval, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.respond(ctx, message);
        self.durable_reply(accepted)
    }
}

impl Handler<CancelPendingApprovals> for SessionActor {
    type Result = ResponseFuture<Result<(), EngineError>>;

    fn handle(&mut self, message: CancelPendingApprovals, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.ready_state().map(|_| ()).and_then(|()| {
            let seq = self.cancel_pending_approvals(ctx, &message.run_id, &message.reason)?;
            Ok((seq, ()))
        });
        self.durable_reply(accepted)
    }
}

impl Handler<ListSessionApprovals> for SessionActor {
    type Result = Result<Vec<ApprovalRecord>, EngineError>;

    fn handle(&mut self, _: ListSessionApprovals, _: &mut Context<Self>) -> Self::Result {
        Ok(self.ready_state()?.approvals.records().cloned().collect())
    }
}

impl Handler<CountPendingApprovals> for SessionActor {
    type Result = usize;

    fn handle(&mut self, _: CountPendingApprovals, _: &mut Context<Self>) -> usize {
        // A session still loading has no approval a run could wait on yet.
        self.ready_state().map_or(0, |state| {
            state.approvals.records().filter(|record| record.status == ApprovalStatus::Pending).count()
        })
    }
}

impl Handler<GetTreeGrants> for SessionActor {
    type Result = Result<Vec<TreeGrant>, EngineError>;

    fn handle(&mut self, _: GetTreeGrants, _: &mut Context<Self>) -> Self::Result {
        Ok(self.ready_state()?.approvals.grants().to_vec())
    }
}

impl Handler<CommitTreeGrant> for SessionActor {
    type Result = ResponseFuture<Result<(), EngineError>>;

    fn handle(&mut self, message: CommitTreeGrant, ctx: &mut Context<Self>) -> Self::Result {
        let accepted = self.ready_state().map(|_| ()).and_then(|()| {
            let payload = EventPayload::TreeApprovalGrantCommitted { grant: message.grant };
            let seq = self.append(ctx, None, Some(Origin::User), payload)?;
            Ok((seq, ()))
        });
        self.durable_reply(accepted)
    }
}
