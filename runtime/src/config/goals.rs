//! `[goals]`: an optional bound on the automatic runs a session's goal starts.
//!
//! The reference makes pause, resume and cancel the user's alone, so by default the engine never pauses a goal on
//! its own: the bound on runs without progress is there only for an operator who asks for it.

use serde::Deserialize;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GoalsConfig {
    /// Opt-in: automatic runs in a row that may leave the goal's checklist unchanged; the next wake-up pauses the
    /// goal with a reason instead, so a model that makes no progress cannot loop forever. At least 1 when set;
    /// unset (the default), only the user pauses, resumes or cancels a goal.
    pub max_idle_runs: Option<u32>,
}

/// Checks `[goals]`; the error names the key.
pub(super) fn validate(goals: &GoalsConfig) -> Result<(), String> {
    if goals.max_idle_runs == Some(0) {
        return Err("goals.max_idle_runs must be greater than 0".to_owned());
    }
    Ok(())
}
