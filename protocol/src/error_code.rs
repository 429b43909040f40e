//! The typed error codes: the `data.code` of an error object, one word for each way the daemon refuses a request.
//!
//! They are the vocabulary clients branch on (`docs/protocol.md`, "Error codes", lists each with when it happens),
//! so they are one enum, not strings scattered over the handlers: the daemon builds errors from a variant, the
//! schema exports the enum, and clients (troupe's CLI among them) match on it. A daemon newer than a client may send
//! a code the client does not know; [`RpcError::error_code`](crate::error::RpcError::error_code) then answers
//! `None` and the client falls back to the JSON-RPC `code` and `detail`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident = $word:literal,)+) => {
        /// The `data.code` of a typed error (`snake_case` on the wire).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The word on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $word,)+
                }
            }

            /// The code of a wire word; `None` for a word this build does not know.
            pub fn from_word(word: &str) -> Option<ErrorCode> {
                match word {
                    $($word => Some(ErrorCode::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    // Sessions.
    /// No session has this id (or it was deleted).
    SessionNotFound = "session_not_found",
    /// Another cluster node hosts the session and this node could not reach it for a write (`data.node` names it
    /// when known); the session can still be read here.
    SessionHostedElsewhere = "session_hosted_elsewhere",
    /// The cluster's NATS cannot be reached, so nothing can be written; nothing was stored.
    ClusterUnavailable = "cluster_unavailable",
    /// The session has an active run (or compaction) and the operation needs it idle.
    SessionBusy = "session_busy",
    /// The session's log has no readable first event; it cannot take new events.
    SessionDamaged = "session_damaged",
    /// The operation is for root sessions and this one is delegated.
    NotRootSession = "not_root_session",
    /// A title that is empty after normalisation or too long.
    InvalidTitle = "invalid_title",
    /// A `cwd` that is not an absolute path to a directory the daemon can use.
    InvalidCwd = "invalid_cwd",
    /// The session's recorded folder no longer resolves to itself (replaced by a symbolic link, or not a folder).
    SessionCwdUnusable = "session_cwd_unusable",
    /// An `events.subscribe` cursor past the session's last event.
    CursorAhead = "cursor_ahead",
    /// A `through_seq` outside the session's events.
    SeqOutOfRange = "seq_out_of_range",
    /// A fork prefix whose visible part holds no user message.
    NoUserMessageInPrefix = "no_user_message_in_prefix",
    /// A session's revision moved on since the client read it.
    RevisionConflict = "revision_conflict",
    /// A client was watching too many sessions' presence.
    TooManyPresenceWatches = "too_many_presence_watches",

    // Runs.
    /// No session started a run with this id.
    RunNotFound = "run_not_found",
    /// The run has ended (or was never active here).
    RunNotActive = "run_not_active",
    /// Input larger than `[limits] max_input_bytes`.
    InputTooLarge = "input_too_large",
    /// Input that is empty or otherwise unusable.
    InvalidInput = "invalid_input",
    /// An attached file that is not an accepted type, not what its `mime_type` says, or past the bounds on
    /// attachments (`data.index` names it; `data.limit` gives a passed bound).
    InvalidAttachment = "invalid_attachment",
    /// The session's log names no stored attachment at this path (never stored, named only by other sessions, or
    /// removed from the data directory).
    AttachmentNotFound = "attachment_not_found",
    /// A `session.files` or `session.file` path that is outside the session's folder, denied, missing, or not a
    /// folder (or a file) as asked.
    CwdPathUnusable = "cwd_path_unusable",
    /// No tool call of the session has this id (or its output is no longer kept).
    ToolCallNotFound = "tool_call_not_found",

    // Tool output.
    /// A named output subscription's id that is empty, too long or holds control characters.
    InvalidSubscriptionId = "invalid_subscription_id",
    /// A connection holds as many named output subscriptions as it may.
    TooManySubscriptions = "too_many_subscriptions",
    /// An `output_ref` that is not one this daemon hands out.
    InvalidOutputRef = "invalid_output_ref",
    /// No stored output of the session has this reference (never stored, or removed with its session).
    OutputRefNotFound = "output_ref_not_found",
    /// More unread stdin for a tool call than the daemon keeps.
    ToolStdinBacklogFull = "tool_stdin_backlog_full",
    /// The agent named in a selection does not exist.
    AgentNotFound = "agent_not_found",
    /// The model (or its provider) named in a selection does not exist.
    ModelNotFound = "model_not_found",
    /// A selection that is not `provider/model` or is otherwise malformed.
    InvalidSelection = "invalid_selection",

    // Idempotency and clients.
    /// An idempotency key reused with a different request.
    IdempotencyConflict = "idempotency_conflict",
    /// An idempotency key that is empty, too long or holds control characters.
    InvalidIdempotencyKey = "invalid_idempotency_key",
    /// A handshake's `protocol_version` this daemon does not speak.
    UnsupportedProtocolVersion = "unsupported_protocol_version",
    /// A handshake's `client_info` that is malformed or too large.
    InvalidClientInfo = "invalid_client_info",

    // Goals.
    /// The session has an open goal already.
    GoalAlreadyActive = "goal_already_active",
    /// The session has no goal.
    GoalNotFound = "goal_not_found",
    /// The request names another goal than the session's.
    GoalIdMismatch = "goal_id_mismatch",
    /// The goal's revision moved on since the client read it.
    GoalRevisionConflict = "goal_revision_conflict",
    /// The goal has ended (completed or cancelled).
    GoalTerminal = "goal_terminal",
    /// The lifecycle change does not apply to the goal's status.
    GoalInvalidTransition = "goal_invalid_transition",
    /// A selection the goal may not use.
    GoalSelectionNotAllowed = "goal_selection_not_allowed",
    /// A checklist over the daemon's bound.
    GoalChecklistTooLarge = "goal_checklist_too_large",
    /// A goal objective that is empty or too long.
    InvalidObjective = "invalid_objective",

    // Approvals.
    /// No approval has this id in the session.
    ApprovalNotFound = "approval_not_found",
    /// The approval was answered or cancelled already.
    ApprovalNotPending = "approval_not_pending",
    /// The approval's revision moved on since the client read it.
    ApprovalRevisionConflict = "approval_revision_conflict",
    /// The answer's operation fingerprint is not the approval's.
    OperationFingerprintMismatch = "operation_fingerprint_mismatch",
    /// A decision the approval does not allow.
    DecisionNotAllowed = "decision_not_allowed",

    // Changes (troupe extension).
    /// `session.undo` found nothing to take back: no run of the session changed files, or its changes were undone
    /// already.
    NothingToUndo = "nothing_to_undo",
    /// `session.undo` refused files changed since the run, or whose earlier content was not recorded
    /// (`data.files` lists them); nothing was changed. `force` overrides.
    UndoConflict = "undo_conflict",
    /// `session.diff` or `session.undo` named a run of the session that changed no files.
    RunChangedNoFiles = "run_changed_no_files",

    // Producers.
    /// No producer is registered under this name for the session.
    ProducerNotFound = "producer_not_found",
    /// No pending producer message has this id.
    ProducerMessageNotFound = "producer_message_not_found",
    /// The session holds as many pending producer messages (or bytes) as it may.
    ProducerBacklogFull = "producer_backlog_full",
    /// A producer message that is empty, too large or malformed.
    InvalidProducerMessage = "invalid_producer_message",
    /// The daemon holds as many producers as it may.
    TooManyProducers = "too_many_producers",

    // Providers and skills.
    /// No provider has this id.
    ProviderNotFound = "provider_not_found",
    /// The provider could not be reached to check the connection.
    ProviderUnreachable = "provider_unreachable",
    /// Provider settings that are incomplete or malformed.
    InvalidProviderSetup = "invalid_provider_setup",
    /// No skill has this name.
    SkillNotFound = "skill_not_found",
    /// The session's agent may not use this skill.
    SkillNotAllowed = "skill_not_allowed",

    // The plugin extension protocol (errors a plugin receives).
    /// An emitted event's name that is empty or too long.
    InvalidName = "invalid_name",
    /// An emitted event's payload over the extension's bound.
    PayloadTooLarge = "payload_too_large",
    /// A plugin emitting more events or bytes than the extension allows per interval.
    RateLimited = "rate_limited",

    // The daemon.
    /// The daemon is stopping.
    ShuttingDown = "shutting_down",
    /// A method of the protocol this daemon routes but does not implement.
    NotImplemented = "not_implemented",
    /// The web console is turned off (`[console] enabled = false`).
    ConsoleDisabled = "console_disabled",
    /// A console sign-in code was asked for by a client that did not authenticate with the token.
    ConsoleLoginCodeNeedsToken = "console_login_code_needs_token",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_its_serde_word_and_parses_back() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()), "{code:?}");
            assert_eq!(ErrorCode::from_word(code.as_str()), Some(*code));
        }
        assert_eq!(ErrorCode::from_word("something_new"), None);
    }
}
