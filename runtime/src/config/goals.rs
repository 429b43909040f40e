//! `[goals]`: bounds on the automatic runs a session's goal starts.

use serde::Deserialize;

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GoalsConfig {
    /// Automatic runs in a row that may leave the goal's checklist unchanged; the next wake-up pauses the goal
    /// with a reason instead, so a model that makes no progress cannot loop forever. At least 1.
    pub max_idle_runs: u32,
}

impl Default for GoalsConfig {
    fn default() -> Self {
        GoalsConfig { max_idle_runs: 3 }
    }
}

/// Checks `[goals]`; the error names the key.
pub(super) fn validate(goals: &GoalsConfig) -> Result<(), String> {
    if goals.max_idle_runs == 0 {
        return Err("goals.max_idle_runs must be greater than 0".to_owned());
    }
    Ok(())
}
