//! `[console]`: the web console the daemon serves at `/` (`gateway/src/console/`).

use serde::Deserialize;

/// The longest a browser stays signed in: 30 days.
pub const MAX_CONSOLE_SESSION_HOURS: u64 = 30 * 24;

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Whether the daemon serves the console and accepts its sign-ins. `false`: `/` is 404, no cookie is accepted at
    /// `/ws`, and `console.login_code` answers `console_disabled`.
    pub enabled: bool,
    /// How long a signed-in browser stays signed in (1 to 720 hours), counted from its sign-in.
    pub session_hours: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig { enabled: true, session_hours: 24 }
    }
}

/// The problems of `[console]`, in words.
pub(super) fn validate(config: &ConsoleConfig) -> Result<(), String> {
    if (1..=MAX_CONSOLE_SESSION_HOURS).contains(&config.session_hours) {
        Ok(())
    } else {
        Err(format!("console.session_hours must be between 1 and {MAX_CONSOLE_SESSION_HOURS}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_on_for_a_day_and_bounds_the_session() {
        let config = ConsoleConfig::default();
        assert!(config.enabled);
        assert_eq!(config.session_hours, 24);
        assert!(validate(&config).is_ok());
        assert!(validate(&ConsoleConfig { enabled: true, session_hours: 0 }).is_err());
        assert!(validate(&ConsoleConfig { enabled: true, session_hours: 721 }).is_err());
        assert!(toml::from_str::<ConsoleConfig>("enabled = false\nsession_hours = 8").is_ok());
        assert!(toml::from_str::<ConsoleConfig>("ttl = 1").is_err());
    }
}
