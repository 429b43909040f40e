//! The refusals of `session.undo` and `session.diff` (troupe extensions), from the runtime's
//! `troupe_runtime::changes::undo::UndoError`, in a form that can be cloned and sent to a client.

use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::changes::UndoConflict;

/// Why an undo or a diff was refused: `nothing_to_undo`, `run_changed_no_files`, or `undo_conflict` with the
/// refused `files`. Nothing was changed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{detail}")]
pub struct ChangesRefusal {
    pub session_id: String,
    pub code: ErrorCode,
    pub run_id: Option<String>,
    pub files: Vec<UndoConflict>,
    pub detail: String,
}
