//! The supervisor's book of approval actors: which trees have one now, and the permission modes that outlive them.
//!
//! An approval actor exists only while its tree is in use, so the daemon's memory does not grow with every tree it
//! ever served. A tree is in use while a request holds its approval actor (an [`ApprovalLease`] handed out by
//! `ApprovalsFor` is a lease), while one of its sessions has an active run (its run actor holds the address for the
//! run's life: the run registry knows), and for `idle_after` (the daemon's `hibernate_after`) after the last of
//! those. Then the actor stops and is forgotten; the next use starts a new one, which reloads the tree's grants
//! from the root session's log, and gets the tree's mode from here.
//!
//! Bounds: one approval actor per tree in use; one remembered mode per root session whose mode is not the default
//! (at most one per root session on disk, like the session index itself).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use troupe_protocol::types::session::PermissionMode;

use crate::approval_actor::{ApprovalActor, SetTreeMode, StopIdle};
use crate::ports::approval::Activity;
use crate::ports::{ApprovalLease, ApprovalPort, SupervisorPort};
use crate::run_registry::RunRegistry;

struct Tree {
    addr: Addr<ApprovalActor>,
    /// Built once: every lease of this actor hands out a clone.
    port: ApprovalPort,
    activity: Arc<Activity>,
}

pub struct ApprovalTrees {
    /// The approval actor of each tree in use, by root session id.
    trees: HashMap<String, Tree>,
    /// Modes other than the default, by root session id. Runtime-only: every tree starts in the default mode when
    /// the daemon starts.
    modes: HashMap<String, PermissionMode>,
    /// The mode of a tree no client set one for.
    default_mode: PermissionMode,
    idle_after: Duration,
    runs: RunRegistry,
}

impl ApprovalTrees {
    /// Trees start in `default_mode` (`[permissions] default_mode`) until a client sets another.
    pub fn new(idle_after: Duration, runs: RunRegistry, default_mode: PermissionMode) -> Self {
        ApprovalTrees { trees: HashMap::new(), modes: HashMap::new(), default_mode, idle_after, runs }
    }

    /// The tree's approval actor, started (with the tree's mode) if it has none or its actor died: on `arbiter`
    /// when given (the asking session's thread), else on the caller's.
    pub fn lease(&mut self, root: &str, supervisor: SupervisorPort, arbiter: Option<ArbiterHandle>) -> ApprovalLease {
        let mode = self.mode(root);
        let tree = self
            .trees
            .entry(root.to_owned())
            .or_insert_with(|| start_tree(root, supervisor.clone(), mode, arbiter.as_ref()));
        if !tree.addr.connected() {
            *tree = start_tree(root, supervisor, mode, arbiter.as_ref());
        }
        ApprovalLease::take(tree.port.clone(), &tree.activity)
    }

    /// The tree's mode (`root` is its root session).
    pub fn mode(&self, root: &str) -> PermissionMode {
        self.modes.get(root).copied().unwrap_or(self.default_mode)
    }

    /// Records the tree's mode and tells its approval actor, if it has one. Sent before the caller is answered, so
    /// every permission check that follows the answer sees the new mode.
    pub fn set_mode(&mut self, root: &str, mode: PermissionMode) {
        if mode == self.default_mode {
            self.modes.remove(root);
        } else {
            self.modes.insert(root.to_owned(), mode);
        }
        if let Some(tree) = self.trees.get(root) {
            tree.addr.do_send(SetTreeMode { mode });
        }
    }

    /// Forgets the mode of a tree that is gone (deleted): a tree made later under the same id starts in the default.
    pub fn forget_mode(&mut self, root: &str) {
        self.modes.remove(root);
    }

    /// Stops and forgets the approval actors of trees no longer in use. `root_of` gives a session's root.
    pub fn forget_idle(&mut self, root_of: impl Fn(&str) -> Option<String>) {
        if self.trees.is_empty() {
            return;
        }
        let running: HashSet<String> =
            self.runs.active_sessions().iter().filter_map(|session| root_of(session)).collect();
        let idle_after = self.idle_after;
        self.trees.retain(|root, tree| {
            let in_use = running.contains(root) || !tree.activity.idle_for(idle_after);
            if !in_use {
                tracing::debug!(%root, "stopping the idle approval actor of a tree");
                tree.addr.do_send(StopIdle);
            }
            in_use
        });
    }

    /// How many approval actors are alive, and how many modes are remembered.
    pub fn counts(&self) -> (usize, usize) {
        (self.trees.len(), self.modes.len())
    }
}

fn start_tree(root: &str, supervisor: SupervisorPort, mode: PermissionMode, arbiter: Option<&ArbiterHandle>) -> Tree {
    let actor = ApprovalActor::new(root.to_owned(), supervisor, mode);
    let addr = match arbiter {
        Some(arbiter) => ApprovalActor::start_in_arbiter(arbiter, |_| actor),
        None => actor.start(),
    };
    Tree { port: ApprovalPort::new(&addr), addr, activity: Arc::new(Activity::new()) }
}
