//! `troupe approvals [SESSION]`: the approvals waiting for an answer, with what `troupe approve` needs to give it.
//!
//! Approvals belong to a root session's tree (`approval.list` takes the root). With a session, its tree is
//! listed (a delegated child names its root); without, every root session with an active run, since an approval
//! only waits while a run of its tree does: idle sessions are not asked, which keeps the call cheap with many
//! sessions.

use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::approval::{ApprovalListParams, ApprovalRecord, ApprovalStatus};
use troupe_protocol::types::common::{SessionIdParams, SessionOrigin, SessionStatus};
use troupe_protocol::types::session::SessionListParams;

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::inspect_cmd::{first_line, header_table};
use crate::output::{pretty_json, text};
use crate::session_ref::resolve_session_id;
use crate::style::{Style, clean, id_prefix, relative_time, unique_prefix_len};

/// `troupe approvals [SESSION]`.
pub async fn approvals(connection: &Connection, given: Option<&str>, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    // Every root session: the SESSION column's prefixes must be unique among them, since `troupe approve` takes one.
    let sessions = client.session_list(SessionListParams::default()).await.map_err(explained)?.sessions;
    let roots = match given {
        Some(given) => {
            let session_id = resolve_session_id(&client, given).await?;
            let session = client.session_get(SessionIdParams { session_id }).await.map_err(explained)?.session;
            match session.origin {
                SessionOrigin::Root => vec![session.session_id],
                SessionOrigin::Delegated { root_session_id, .. } => vec![root_session_id],
            }
        }
        None => sessions
            .iter()
            .filter(|session| session.status == SessionStatus::Running)
            .map(|session| session.session_id.clone())
            .collect(),
    };
    let mut pending = Vec::new();
    for root_session_id in roots {
        let listed =
            client.approval_list(ApprovalListParams { root_session_id, status: Some(ApprovalStatus::Pending) }).await;
        match listed {
            Ok(listed) => pending.extend(listed.approvals),
            // A session that vanished between the listing and this call has nothing pending.
            Err(error) if given.is_none() && is_gone(&error) => {}
            Err(error) => return Err(explained(error)),
        }
    }
    client.close().await;
    if json {
        // Pending approvals, oldest first per tree, as `approval.list` gives them.
        return pretty_json(&serde_json::json!({ "approvals": pending }));
    }
    let known: Vec<&str> = sessions.iter().map(|session| session.session_id.as_str()).collect();
    text(&render_approvals(&pending, given.is_some(), &known, Style::stdout()));
    Ok(())
}

fn is_gone(error: &troupe_protocol::client::ClientError) -> bool {
    matches!(error, troupe_protocol::client::ClientError::Rpc(rpc) if rpc.typed_code() == Some("session_not_found"))
}

/// The pending approvals as a table and, under it, the command that answers each. The SESSION column's prefixes are
/// unique among the pending approvals' sessions and `known` (the root sessions, which `troupe approve` resolves a
/// prefix against).
pub fn render_approvals(pending: &[ApprovalRecord], one_tree: bool, known: &[&str], style: Style) -> String {
    if pending.is_empty() {
        return if one_tree {
            "no approvals pending in this session's tree\n".to_owned()
        } else {
            "no approvals pending\n".to_owned()
        };
    }
    // The sessions of one tree are created within moments of each other: their ids share a long prefix.
    let id_len =
        unique_prefix_len(pending.iter().map(|record| record.session_id.as_str()).chain(known.iter().copied()));
    let mut rows = vec![["APPROVAL", "SESSION", "TOOL", "ACTION", "ASKED", "WHAT"].map(str::to_owned).to_vec()];
    for record in pending {
        rows.push(vec![
            record.approval_id.clone(),
            id_prefix(&record.session_id, id_len).to_owned(),
            clean(&record.operation.tool),
            action_name(record.operation.action).to_owned(),
            relative_time(&record.created_at),
            first_line(&record.operation.summary, 80),
        ]);
    }
    let mut text = header_table(&rows, style);
    for record in pending {
        let resource = first_line(&record.operation.resource, 100);
        text.push_str(&style.dim(&format!(
            "{}: {} on {resource}",
            record.approval_id,
            action_name(record.operation.action)
        )));
        text.push('\n');
        let (session, approval) = (&record.session_id, &record.approval_id);
        let mut answers = format!("  answer: `troupe approve {session} {approval}`");
        if record.constraints.allow_tree_grant {
            answers.push_str(" (add --tree for the whole session tree)");
        }
        answers.push_str(", or --reject --feedback TEXT");
        text.push_str(&answers);
        text.push('\n');
    }
    text
}

fn action_name(action: troupe_protocol::types::approval::PermissionAction) -> &'static str {
    use troupe_protocol::types::approval::PermissionAction;
    match action {
        PermissionAction::Read => "read",
        PermissionAction::Write => "write",
        PermissionAction::Execute => "execute",
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::approval::{ApprovalConstraints, ApprovalOperation, PermissionAction};

    use super::*;

    #[test]
    fn each_pending_approval_names_the_command_that_answers_it() {
        let record = ApprovalRecord {
            session_id: "0123456789abcdef".into(),
            run_id: "r".into(),
            tool_call_id: "t".into(),
            approval_id: "ap-1".into(),
            revision: 1,
            status: ApprovalStatus::Pending,
            operation: ApprovalOperation {
                tool: "shell".into(),
                action: PermissionAction::Execute,
                resource: "rm -rf \u{1b}[2Jbuild".into(),
                summary: "Run rm".into(),
            },
            operation_fingerprint: "f".into(),
            constraints: ApprovalConstraints {
                allow_once: true,
                allow_tree_grant: true,
                cancellable: true,
                expires_at: None,
            },
            decision: None,
            feedback: None,
            answered_by: None,
            created_at: "not a time".into(),
            decided_at: None,
        };
        let text = render_approvals(std::slice::from_ref(&record), false, &[], Style::plain());
        assert!(text.contains("ap-1      01234567  shell  execute  not a time  Run rm"), "{text}");
        assert!(text.contains("execute on rm -rf build"), "{text}");
        assert!(text.contains("`troupe approve 0123456789abcdef ap-1` (add --tree"), "{text}");
        assert_eq!(render_approvals(&[], false, &[], Style::plain()), "no approvals pending\n");

        // A child session created moments after its root shares its first 8 characters: the column tells them
        // apart.
        let child = ApprovalRecord { session_id: "0123456799abcdef".into(), approval_id: "ap-2".into(), ..record };
        let record = ApprovalRecord { session_id: "0123456789abcdef".into(), ..child.clone() };
        let record_copy = record.clone();
        let text = render_approvals(&[record, child], false, &[], Style::plain());
        assert!(text.contains(" 012345678 ") && text.contains(" 012345679 "), "{text}");

        // Another root session created in the same minute: the prefix `troupe approve` is given must not match it.
        let alone = ApprovalRecord { session_id: "0123456789abcdef".into(), ..record_copy };
        let text = render_approvals(&[alone], false, &["0123456789abcdef", "0123456780ffffff"], Style::plain());
        assert!(text.contains(" 0123456789 "), "{text}");
    }
}
