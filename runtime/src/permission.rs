//! Permission decisions for tool calls, before approvals exist.
//!
//! Every tool call maps to an action (read, write, execute) and a resource. Reads inside the session's cwd are
//! always allowed. Everything else is a question for the user, and until the approval flow exists nobody can be
//! asked: so the tree's permission mode decides alone. `yolo` and `auto_approve_y` approve, and every other mode
//! denies with a tool result that says why and how to allow it. Nothing that would need a user's answer is ever
//! silently allowed.

use troupe_protocol::types::approval::PermissionAction;
use troupe_protocol::types::session::PermissionMode;

use crate::tools::PermissionRequest;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny { reason: String },
}

/// Decides a tool call with no user to ask.
pub fn decide_without_approvals(mode: PermissionMode, request: &PermissionRequest) -> Decision {
    if request.action == PermissionAction::Read && request.inside_cwd {
        return Decision::Allow;
    }
    let what = describe(request);
    match mode {
        PermissionMode::Yolo | PermissionMode::AutoApproveY => Decision::Allow,
        PermissionMode::AutoApproveN => Decision::Deny {
            reason: format!(
                "permission denied: {what} needs approval, and the permission mode auto_approve_n rejects it"
            ),
        },
        PermissionMode::Ask | PermissionMode::AutoApprove => Decision::Deny {
            reason: format!(
                "permission denied: {what} needs a user's approval, and this daemon cannot ask for approvals yet; \
                 a user can allow such calls with `session.set_permission_mode` `yolo`"
            ),
        },
    }
}

fn describe(request: &PermissionRequest) -> String {
    let action = match request.action {
        PermissionAction::Read => "reading",
        PermissionAction::Write => "writing",
        PermissionAction::Execute => "running",
    };
    let place = if request.inside_cwd { "" } else { " (outside the session's directory)" };
    format!("{action} `{}`{place}", request.resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(action: PermissionAction, inside_cwd: bool) -> PermissionRequest {
        PermissionRequest { action, resource: "/work/x".into(), summary: "x".into(), inside_cwd }
    }

    #[test]
    fn reads_inside_the_cwd_are_always_allowed() {
        for mode in [PermissionMode::Ask, PermissionMode::AutoApproveN, PermissionMode::AutoApprove] {
            assert_eq!(decide_without_approvals(mode, &request(PermissionAction::Read, true)), Decision::Allow);
        }
    }

    #[test]
    fn everything_else_follows_the_mode_and_is_never_silently_allowed() {
        let write = request(PermissionAction::Write, true);
        assert_eq!(decide_without_approvals(PermissionMode::Yolo, &write), Decision::Allow);
        assert_eq!(decide_without_approvals(PermissionMode::AutoApproveY, &write), Decision::Allow);
        for mode in [PermissionMode::Ask, PermissionMode::AutoApprove, PermissionMode::AutoApproveN] {
            assert!(matches!(decide_without_approvals(mode, &write), Decision::Deny { .. }), "{mode:?}");
        }
        let outside_read = request(PermissionAction::Read, false);
        let Decision::Deny { reason } = decide_without_approvals(PermissionMode::Ask, &outside_read) else {
            panic!("outside reads ask")
        };
        assert!(reason.contains("outside the session's directory"), "{reason}");
    }
}
