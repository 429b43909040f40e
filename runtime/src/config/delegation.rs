//! `[delegation]`: bounds on the `delegate` tool, with which a run hands a task to an agent in a child session.

use serde::Deserialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegationConfig {
    /// How deep a tree may grow: a root session has depth 0, its children 1, and so on. Runs of a session whose
    /// depth is `max_depth` or more are not offered `delegate`, so a model cannot recurse without end. 0 turns
    /// delegation off.
    pub max_depth: u32,
    /// Children one run may have working at the same time (several `delegate` calls of one model turn run
    /// concurrently); a call beyond it is answered with a tool error. At least 1.
    pub max_concurrency: u32,
    /// Sessions one tree may hold besides its root, counting every depth; a `delegate` call that would create
    /// one more is answered with a tool error. It bounds what a model looping on `delegate` costs in processes,
    /// logs and disk, which `max_depth` and `max_concurrency` alone do not (a run may delegate turn after turn).
    /// At least 1.
    pub max_sessions_per_tree: u32,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig { max_depth: 3, max_concurrency: 4, max_sessions_per_tree: 64 }
    }
}

impl DelegationConfig {
    /// Whether runs of a session at `depth` may delegate.
    pub fn allows_depth(&self, depth: u32) -> bool {
        depth < self.max_depth
    }
}

/// Checks `[delegation]`; the error names the key.
pub(super) fn validate(delegation: &DelegationConfig) -> Result<(), String> {
    if delegation.max_concurrency == 0 {
        return Err("delegation.max_concurrency must be greater than 0".to_owned());
    }
    if delegation.max_sessions_per_tree == 0 {
        return Err(
            "delegation.max_sessions_per_tree must be greater than 0 (max_depth = 0 turns delegation off)".to_owned()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_section_is_read_with_defaults_and_checked() {
        let parse = |text: &str| super::super::parse(text, Path::new("/data/config.toml"));
        assert_eq!(parse("").unwrap().delegation, DelegationConfig::default());
        let read = parse("[delegation]\nmax_depth = 1\nmax_sessions_per_tree = 8\n").unwrap().delegation;
        assert_eq!(read, DelegationConfig { max_depth: 1, max_concurrency: 4, max_sessions_per_tree: 8 });
        assert!(read.allows_depth(0) && !read.allows_depth(1));
        let error = parse("[delegation]\nmax_concurrency = 0\n").unwrap_err().to_string();
        assert!(error.contains("delegation.max_concurrency"), "{error}");
        let error = parse("[delegation]\nmax_sessions_per_tree = 0\n").unwrap_err().to_string();
        assert!(error.contains("delegation.max_sessions_per_tree"), "{error}");
        assert!(parse("[delegation]\nmax_width = 2\n").is_err(), "unknown keys are refused");
    }
}
