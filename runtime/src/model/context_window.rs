//! Context windows of well-known models, so runs on them compact before a request would not fit without any
//! configuration. **Approximate**, as published when the table was written; `[models."<model>"] context_window` in
//! `config.toml` wins, and a provider's context-length error is recovered from either way.

/// `(family, tokens)`: the model id, or the prefix of its dated and point releases.
const BUILTIN_WINDOWS: &[(&str, u64)] = &[
    ("gpt-4o", 128_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4.1-nano", 1_047_576),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    ("claude-opus-4", 200_000),
    ("claude-sonnet-4", 200_000),
    ("claude-3-7-sonnet", 200_000),
    ("claude-3-5-sonnet", 200_000),
    ("claude-3-5-haiku", 200_000),
];

/// The built-in context window of `model`, a vendor model id or a `<provider>/<model id>` reference. Dated or
/// point releases match their family; the longest matching family wins.
pub fn builtin_context_window(model: &str) -> Option<u64> {
    let model_id = model.rsplit_once('/').map_or(model, |(_, id)| id);
    BUILTIN_WINDOWS
        .iter()
        .filter(|(family, _)| {
            model_id == *family || model_id.strip_prefix(family).is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|(family, _)| family.len())
        .map(|(_, tokens)| *tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_match_their_releases_and_the_longest_wins() {
        assert_eq!(builtin_context_window("openai/gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(builtin_context_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(builtin_context_window("anthropic/claude-sonnet-4-20250514"), Some(200_000));
        assert_eq!(builtin_context_window("gpt-4oops"), None);
        assert_eq!(builtin_context_window("local/scripted"), None);
    }
}
