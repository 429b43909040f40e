//! `[titles]`: automatic session titles (`actors/src/session_actor/title.rs`).

use serde::Deserialize;

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TitlesConfig {
    /// Whether a root session's first run asks the session's model for a short title. `false` titles sessions
    /// with the first line of their first input only, without a model request.
    pub auto: bool,
}

impl Default for TitlesConfig {
    fn default() -> Self {
        TitlesConfig { auto: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_default_to_auto_and_reject_unknown_keys() {
        assert!(TitlesConfig::default().auto);
        let config: TitlesConfig = toml::from_str("auto = false").unwrap();
        assert!(!config.auto);
        assert!(toml::from_str::<TitlesConfig>("model = \"x\"").is_err());
    }
}
