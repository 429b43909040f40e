//! Who produced an event: the vocabulary of a stored event's `origin`.
//!
//! On the wire `origin` is a word: `user`, `engine:<what>` for events the engine writes on its own account
//! (`engine:goal` for a goal's automatic run, `engine:tool-result` for a tool's result, ...), or
//! `plugin:<name>` for a plugin's events and messages. [`Origin`] is that vocabulary as a type: the daemon writes
//! origins from it, clients read them with [`StoredEvent::origin_of`](super::events::StoredEvent::origin_of), and
//! the schema exports it (`origins`). A daemon newer than a client may write a word the client does not know; it
//! reads as [`Origin::Other`], never as an error.

use std::borrow::Cow;
use std::fmt;

use schemars::JsonSchema;

/// Who produced an event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A client, on behalf of its user.
    User,
    /// The engine, on its own account.
    Engine(EngineOrigin),
    /// The plugin of that name (`[plugins.<name>]`).
    Plugin(String),
    /// A word this build does not know (written by a newer daemon).
    Other(String),
}

macro_rules! engine_origins {
    ($($(#[$doc:meta])* $variant:ident = $word:literal,)+) => {
        /// What the engine wrote an event for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum EngineOrigin {
            $($(#[$doc])* $variant,)+
        }

        impl EngineOrigin {
            /// Every engine origin, in declaration order.
            pub const ALL: &'static [EngineOrigin] = &[$(EngineOrigin::$variant,)+];

            /// The word on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(EngineOrigin::$variant => $word,)+
                }
            }
        }
    };
}

engine_origins! {
    /// `approval_requested`: an approval the engine asks a user for.
    Approval = "engine:approval",
    /// A manual compaction's events.
    Compaction = "engine:compaction",
    /// A delegation: a child session's creation and its run's start, a delegation closed by the engine.
    Delegate = "engine:delegate",
    /// A goal's automatic run and the goal changes the engine decides.
    Goal = "engine:goal",
    /// Producer messages taken up by the session, and the runs they wake.
    Producer = "engine:producer",
    /// An automatic title.
    Title = "engine:title",
    /// A goal checklist the model's `goal_update` tool changed.
    GoalUpdateTool = "engine:tool-goal_update",
    /// A tool call's terminal result.
    ToolResult = "engine:tool-result",
}

impl Origin {
    /// The engine's origins by name, for the places that write them.
    pub const APPROVAL: Origin = Origin::Engine(EngineOrigin::Approval);
    pub const COMPACTION: Origin = Origin::Engine(EngineOrigin::Compaction);
    pub const DELEGATE: Origin = Origin::Engine(EngineOrigin::Delegate);
    pub const GOAL: Origin = Origin::Engine(EngineOrigin::Goal);
    pub const PRODUCER: Origin = Origin::Engine(EngineOrigin::Producer);
    pub const TITLE: Origin = Origin::Engine(EngineOrigin::Title);
    pub const TOOL_RESULT: Origin = Origin::Engine(EngineOrigin::ToolResult);
    pub const GOAL_UPDATE_TOOL: Origin = Origin::Engine(EngineOrigin::GoalUpdateTool);
}

const USER: &str = "user";
const PLUGIN_PREFIX: &str = "plugin:";

impl Origin {
    /// The origin a wire word names; an unknown word is [`Origin::Other`].
    pub fn parse(word: &str) -> Origin {
        if word == USER {
            return Origin::User;
        }
        if let Some(engine) = EngineOrigin::ALL.iter().find(|engine| engine.as_str() == word) {
            return Origin::Engine(*engine);
        }
        match word.strip_prefix(PLUGIN_PREFIX) {
            Some(plugin) if !plugin.is_empty() => Origin::Plugin(plugin.to_owned()),
            _ => Origin::Other(word.to_owned()),
        }
    }

    /// The origin of a plugin's events.
    pub fn plugin(name: &str) -> Origin {
        Origin::Plugin(name.to_owned())
    }

    /// The word on the wire.
    pub fn word(&self) -> Cow<'static, str> {
        match self {
            Origin::User => Cow::Borrowed(USER),
            Origin::Engine(engine) => Cow::Borrowed(engine.as_str()),
            Origin::Plugin(plugin) => Cow::Owned(format!("{PLUGIN_PREFIX}{plugin}")),
            Origin::Other(word) => Cow::Owned(word.clone()),
        }
    }
}

impl From<EngineOrigin> for Origin {
    fn from(engine: EngineOrigin) -> Self {
        Origin::Engine(engine)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.word())
    }
}

/// The schema of an `origin` word: `user`, one of the engine's words, or `plugin:<name>`.
impl JsonSchema for Origin {
    fn schema_name() -> Cow<'static, str> {
        "Origin".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let engine: Vec<&str> = EngineOrigin::ALL.iter().map(|engine| engine.as_str()).collect();
        schemars::json_schema!({
            "description": "Who produced an event: `user`, the engine (`engine:<what>`), or a plugin \
                            (`plugin:<name>`). A client must accept words it does not know.",
            "anyOf": [
                {"const": USER},
                {"enum": engine},
                {"type": "string", "pattern": "^plugin:[A-Za-z0-9_-]+$"}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_reads_back_as_its_origin() {
        let mut origins = vec![Origin::User, Origin::plugin("watch")];
        origins.extend(EngineOrigin::ALL.iter().map(|engine| Origin::Engine(*engine)));
        for origin in origins {
            assert_eq!(Origin::parse(&origin.word()), origin, "{origin}");
        }
    }

    #[test]
    fn an_unknown_word_is_kept_not_refused() {
        assert_eq!(Origin::parse("engine:something-new"), Origin::Other("engine:something-new".into()));
        assert_eq!(Origin::parse("plugin:"), Origin::Other("plugin:".into()));
        assert_eq!(Origin::parse("client:x").word(), "client:x");
    }
}
