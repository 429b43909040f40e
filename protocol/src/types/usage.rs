//! Token and request usage: `session.usage`, `agent.usage`, `usage.global`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Token and request counts of a set of model turns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageFigures {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Model requests that reported usage.
    pub request_count: u64,
    /// Share of prompt tokens read from the provider's cache, in 0..=1; null when there were no prompt tokens.
    pub cache_hit_rate: Option<f64>,
    /// Estimated from the models' pricing; null when it cannot be estimated (a model without pricing).
    pub estimated_cost_usd: Option<f64>,
}

/// Usage totals plus the same figures per model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageRollup {
    /// The totals, flattened into this object.
    #[serde(flatten)]
    pub totals: UsageFigures,
    /// Keyed by `<provider_id>/<model id>`.
    pub by_model: BTreeMap<String, UsageFigures>,
}

impl UsageRollup {
    /// No usage at all: zero counts, null rates and costs, no models.
    pub fn empty() -> Self {
        Self::default()
    }
}

/// `session.usage` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionUsageResult {
    pub session_id: String,
    /// The visible branch: requests of the events a revert did not hide.
    pub usage: UsageRollup,
    /// Everything this session spent, reverted-away turns included (what `usage.global` counts).
    #[serde(default)]
    pub spent: UsageRollup,
}

/// `session.tree_usage` result: everything the session and its delegated descendants spent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionTreeUsageResult {
    pub session_id: String,
    pub usage: UsageRollup,
    /// Sessions counted: the session itself and every descendant.
    pub session_count: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentUsageParams {
    pub agent_id: String,
}

/// `agent.usage` result: turns attributed to the agent, across all sessions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentUsageResult {
    pub agent_id: String,
    pub usage: UsageRollup,
}

/// `usage.global` result: all sessions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GlobalUsageResult {
    pub usage: UsageRollup,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rollup_totals_are_flattened_next_to_by_model() {
        let figures = UsageFigures {
            input_tokens: 100,
            output_tokens: 20,
            reasoning_tokens: 0,
            cache_read_tokens: 50,
            cache_write_tokens: 0,
            request_count: 2,
            cache_hit_rate: Some(0.5),
            estimated_cost_usd: None,
        };
        let rollup =
            UsageRollup { totals: figures.clone(), by_model: BTreeMap::from([("local/echo".to_owned(), figures)]) };
        let expected_figures = json!({
            "input_tokens": 100, "output_tokens": 20, "reasoning_tokens": 0, "cache_read_tokens": 50,
            "cache_write_tokens": 0, "request_count": 2, "cache_hit_rate": 0.5, "estimated_cost_usd": null
        });
        let mut expected = expected_figures.clone();
        expected["by_model"] = json!({"local/echo": expected_figures});
        assert_eq!(serde_json::to_value(&rollup).unwrap(), expected);
        assert_eq!(serde_json::from_value::<UsageRollup>(expected).unwrap(), rollup);
    }

    #[test]
    fn the_empty_rollup_has_null_rates_and_no_models() {
        assert_eq!(
            serde_json::to_value(UsageRollup::empty()).unwrap(),
            json!({
                "input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "cache_read_tokens": 0,
                "cache_write_tokens": 0, "request_count": 0, "cache_hit_rate": null,
                "estimated_cost_usd": null, "by_model": {}
            })
        );
    }
}
