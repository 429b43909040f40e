//! A session's approvals, rebuilt from its log: every approval record with its current revision and status, the
//! answers recorded by `client_response_id` (for idempotent `approval.respond`), and, in a root session's log,
//! the tree grants of its tree.

use std::collections::{BTreeMap, HashMap};

use troupe_protocol::types::approval::{ApprovalDecision, ApprovalRecord, ApprovalStatus, PermissionAction, TreeGrant};
use troupe_protocol::types::events::{EventPayload, StoredEvent};

use crate::recent::RecentRecords;

/// The answer recorded under a `client_response_id`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordedResponse {
    pub approval_id: String,
    pub decision: ApprovalDecision,
    pub feedback: Option<String>,
    /// The record as this answer left it (finalized), so a redelivery gets the original answer even when a revert
    /// has since hidden the approval.
    pub record: Option<ApprovalRecord>,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ApprovalBook {
    /// By approval id; ids are UUIDv7, so this is also creation order.
    records: BTreeMap<String, ApprovalRecord>,
    /// The newest answers by `client_response_id`, for redeliveries.
    responses: RecentRecords<RecordedResponse>,
    /// Answers recorded and not yet finalized: approval id -> client_response_id (a handful at a time).
    answering: HashMap<String, String>,
    grants: Vec<TreeGrant>,
}

impl ApprovalBook {
    /// Takes the approval records and tree grants of `branch` (the visible events' book): a grant made on a
    /// branch a revert hid stops applying, as the reference says of branch-derived approvals. Keeps this book's
    /// answers by client id (a redelivered answer is still recognized).
    pub fn adopt_branch(&mut self, branch: ApprovalBook) {
        self.records = branch.records;
        self.grants = branch.grants;
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        match &event.payload {
            EventPayload::ApprovalRequested { approval } => {
                // The record is answered and listed where its log is: in a fork's copied prefix, the fork's.
                let record = ApprovalRecord { session_id: event.session_id.clone(), ..(**approval).clone() };
                self.records.insert(approval.approval_id.clone(), record);
            }
            EventPayload::ApprovalUserDecisionRecorded {
                approval_id,
                revision,
                decision,
                feedback,
                answered_by,
                client_response_id,
            } => {
                let mut answered = None;
                if let Some(record) = self.records.get_mut(approval_id) {
                    record.revision = *revision;
                    record.decision = Some(*decision);
                    record.feedback.clone_from(feedback);
                    record.answered_by = Some(answered_by.clone());
                    record.decided_at = Some(event.timestamp.clone());
                    answered = Some(record.clone());
                }
                self.answering.insert(approval_id.clone(), client_response_id.clone());
                self.responses.insert(
                    client_response_id,
                    RecordedResponse {
                        approval_id: approval_id.clone(),
                        decision: *decision,
                        feedback: feedback.clone(),
                        record: answered,
                    },
                );
            }
            EventPayload::ApprovalFinalized { approval_id, revision, status } => {
                if let Some(record) = self.records.get_mut(approval_id) {
                    record.revision = *revision;
                    record.status = *status;
                    if let Some(client_response_id) = self.answering.remove(approval_id)
                        && let Some(response) = self.responses.get_mut(&client_response_id)
                    {
                        response.record = Some(record.clone());
                    }
                }
            }
            EventPayload::ApprovalCancelled { approval_id, revision, .. } => {
                if let Some(record) = self.records.get_mut(approval_id) {
                    record.revision = *revision;
                    record.status = ApprovalStatus::Cancelled;
                    record.decided_at.get_or_insert_with(|| event.timestamp.clone());
                }
            }
            EventPayload::TreeApprovalGrantCommitted { grant } => self.grants.push(grant.clone()),
            // A fork is a new tree: the grants its copied prefix holds were given to its source's tree.
            EventPayload::SessionForked { .. } => self.grants.clear(),
            _ => {}
        }
    }

    pub fn get(&self, approval_id: &str) -> Option<&ApprovalRecord> {
        self.records.get(approval_id)
    }

    /// Every record, oldest first.
    pub fn records(&self) -> impl Iterator<Item = &ApprovalRecord> {
        self.records.values()
    }

    /// The pending records of one run.
    pub fn pending_of_run<'a>(&'a self, run_id: &'a str) -> impl Iterator<Item = &'a ApprovalRecord> + 'a {
        self.records.values().filter(move |record| record.run_id == run_id && record.status == ApprovalStatus::Pending)
    }

    pub fn response(&self, client_response_id: &str) -> Option<&RecordedResponse> {
        self.responses.get(client_response_id)
    }

    /// The tree grants recorded in this (root) session's log.
    pub fn grants(&self) -> &[TreeGrant] {
        &self.grants
    }

    pub fn has_grant(&self, action: PermissionAction, resource: &str) -> bool {
        self.grants.iter().any(|grant| grant.action == action && grant.resource == resource)
    }
}
