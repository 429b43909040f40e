//! Usage rollups: `model_usage_recorded` events summed per (agent, model).
//!
//! A session's [`UsageBook`] keeps two views of its requests:
//! - `spent`: every `model_usage_recorded` of the physical log. A revert hides turns from the model, but their
//!   requests were paid for, so they stay here. This is what `usage.global`, `agent.usage`, `session.tree_usage`
//!   and `session.usage`'s `spent` count, and what the session reports to the supervisor's usage index (as a
//!   [`UsageSummary`], also kept in `meta.json` so a restart reads no log for it).
//!   In a fork, the copied prefix's requests were spent by the source (and are counted there): `session_forked`
//!   starts the fork's `spent` at zero, and only the fork's own requests follow.
//! - `visible`: the requests of the events a revert left visible (`session.usage`'s `usage`), a fork's copied
//!   prefix included (the conversation it continues cost them). After a revert
//!   (and when a reverted session loads) `SessionState::adopt_branch` takes it from the projection of just the
//!   visible events ([`UsageBook::adopt_branch`]); [`UsageBook::reset_visible`] and [`UsageBook::apply_visible`]
//!   rebuild it event by event instead.
//!
//! Costs are stamped per request when the event is recorded and never recomputed here. They are summed as integer
//! pico-USD (each event's `f64` rounded once), so a total does not depend on the order its parts were added in,
//! and the index can subtract a session's old summary from its running totals exactly. A rollup's
//! `estimated_cost_usd` is null when none of its requests had a cost (an unpriced model), else the sum of the
//! priced ones: a per-model row of an unpriced model is null, and a total over priced and unpriced models counts
//! what is known. `cache_hit_rate` is `cache_read_tokens / input_tokens` (input includes cached tokens, see
//! `model::TokenUsage`), null when there were no input tokens.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::usage::{UsageFigures, UsageRollup};

/// Pico-USD per USD: costs are summed in millionths of a millionth of a dollar.
const PICO_PER_USD: f64 = 1e12;

/// The summed requests of one (agent, model) pair, in integers only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTally {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub request_count: u64,
    /// Requests whose event carried a cost: the cost is unknown (null) when there were none.
    pub priced_requests: u64,
    /// The sum of the priced requests' costs, in pico-USD (saturating at about 18 million USD).
    pub cost_pico_usd: u64,
}

impl UsageTally {
    /// One request's counts. A cost that is not a finite non-negative number counts as no cost.
    fn of_request(
        input_tokens: u64,
        output_tokens: u64,
        reasoning_tokens: u64,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        estimated_cost_usd: Option<f64>,
    ) -> UsageTally {
        let cost = estimated_cost_usd.filter(|cost| cost.is_finite() && *cost >= 0.0);
        UsageTally {
            input_tokens,
            output_tokens,
            reasoning_tokens,
            cache_read_tokens,
            cache_write_tokens,
            request_count: 1,
            priced_requests: u64::from(cost.is_some()),
            // `as` saturates a float too large for u64.
            cost_pico_usd: cost.map_or(0, |cost| (cost * PICO_PER_USD).round() as u64),
        }
    }

    fn add(&mut self, other: &UsageTally) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(other.cache_write_tokens);
        self.request_count = self.request_count.saturating_add(other.request_count);
        self.priced_requests = self.priced_requests.saturating_add(other.priced_requests);
        self.cost_pico_usd = self.cost_pico_usd.saturating_add(other.cost_pico_usd);
    }

    /// Takes back what an earlier [`UsageTally::add`] of `other` added (exact: integers only).
    fn subtract(&mut self, other: &UsageTally) {
        self.input_tokens = self.input_tokens.saturating_sub(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_sub(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_sub(other.reasoning_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_sub(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_sub(other.cache_write_tokens);
        self.request_count = self.request_count.saturating_sub(other.request_count);
        self.priced_requests = self.priced_requests.saturating_sub(other.priced_requests);
        self.cost_pico_usd = self.cost_pico_usd.saturating_sub(other.cost_pico_usd);
    }

    fn is_zero(&self) -> bool {
        self.request_count == 0
    }

    /// The wire figures: rate and cost derived, nulls where they are unknown.
    pub fn figures(&self) -> UsageFigures {
        UsageFigures {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            reasoning_tokens: self.reasoning_tokens,
            cache_read_tokens: self.cache_read_tokens,
            cache_write_tokens: self.cache_write_tokens,
            request_count: self.request_count,
            cache_hit_rate: (self.input_tokens > 0).then(|| self.cache_read_tokens as f64 / self.input_tokens as f64),
            estimated_cost_usd: (self.priced_requests > 0).then(|| self.cost_pico_usd as f64 / PICO_PER_USD),
        }
    }
}

/// Requests summed per agent, then per model: a session's spent usage as the index and `meta.json` keep it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UsageSummary {
    by_agent: BTreeMap<String, BTreeMap<String, UsageTally>>,
}

impl UsageSummary {
    pub fn is_empty(&self) -> bool {
        self.by_agent.is_empty()
    }

    fn add_tally(&mut self, agent: &str, model: &str, tally: &UsageTally) {
        let models = self.by_agent.entry(agent.to_owned()).or_default();
        models.entry(model.to_owned()).or_default().add(tally);
    }

    /// Adds every entry of `other`.
    pub fn add(&mut self, other: &UsageSummary) {
        for (agent, model, tally) in other.entries() {
            self.add_tally(agent, model, tally);
        }
    }

    /// Takes back an earlier [`UsageSummary::add`] of `other`; entries that fall to nothing are removed.
    pub fn subtract(&mut self, other: &UsageSummary) {
        for (agent, model, tally) in other.entries() {
            let Some(models) = self.by_agent.get_mut(agent) else { continue };
            if let Some(mine) = models.get_mut(model) {
                mine.subtract(tally);
                if mine.is_zero() {
                    models.remove(model);
                }
            }
            if models.is_empty() {
                self.by_agent.remove(agent);
            }
        }
    }

    /// Every (agent, model, tally), in order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &UsageTally)> {
        self.by_agent.iter().flat_map(|(agent, models)| {
            models.iter().map(move |(model, tally)| (agent.as_str(), model.as_str(), tally))
        })
    }

    /// All requests of the summary.
    pub fn rollup(&self) -> UsageRollup {
        rollup_of(self.entries().map(|(_, model, tally)| (model, tally)))
    }

    /// The requests attributed to `agent` (an empty rollup when it has none).
    pub fn agent_rollup(&self, agent: &str) -> UsageRollup {
        let models = self.by_agent.get(agent).into_iter().flatten();
        rollup_of(models.map(|(model, tally)| (model.as_str(), tally)))
    }
}

/// Sums tallies into a rollup: the totals and one row per model.
pub fn rollup_of<'a>(tallies: impl Iterator<Item = (&'a str, &'a UsageTally)>) -> UsageRollup {
    let mut totals = UsageTally::default();
    let mut by_model: BTreeMap<String, UsageTally> = BTreeMap::new();
    for (model, tally) in tallies {
        totals.add(tally);
        by_model.entry(model.to_owned()).or_default().add(tally);
    }
    UsageRollup {
        totals: totals.figures(),
        by_model: by_model.into_iter().map(|(model, tally)| (model, tally.figures())).collect(),
    }
}

/// A session's usage, spent and visible (see the module docs).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct UsageBook {
    spent: UsageSummary,
    visible: UsageSummary,
    /// The seq of the newest usage event applied, so the session actor can tell when it is durable.
    last_usage_seq: u64,
}

/// The request an event records, if it is a `model_usage_recorded`.
fn request_of(event: &StoredEvent) -> Option<(&str, &str, UsageTally)> {
    let EventPayload::ModelUsageRecorded {
        model,
        agent,
        input_tokens,
        output_tokens,
        reasoning_tokens,
        cache_read_tokens,
        cache_write_tokens,
        estimated_cost_usd,
        ..
    } = &event.payload
    else {
        return None;
    };
    let tally = UsageTally::of_request(
        *input_tokens,
        *output_tokens,
        *reasoning_tokens,
        *cache_read_tokens,
        *cache_write_tokens,
        *estimated_cost_usd,
    );
    Some((agent, model, tally))
}

impl UsageBook {
    /// Applies one event of the log, which counts as spent and (until a revert says otherwise) visible.
    pub fn apply(&mut self, event: &StoredEvent) {
        if let Some((agent, model, tally)) = request_of(event) {
            self.spent.add_tally(agent, model, &tally);
            self.visible.add_tally(agent, model, &tally);
            self.last_usage_seq = self.last_usage_seq.max(event.seq);
        }
        if let EventPayload::SessionForked { .. } = event.payload {
            self.spent = UsageSummary::default();
        }
    }

    /// Forgets the visible view, before it is rebuilt from the visible events with [`UsageBook::apply_visible`].
    pub fn reset_visible(&mut self) {
        self.visible = UsageSummary::default();
    }

    /// Applies a visible event to the visible view only (it was applied to `spent` when it was appended).
    pub fn apply_visible(&mut self, event: &StoredEvent) {
        if let Some((agent, model, tally)) = request_of(event) {
            self.visible.add_tally(agent, model, &tally);
        }
    }

    /// Takes the visible view from `branch`, the book of a projection of just the visible events, as
    /// `SessionState::adopt_branch` does for the other branch-derived parts.
    pub fn adopt_branch(&mut self, branch: UsageBook) {
        self.visible = branch.visible;
    }

    /// Everything the session spent.
    pub fn spent_rollup(&self) -> UsageRollup {
        self.spent.rollup()
    }

    /// The requests of the visible branch.
    pub fn visible_rollup(&self) -> UsageRollup {
        self.visible.rollup()
    }

    /// The spent view, as the usage index and `meta.json` keep it.
    pub fn summary(&self) -> &UsageSummary {
        &self.spent
    }

    /// The seq of the newest `model_usage_recorded` applied (0 when none).
    pub fn last_usage_seq(&self) -> u64 {
        self.last_usage_seq
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::events::UsagePurpose;

    use super::*;

    fn usage(seq: u64, agent: &str, model: &str, input: u64, output: u64, cost: Option<f64>) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: Some("r".into()),
            seq,
            timestamp: "2026-01-01T00:00:00Z".into(),
            origin: None,
            payload: EventPayload::ModelUsageRecorded {
                attempt_id: format!("a{seq}"),
                model: model.into(),
                agent: agent.into(),
                input_tokens: input,
                output_tokens: output,
                reasoning_tokens: 1,
                cache_read_tokens: input / 2,
                cache_write_tokens: 0,
                estimated_cost_usd: cost,
                purpose: UsagePurpose::default(),
            },
        }
    }

    #[test]
    fn totals_and_rows_sum_the_requests() {
        let mut book = UsageBook::default();
        book.apply(&usage(2, "default", "openai/gpt-4o-mini", 100, 20, Some(0.1)));
        book.apply(&usage(3, "default", "openai/gpt-4o-mini", 300, 30, Some(0.2)));
        book.apply(&usage(4, "review", "local/echo", 0, 5, None));
        let rollup = book.spent_rollup();
        assert_eq!(rollup.totals.input_tokens, 400);
        assert_eq!(rollup.totals.output_tokens, 55);
        assert_eq!(rollup.totals.reasoning_tokens, 3);
        assert_eq!(rollup.totals.cache_read_tokens, 200);
        assert_eq!(rollup.totals.request_count, 3);
        assert_eq!(rollup.totals.cache_hit_rate, Some(0.5));
        // The priced requests' sum, exact: 0.1 + 0.2 in f64 would be 0.30000000000000004.
        assert_eq!(rollup.totals.estimated_cost_usd, Some(0.3));
        let mini = &rollup.by_model["openai/gpt-4o-mini"];
        assert_eq!((mini.request_count, mini.estimated_cost_usd), (2, Some(0.3)));
        let echo = &rollup.by_model["local/echo"];
        assert_eq!((echo.request_count, echo.estimated_cost_usd, echo.cache_hit_rate), (1, None, None));
        assert_eq!(book.visible_rollup(), rollup, "nothing was reverted");
        assert_eq!(book.last_usage_seq(), 4);
        assert_eq!(book.summary().agent_rollup("review").totals.output_tokens, 5);
        assert_eq!(book.summary().agent_rollup("nobody"), UsageRollup::empty());
    }

    #[test]
    fn costs_do_not_depend_on_the_order_of_the_requests() {
        let costs = [0.1, 0.2, 0.3, 1e-7, 123.456_789, 0.000_27];
        let mut forward = UsageBook::default();
        let mut backward = UsageBook::default();
        for (seq, cost) in costs.iter().enumerate() {
            forward.apply(&usage(seq as u64 + 2, "a", "m", 1, 1, Some(*cost)));
        }
        for (seq, cost) in costs.iter().rev().enumerate() {
            backward.apply(&usage(seq as u64 + 2, "a", "m", 1, 1, Some(*cost)));
        }
        assert_eq!(forward.spent_rollup(), backward.spent_rollup());
    }

    #[test]
    fn a_rollup_without_any_priced_request_has_no_cost_and_unpriced_requests_add_nothing() {
        let mut book = UsageBook::default();
        book.apply(&usage(2, "a", "local/echo", 10, 1, None));
        assert_eq!(book.spent_rollup().totals.estimated_cost_usd, None);
        book.apply(&usage(3, "a", "x/priced", 10, 1, Some(0.5)));
        book.apply(&usage(4, "a", "x/broken", 10, 1, Some(f64::NAN)));
        let rollup = book.spent_rollup();
        assert_eq!(rollup.totals.estimated_cost_usd, Some(0.5));
        assert_eq!(rollup.by_model["x/broken"].estimated_cost_usd, None, "a cost that is not a number is unknown");
        assert_eq!(rollup.totals.request_count, 3);
    }

    #[test]
    fn a_revert_changes_the_visible_view_but_not_what_was_spent() {
        let first = usage(2, "a", "m", 100, 10, Some(0.01));
        let hidden = usage(5, "a", "m", 200, 20, Some(0.02));
        let mut book = UsageBook::default();
        book.apply(&first);
        book.apply(&hidden);
        book.reset_visible();
        book.apply_visible(&first);
        assert_eq!(book.visible_rollup().totals.input_tokens, 100);
        assert_eq!(book.visible_rollup().totals.estimated_cost_usd, Some(0.01));
        assert_eq!(book.spent_rollup().totals.input_tokens, 300);
        assert_eq!(book.spent_rollup().totals.estimated_cost_usd, Some(0.03));
        // A turn after the revert is both spent and visible.
        book.apply(&usage(7, "a", "m", 1, 1, None));
        assert_eq!(book.visible_rollup().totals.request_count, 2);
        assert_eq!(book.spent_rollup().totals.request_count, 3);
        assert_eq!(book.summary().rollup(), book.spent_rollup());
        // Adopting a branch's book is the same as rebuilding the visible view from its events.
        let mut branch = UsageBook::default();
        branch.apply(&first);
        let mut adopted = book.clone();
        adopted.adopt_branch(branch);
        assert_eq!(adopted.visible_rollup().totals.request_count, 1);
        assert_eq!(adopted.spent_rollup(), book.spent_rollup());
        // Non-usage events change nothing.
        book.apply_visible(&StoredEvent { payload: EventPayload::RunCompleted { final_text: None }, ..first });
        assert_eq!(book.visible_rollup().totals.request_count, 2);
    }

    #[test]
    fn summaries_add_subtract_and_round_trip_through_json() {
        let mut one = UsageBook::default();
        one.apply(&usage(2, "a", "m", 100, 10, Some(0.01)));
        one.apply(&usage(3, "b", "n", 7, 1, None));
        let mut two = UsageBook::default();
        two.apply(&usage(2, "a", "m", 50, 5, Some(0.005)));
        let mut total = UsageSummary::default();
        total.add(one.summary());
        total.add(two.summary());
        assert_eq!(total.agent_rollup("a").totals.input_tokens, 150);
        assert_eq!(total.rollup().totals.estimated_cost_usd, Some(0.015));
        total.subtract(one.summary());
        assert_eq!(&total, two.summary(), "subtracting is exact and drops emptied entries");
        total.subtract(two.summary());
        assert!(total.is_empty());

        let json = serde_json::to_value(one.summary()).unwrap();
        assert_eq!(json["a"]["m"]["cost_pico_usd"], 10_000_000_000u64);
        assert_eq!(serde_json::from_value::<UsageSummary>(json).unwrap(), *one.summary());
    }
}
