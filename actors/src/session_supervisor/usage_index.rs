//! The supervisor's usage index: every session's spent usage, so `usage.global`, `agent.usage` and
//! `session.tree_usage` never load a log.
//!
//! It is fed at start by the supervisor's scan (from each `meta.json`, or from the log where the cache was missing
//! or stale) and afterwards by the session actors: each leaves its new summary once a batch with a
//! `model_usage_recorded` is durable, which the supervisor takes before each rollup (`published_usage.rs`), and
//! sends what it left untaken when it stops. A summary replaces the session's previous one. The running totals over all
//! sessions are kept up to date by subtracting the old summary and adding the new one, exact because summaries are
//! integers (see `troupe_runtime::usage_book`), so the global and per-agent rollups cost nothing per session.

use std::collections::HashMap;

use troupe_protocol::types::usage::UsageRollup;
use troupe_runtime::usage_book::{UsageSummary, rollup_of};

#[derive(Default)]
pub struct UsageIndex {
    /// The spent usage of each session that has any.
    by_session: HashMap<String, UsageSummary>,
    /// The sum of every entry of `by_session`.
    totals: UsageSummary,
}

impl UsageIndex {
    /// Records the session's whole spent usage, replacing what was known of it.
    pub fn set(&mut self, session_id: &str, summary: UsageSummary) {
        let old = if summary.is_empty() {
            self.by_session.remove(session_id)
        } else {
            self.totals.add(&summary);
            self.by_session.insert(session_id.to_owned(), summary)
        };
        if let Some(old) = old {
            self.totals.subtract(&old);
        }
    }

    /// Everything every session spent.
    pub fn global(&self) -> UsageRollup {
        self.totals.rollup()
    }

    /// The requests attributed to `agent`, in every session; an empty rollup for an agent without any.
    pub fn agent(&self, agent: &str) -> UsageRollup {
        self.totals.agent_rollup(agent)
    }

    /// What the given sessions spent together.
    pub fn sessions<'a>(&self, session_ids: impl Iterator<Item = &'a String>) -> UsageRollup {
        let summaries: Vec<&UsageSummary> = session_ids.filter_map(|id| self.by_session.get(id)).collect();
        rollup_of(summaries.iter().flat_map(|summary| summary.entries().map(|(_, model, tally)| (model, tally))))
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::events::{EventPayload, StoredEvent};
    use troupe_runtime::usage_book::UsageBook;

    use super::*;

    fn summary(requests: &[(&str, &str, u64, Option<f64>)]) -> UsageSummary {
        let mut book = UsageBook::default();
        for (seq, (agent, model, input, cost)) in requests.iter().enumerate() {
            book.apply(&StoredEvent {
                session_id: "s".into(),
                run_id: None,
                seq: seq as u64 + 2,
                timestamp: "2026-01-01T00:00:00Z".into(),
                origin: None,
                payload: EventPayload::ModelUsageRecorded {
                    attempt_id: "a".into(),
                    model: (*model).into(),
                    agent: (*agent).into(),
                    input_tokens: *input,
                    output_tokens: 1,
                    reasoning_tokens: 0,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                    estimated_cost_usd: *cost,
                    purpose: Default::default(),
                },
            });
        }
        book.summary().clone()
    }

    #[test]
    fn a_new_summary_replaces_the_old_one_in_every_rollup() {
        let mut index = UsageIndex::default();
        index.set("s1", summary(&[("default", "m", 10, Some(0.1))]));
        index.set("s2", summary(&[("review", "m", 5, None), ("default", "n", 1, Some(0.2))]));
        assert_eq!(index.global().totals.input_tokens, 16);
        assert_eq!(index.global().totals.estimated_cost_usd, Some(0.3));
        index.set("s1", summary(&[("default", "m", 10, Some(0.1)), ("default", "m", 20, Some(0.1))]));
        assert_eq!(index.global().totals.input_tokens, 36);
        assert_eq!(index.global().totals.request_count, 4);
        assert_eq!(index.agent("default").totals.input_tokens, 31);
        assert_eq!(index.agent("review").totals.estimated_cost_usd, None);
        assert_eq!(index.agent("nobody"), UsageRollup::empty());
        let both = [String::from("s1"), String::from("s2"), String::from("no usage")];
        assert_eq!(index.sessions(both.iter()), index.global());
        assert_eq!(index.sessions(both[1..].iter()).totals.input_tokens, 6);
        index.set("s2", UsageSummary::default());
        assert_eq!(index.global().totals.input_tokens, 30);
        assert!(index.agent("review").by_model.is_empty());
    }
}
