//! `[models."<provider>/<model id>"]`: what the daemon should know of a model that its catalog does not say: its
//! context window (which drives automatic compaction) and its prices (which stamp each request's estimated cost,
//! overriding the built-in table), and whether it takes images and PDFs. `local/*` models may be listed too, so offline tests can exercise compaction.
//!
//! `[compaction]`: whether a run compacts by itself when its next request would not fit, and the answer reserve.

use std::collections::BTreeMap;

use serde::Deserialize;
use troupe_protocol::types::runtime::ModelPricing;

/// One `[models."<provider>/<model id>"]` table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// The model's context window in tokens (input and output together).
    pub context_window: Option<u64>,
    /// Prices in USD per million tokens; they replace the built-in table's for this model.
    pub pricing: Option<PricingConfig>,
    /// Whether the model is sent the images and PDFs a user attaches (and tools emit). Unset means yes for the
    /// `openai` and `anthropic` providers; `false` sends each as a text note that names it and says it was not
    /// attached, for a text-only model behind an OpenAI-compatible server (which would refuse the request).
    /// `local/*` models always get the note.
    pub attachments: Option<bool>,
}

/// `pricing = { input_per_million_usd, output_per_million_usd, cache_read_per_million_usd?, ... }`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricingConfig {
    pub input_per_million_usd: f64,
    pub output_per_million_usd: f64,
    #[serde(default)]
    pub cache_read_per_million_usd: Option<f64>,
    #[serde(default)]
    pub cache_write_per_million_usd: Option<f64>,
}

impl From<&PricingConfig> for ModelPricing {
    fn from(pricing: &PricingConfig) -> Self {
        ModelPricing {
            input_per_million_usd: pricing.input_per_million_usd,
            output_per_million_usd: pricing.output_per_million_usd,
            cache_read_per_million_usd: pricing.cache_read_per_million_usd,
            cache_write_per_million_usd: pricing.cache_write_per_million_usd,
        }
    }
}

/// `[models]`, by full model name.
pub type ModelsConfig = BTreeMap<String, ModelConfig>;

// The prices are checked finite at load, so equality is an equivalence (`Config` is compared in tests).
impl Eq for ModelConfig {}
impl Eq for PricingConfig {}

/// `[compaction]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Whether a run compacts its history first when its next request would not fit the model's context window
    /// (only for models whose window is known). A provider's context-length error compacts either way.
    pub auto: bool,
    /// Tokens kept free for the answer; by default a quarter of the window, at most 16,384.
    pub reserve_tokens: Option<u64>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig { auto: true, reserve_tokens: None }
    }
}

/// Checks `[models]` and `[compaction]`; the error names the key.
pub(super) fn validate(models: &ModelsConfig, compaction: &CompactionConfig) -> Result<(), String> {
    for (name, model) in models {
        let Some((provider, id)) = name.split_once('/') else {
            return Err(format!("models.\"{name}\": the key must be of the form <provider>/<model id>"));
        };
        if provider.is_empty() || id.is_empty() {
            return Err(format!("models.\"{name}\": the key must be of the form <provider>/<model id>"));
        }
        if model.context_window == Some(0) {
            return Err(format!("models.\"{name}\".context_window must be greater than 0"));
        }
        if let Some(pricing) = &model.pricing {
            let prices = [
                Some(pricing.input_per_million_usd),
                Some(pricing.output_per_million_usd),
                pricing.cache_read_per_million_usd,
                pricing.cache_write_per_million_usd,
            ];
            if prices.into_iter().flatten().any(|price| !price.is_finite() || price < 0.0) {
                return Err(format!("models.\"{name}\".pricing: prices must be finite and not negative"));
            }
        }
    }
    if compaction.reserve_tokens == Some(0) {
        return Err("compaction.reserve_tokens must be greater than 0".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_and_compaction_parse_and_are_checked() {
        let models: ModelsConfig = toml::from_str(
            r#"
            ["openai/gpt-x"]
            context_window = 128000
            pricing = { input_per_million_usd = 1.0, output_per_million_usd = 2.0 }
            ["local/scripted"]
            context_window = 900
            "#,
        )
        .unwrap();
        assert_eq!(models["local/scripted"].context_window, Some(900));
        let pricing: ModelPricing = models["openai/gpt-x"].pricing.as_ref().unwrap().into();
        assert_eq!(pricing.output_per_million_usd, 2.0);
        assert_eq!(validate(&models, &CompactionConfig::default()), Ok(()));

        let bad: ModelsConfig = toml::from_str("[\"gpt\"]\ncontext_window = 1").unwrap();
        assert!(validate(&bad, &CompactionConfig::default()).unwrap_err().contains("<provider>/<model id>"));
        let bad: ModelsConfig = toml::from_str("[\"a/b\"]\ncontext_window = 0").unwrap();
        assert!(validate(&bad, &CompactionConfig::default()).is_err());
        let bad: ModelsConfig =
            toml::from_str("[\"a/b\"]\npricing = { input_per_million_usd = -1.0, output_per_million_usd = 1.0 }")
                .unwrap();
        assert!(validate(&bad, &CompactionConfig::default()).unwrap_err().contains("pricing"));
        assert!(toml::from_str::<ModelsConfig>("[\"a/b\"]\nwindow = 1").is_err(), "unknown keys are errors");

        let compaction: CompactionConfig = toml::from_str("auto = false\nreserve_tokens = 100").unwrap();
        assert!(!compaction.auto);
        assert!(CompactionConfig::default().auto);
    }
}
