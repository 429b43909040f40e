//! Runtime producers: `session.producers`.
//!
//! A producer is a runtime registration allowed to send messages into a session (a plugin, a delegated child
//! reporting back, a goal's continuation reminders). Registrations are never persisted: they are inspected here,
//! not restored after a restart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who owns a producer registration, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProducerOwner {
    /// A configured plugin, named as in the config.
    Plugin { plugin: String },
    /// A delegated child session that reports back to this session's run.
    Delegation {
        /// The delegated child session.
        child_session_id: String,
        /// The delegation tool call of this session that started the child.
        tool_call_id: String,
    },
    /// The continuation reminders of a goal.
    Goal { goal_id: String },
    /// Engine-authored lifecycle steering of a goal (pause, resume, cancel notices).
    GoalControl { goal_id: String },
}

/// How a producer message enters the session (`plugin/producer/send`'s `mode`, `producer_message_accepted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProducerMessageMode {
    /// Enters an active run at its next boundary, like `run.steer`; wakes an idle session into a run.
    Steer,
    /// Waits for the active run to end, then starts the next run; wakes an idle session into a run.
    Queue,
}

/// One runtime producer registration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProducerRegistration {
    pub producer_id: String,
    pub owner: ProducerOwner,
    pub session_id: String,
    /// Milliseconds since the registration.
    pub age_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PluginRecoveryStatus {
    /// Recovery was started and the plugin has not completed it yet.
    Starting,
    /// The plugin completed recovery.
    Ready,
    /// The plugin reported a failed recovery, or exited during it.
    Failed,
    /// The plugin is disabled in the config.
    Disabled,
}

/// Where one plugin's recovery handshake stands for this session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PluginRecoveryState {
    pub plugin: String,
    pub status: PluginRecoveryStatus,
}

/// `session.producers` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionProducersResult {
    pub producers: Vec<ProducerRegistration>,
    /// One entry per configured plugin.
    pub plugin_recovery: Vec<PluginRecoveryState>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owners_are_tagged_by_type() {
        assert_eq!(
            serde_json::to_value(ProducerOwner::Plugin { plugin: "notify".into() }).unwrap(),
            json!({"type": "plugin", "plugin": "notify"})
        );
        let owner: ProducerOwner = serde_json::from_value(json!({"type": "goal_control", "goal_id": "g"})).unwrap();
        assert_eq!(owner, ProducerOwner::GoalControl { goal_id: "g".into() });
    }
}
