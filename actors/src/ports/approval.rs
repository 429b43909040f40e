//! The approval actor's port: what runs (the tree's permissions, to judge a call) and the engine (`approval.list`,
//! `approval.respond`, grants reloaded after a revert) send a tree's approval actor, and the lease that keeps it in
//! use. Handled in `approval_actor.rs`; `approval_trees.rs` hands out leases.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use parking_lot::Mutex;
use troupe_protocol::types::approval::{
    ApprovalListResult, ApprovalRecord, ApprovalRespondParams, ApprovalStatus, PermissionAction, TreeGrant,
};
use troupe_protocol::types::session::PermissionMode;

use super::recipients;
use crate::error::EngineError;

recipients! {
    /// One `Recipient` per message of this file.
    pub struct ApprovalRecipients {
        tree_permissions: TreePermissions,
        tree_mode: TreeMode,
        list_tree_approvals: ListTreeApprovals,
        respond_in_tree: RespondInTree,
        reload_grants: ReloadGrants,
    }
}

/// A tree's approval actor, as runs and the engine reach it.
pub type ApprovalPort = super::Port<ApprovalRecipients>;

/// A tree's approval actor, held for the length of a request (`ApprovalsFor`). Dereferences to its port.
pub struct ApprovalLease {
    port: ApprovalPort,
    _lease: Lease,
}

impl ApprovalLease {
    /// Takes a lease of `activity`, the use count of the actor behind `port`.
    pub fn take(port: ApprovalPort, activity: &Arc<Activity>) -> Self {
        ApprovalLease { port, _lease: Lease::take(activity) }
    }
}

impl Deref for ApprovalLease {
    type Target = ApprovalPort;

    fn deref(&self) -> &ApprovalPort {
        &self.port
    }
}

/// How much a tree's approval actor is in use.
pub struct Activity {
    /// Leases held, and when the last one was taken or returned.
    state: Mutex<(usize, Instant)>,
}

impl Activity {
    pub fn new() -> Self {
        Activity { state: Mutex::new((0, Instant::now())) }
    }

    /// Whether no lease is held and none was taken or returned for `at_least`.
    pub fn idle_for(&self, at_least: Duration) -> bool {
        let (leases, last) = *self.state.lock();
        leases == 0 && last.elapsed() >= at_least
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

struct Lease(Arc<Activity>);

impl Lease {
    fn take(activity: &Arc<Activity>) -> Lease {
        let mut state = activity.state.lock();
        *state = (state.0 + 1, Instant::now());
        Lease(activity.clone())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        *state = (state.0.saturating_sub(1), Instant::now());
    }
}

/// The tree's mode and grants as they stand, for a caller to judge operations with (a run's tool call, the skills
/// of `skills.list`) on whatever thread it likes: a file tool's call is described, judged and executed in one trip
/// to a blocking thread.
#[derive(Message)]
#[rtype(result = "PermissionView")]
pub struct TreePermissions;

/// What [`TreePermissions`] answers: the mode then, and the grants then (shared, not copied).
#[derive(Clone, Debug)]
pub struct PermissionView {
    pub mode: PermissionMode,
    pub grants: Arc<[TreeGrant]>,
}

impl PermissionView {
    /// A view that grants nothing, in `mode`: what a caller assumes when the tree cannot answer (`Ask`: fail closed).
    pub fn without_grants(mode: PermissionMode) -> Self {
        PermissionView { mode, grants: Arc::from([]) }
    }

    /// Whether a tree grant covers `(action, resource)`: one grant names exactly that action on exactly that
    /// resource (the resolved path of a file tool, the command line of `shell`).
    pub fn granted(&self, action: PermissionAction, resource: &str) -> bool {
        self.grants.iter().any(|grant| grant.action == action && grant.resource == resource)
    }
}

/// The tree's permission mode now: a run states it in its system prompt (`troupe_runtime::system_prompt`).
#[derive(Message)]
#[rtype(result = "PermissionMode")]
pub struct TreeMode;

/// Sent after the root session was reverted: a grant on the branch the revert hid no longer applies, so the grants
/// are read again from the root's projection (which takes them from the visible events).
#[derive(Message)]
#[rtype(result = "()")]
pub struct ReloadGrants;

/// `approval.list` for this tree.
#[derive(Message)]
#[rtype(result = "Result<ApprovalListResult, EngineError>")]
pub struct ListTreeApprovals {
    pub status: Option<ApprovalStatus>,
}

/// `approval.respond` for an approval of a session of this tree.
#[derive(Message)]
#[rtype(result = "Result<ApprovalRecord, EngineError>")]
pub struct RespondInTree {
    pub params: ApprovalRespondParams,
    /// Which client answered.
    pub answered_by: String,
}
