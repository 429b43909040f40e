//! What happens to a call now: the policy's evaluation combined with tree grants and the tree's permission mode.

use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::session::PermissionMode;

use super::{Effect, Evaluation};
use crate::tools::PermissionRequest;

/// What the engine does with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run it without recording an approval.
    Allow { reason: String },
    /// Refuse it: the model gets a `denied` result carrying `reason`.
    Deny { reason: String },
    /// Record a pending approval and wait for the user; `reason` says why it needs one.
    AskUser { reason: String },
    /// `auto_approve_y`: run it, recording an approval answered by the mode (approved once, no tree grant).
    AllowOnceByMode,
}

/// Combines the policy's `evaluation` of `request`, whether a tree grant covers the call (`granted`: the tree's
/// approval actor holds a grant for the same action on exactly the same resource), the tree's `mode` and the
/// classifier's verdict (`low_risk`, from [`super::is_low_risk`]) into what happens now.
///
/// `deny` and `allow` evaluations are final in every mode; only `ask` consults grants, the classifier and the mode.
/// A write outside the session's cwd (a file tool's: the shell's writes are confined by the kernel) is never
/// approved by a mode or the classifier: it asks the user in every mode but `auto_approve_n`, which refuses it.
/// Only an explicit `allow` rule or a tree grant runs it unasked.
pub fn decide(
    mode: PermissionMode,
    evaluation: &Evaluation,
    request: &PermissionRequest,
    granted: bool,
    low_risk: bool,
) -> Decision {
    match evaluation.effect {
        Effect::Deny => return Decision::Deny { reason: evaluation.reason.clone() },
        Effect::Allow => return Decision::Allow { reason: evaluation.reason.clone() },
        Effect::Ask => {}
    }
    if granted {
        return Decision::Allow { reason: "approved for the whole session tree by an earlier approve_tree".to_owned() };
    }
    if request.action == PermissionAction::Write && !request.inside_cwd {
        return match mode {
            PermissionMode::AutoApproveN => {
                Decision::Deny { reason: format!("rejected by auto_approve_n: {}", evaluation.reason) }
            }
            PermissionMode::Ask | PermissionMode::AutoApprove | PermissionMode::AutoApproveY | PermissionMode::Yolo => {
                Decision::AskUser {
                    reason: format!(
                        "{} (writes outside the session's directory always need approval)",
                        evaluation.reason
                    ),
                }
            }
        };
    }
    let classifier_approves = low_risk
        && matches!(mode, PermissionMode::AutoApprove | PermissionMode::AutoApproveN | PermissionMode::AutoApproveY);
    if classifier_approves {
        return Decision::Allow { reason: "approved as low risk by the auto_approve classifier".to_owned() };
    }
    match mode {
        PermissionMode::Yolo => Decision::Allow { reason: "approved by permission mode yolo".to_owned() },
        PermissionMode::AutoApproveY => Decision::AllowOnceByMode,
        PermissionMode::AutoApproveN => {
            Decision::Deny { reason: format!("rejected by auto_approve_n: {}", evaluation.reason) }
        }
        PermissionMode::Ask | PermissionMode::AutoApprove => Decision::AskUser { reason: evaluation.reason.clone() },
    }
}
