//! The supervisor's usage messages: session actors report their spent usage, the engine asks for rollups.
//!
//! Everything here answers from the [`UsageIndex`](super::usage_index::UsageIndex), never from a log: a session
//! that was not opened since the daemon started is counted from what its `meta.json` (or the start's scan of its
//! log) said. A live session leaves its spending in its `PublishedUsage` instead of sending it on every model
//! turn; each rollup first takes what live sessions left (`take_live_usage`), and a stopping session sends what
//! is left (`SessionUsageChanged`).

use std::collections::HashSet;

use actix::prelude::*;
use troupe_protocol::types::usage::{SessionTreeUsageResult, UsageRollup};

use super::SessionSupervisor;
use crate::error::EngineError;
use crate::ports::supervisor::SessionUsageChanged;

/// `usage.global`: what every session spent.
#[derive(Message)]
#[rtype(result = "UsageRollup")]
pub struct GlobalUsage;

/// `agent.usage`: what the requests attributed to the agent spent, in every session.
#[derive(Message)]
#[rtype(result = "UsageRollup")]
pub struct AgentUsage {
    pub agent: String,
}

/// `session.tree_usage`: what the session and its descendants spent.
#[derive(Message)]
#[rtype(result = "Result<SessionTreeUsageResult, EngineError>")]
pub struct TreeUsage {
    pub session_id: String,
}

impl Handler<SessionUsageChanged> for SessionSupervisor {
    type Result = ();

    fn handle(&mut self, message: SessionUsageChanged, _: &mut Context<Self>) {
        // Not for a session deleted meanwhile (`removal`): its spending left the rollups with it.
        if !self.index.contains_key(&message.session_id) {
            return;
        }
        self.usage.set(&message.session_id, message.summary);
    }
}

impl Handler<GlobalUsage> for SessionSupervisor {
    type Result = MessageResult<GlobalUsage>;

    fn handle(&mut self, _: GlobalUsage, _: &mut Context<Self>) -> Self::Result {
        self.take_live_usage();
        MessageResult(self.usage.global())
    }
}

impl Handler<AgentUsage> for SessionSupervisor {
    type Result = MessageResult<AgentUsage>;

    fn handle(&mut self, message: AgentUsage, _: &mut Context<Self>) -> Self::Result {
        self.take_live_usage();
        MessageResult(self.usage.agent(&message.agent))
    }
}

impl Handler<TreeUsage> for SessionSupervisor {
    type Result = Result<SessionTreeUsageResult, EngineError>;

    fn handle(&mut self, message: TreeUsage, _: &mut Context<Self>) -> Self::Result {
        self.meta(&message.session_id)?;
        self.take_live_usage();
        let sessions = self.descendants_and_self(&message.session_id);
        Ok(SessionTreeUsageResult {
            usage: self.usage.sessions(sessions.iter()),
            session_count: sessions.len() as u64,
            session_id: message.session_id,
        })
    }
}

impl SessionSupervisor {
    /// Sets the index from what live sessions left of their spending since the last rollup (`published_usage`):
    /// a rollup counts every usage event that is durable. Not for a session deleted meanwhile (`removal`).
    fn take_live_usage(&mut self) {
        for live in self.live.iter() {
            if let Some(summary) = live.usage.take()
                && self.index.contains_key(live.key())
            {
                self.usage.set(live.key(), summary);
            }
        }
    }

    /// The session and every session below it in the index (a damaged index with a cycle is walked once).
    pub(super) fn descendants_and_self(&self, session_id: &str) -> HashSet<String> {
        let mut found = HashSet::from([session_id.to_owned()]);
        let mut pending = vec![session_id.to_owned()];
        while let Some(next) = pending.pop() {
            for child in self.children.get(&next).into_iter().flatten() {
                if found.insert(child.clone()) {
                    pending.push(child.clone());
                }
            }
        }
        found
    }
}
