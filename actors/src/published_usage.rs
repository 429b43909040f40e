//! A live session's spent usage, left for the supervisor's usage index rather than sent to the supervisor's thread
//! on every batch that records usage: that was one cross-thread message per model turn (docs/performance.md,
//! "Issue 28: the supervisor told of progress and usage less often").
//!
//! The session actor leaves its whole spent usage here when a batch holding its newest `model_usage_recorded` is
//! durable. The supervisor takes it before it answers a rollup (`usage.global`, `agent.usage`,
//! `session.tree_usage`), so a rollup counts every durable usage event, as when each batch was reported. What is
//! still here when the actor stops, the actor takes and sends as `SessionUsageChanged`.
//!
//! Each summary is the session's whole spending, not a delta, and the cell holds only the newest one, which is
//! taken once: the index is set in the order the session spent, whoever takes it.

use std::sync::Arc;

use parking_lot::Mutex;
use troupe_runtime::usage_book::UsageSummary;

/// One live session's spent usage not yet in the supervisor's index; shared by its actor and the supervisor.
#[derive(Clone, Default)]
pub struct PublishedUsage(Arc<Mutex<Option<UsageSummary>>>);

impl PublishedUsage {
    /// Leaves the session's whole spent usage now, in place of what was left before and not taken.
    pub fn leave(&self, summary: UsageSummary) {
        // The older summary is dropped outside the lock.
        let _older = self.0.lock().replace(summary);
    }

    /// What was left since the last take, if anything.
    pub fn take(&self) -> Option<UsageSummary> {
        self.0.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use troupe_runtime::usage_book::UsageTally;

    /// A summary of `requests` requests of one agent and model.
    fn summary(requests: u64) -> UsageSummary {
        let tally = UsageTally { request_count: requests, ..UsageTally::default() };
        serde_json::from_value(serde_json::json!({"default": {"local/echo": tally}})).expect("a summary")
    }

    #[test]
    fn the_newest_summary_is_taken_once() {
        let published = PublishedUsage::default();
        assert!(published.take().is_none(), "nothing left yet");
        published.leave(summary(1));
        published.leave(summary(2));
        let shared = published.clone();
        assert_eq!(shared.take(), Some(summary(2)), "the actor's newest summary reaches the supervisor's clone");
        assert!(published.take().is_none(), "and only once");
    }
}
