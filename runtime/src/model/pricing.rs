//! Estimated cost of a request, from per-million-token prices.
//!
//! [`builtin_pricing`] knows a handful of well-known models so usage reports can show a cost before any
//! catalog is loaded. **The table is approximate**: list prices in USD per million tokens as published when it
//! was written, without batch or regional discounts, long-context surcharges or later price changes. A
//! catalog's own [`ModelPricing`] should be preferred whenever there is one.

use troupe_protocol::types::runtime::ModelPricing;

use super::TokenUsage;

/// A model family's list prices, in USD per million tokens.
struct BuiltinPrice {
    /// The model id, or the prefix of its dated and point releases.
    family: &'static str,
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

const fn price(
    family: &'static str,
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
) -> BuiltinPrice {
    BuiltinPrice { family, input, output, cache_read, cache_write }
}

const BUILTIN_PRICES: &[BuiltinPrice] = &[
    price("gpt-4o", 2.50, 10.00, Some(1.25), None),
    price("gpt-4o-mini", 0.15, 0.60, Some(0.075), None),
    price("gpt-4.1", 2.00, 8.00, Some(0.50), None),
    price("gpt-4.1-mini", 0.40, 1.60, Some(0.10), None),
    price("gpt-4.1-nano", 0.10, 0.40, Some(0.025), None),
    price("o3-mini", 1.10, 4.40, Some(0.55), None),
    price("o4-mini", 1.10, 4.40, Some(0.275), None),
    price("claude-opus-4", 15.00, 75.00, Some(1.50), Some(18.75)),
    price("claude-sonnet-4", 3.00, 15.00, Some(0.30), Some(3.75)),
    price("claude-3-7-sonnet", 3.00, 15.00, Some(0.30), Some(3.75)),
    price("claude-3-5-sonnet", 3.00, 15.00, Some(0.30), Some(3.75)),
    price("claude-3-5-haiku", 0.80, 4.00, Some(0.08), Some(1.00)),
];

/// The built-in price of `model`, a vendor model id or a `<provider>/<model id>` reference.
///
/// Dated or point releases match their family (`claude-sonnet-4-20250514` is `claude-sonnet-4`,
/// `gpt-4o-2024-08-06` is `gpt-4o`); the longest matching family wins, so `gpt-4o-mini` is not `gpt-4o`.
pub fn builtin_pricing(model: &str) -> Option<ModelPricing> {
    let model_id = model.rsplit_once('/').map_or(model, |(_, id)| id);
    BUILTIN_PRICES
        .iter()
        .filter(|entry| {
            model_id == entry.family || model_id.strip_prefix(entry.family).is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|entry| entry.family.len())
        .map(|entry| ModelPricing {
            input_per_million_usd: entry.input,
            output_per_million_usd: entry.output,
            cache_read_per_million_usd: entry.cache_read,
            cache_write_per_million_usd: entry.cache_write,
        })
}

/// The cost of `usage` at `pricing`, in USD.
///
/// `usage.input_tokens` includes cached tokens (see [`TokenUsage`]): cache reads and writes are charged at
/// their own prices, or at the input price when the model has none, and only the rest at the input entry.
pub fn estimate_cost_usd(pricing: &ModelPricing, usage: &TokenUsage) -> f64 {
    let per_token = |per_million: f64| per_million / 1_000_000.0;
    let uncached_input =
        usage.input_tokens.saturating_sub(usage.cache_read_tokens).saturating_sub(usage.cache_write_tokens);
    let cache_read_price = pricing.cache_read_per_million_usd.unwrap_or(pricing.input_per_million_usd);
    let cache_write_price = pricing.cache_write_per_million_usd.unwrap_or(pricing.input_per_million_usd);
    uncached_input as f64 * per_token(pricing.input_per_million_usd)
        + usage.cache_read_tokens as f64 * per_token(cache_read_price)
        + usage.cache_write_tokens as f64 * per_token(cache_write_price)
        + usage.output_tokens as f64 * per_token(pricing.output_per_million_usd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_match_dated_releases_and_the_longest_wins() {
        let price = |model: &str| builtin_pricing(model).map(|p| p.input_per_million_usd);
        assert_eq!(price("gpt-4o"), Some(2.50));
        assert_eq!(price("openai/gpt-4o-2024-08-06"), Some(2.50));
        assert_eq!(price("gpt-4o-mini"), Some(0.15));
        assert_eq!(price("gpt-4.1-mini-2025-04-14"), Some(0.40));
        assert_eq!(price("anthropic/claude-sonnet-4-20250514"), Some(3.00));
        assert_eq!(price("claude-3-5-haiku-latest"), Some(0.80));
        assert_eq!(price("gpt-4oops"), None);
        assert_eq!(price("local/echo"), None);
    }

    #[test]
    fn cached_tokens_are_charged_at_cache_prices() {
        let pricing = builtin_pricing("claude-sonnet-4").unwrap();
        let usage = TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            reasoning_tokens: 0,
            cache_read_tokens: 500_000,
            cache_write_tokens: 100_000,
        };
        // 400k uncached at 3.00, 500k reads at 0.30, 100k writes at 3.75, 100k out at 15.00.
        let expected = 1.2 + 0.15 + 0.375 + 1.5;
        assert!((estimate_cost_usd(&pricing, &usage) - expected).abs() < 1e-9);
    }
}
