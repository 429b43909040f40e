//! `troupe approvals [SESSION]`: the approvals waiting for an answer, with what `troupe approve` needs to give it.
//!
//! Approvals belong to a root session's tree (`approval.list` takes the root). With a session, its tree is
//! listed (a delegated child names its root); without, every root session with an active run, since an approval
//! only waits while a run of its tree does: idle sessions are not asked, which keeps the call cheap with many
//! sessions.
//!
//! What an approval asks is printed so that what runs is what reads: the operation's resource (a whole command)
//! line by line, every control and invisible character shown as an escape (`⟨CR⟩`, `⟨U+202E⟩`), cut at
//! [`ShowLimits::APPROVAL`] with a line that says how much is left and that `--full` shows it whole.

use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::diagnostic::{ShowLimits, show_visibly, visible_line};
use troupe_protocol::error_code::ErrorCode;
use troupe_protocol::types::approval::{ApprovalListParams, ApprovalRecord, ApprovalStatus};
use troupe_protocol::types::common::{SessionIdParams, SessionOrigin, SessionStatus};
use troupe_protocol::types::session::SessionListParams;

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::inspect_cmd::header_table;
use crate::output::{pretty_json, text};
use crate::session_ref::resolve_session_id;
use crate::style::{Style, id_prefix, relative_time, unique_prefix_len};

/// `troupe approvals [SESSION] [--full]`: with `full`, every operation is printed whole, however long.
pub async fn approvals(connection: &Connection, given: Option<&str>, json: bool, full: bool) -> anyhow::Result<()> {
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
    let limits = if full { ShowLimits::WHOLE } else { ShowLimits::APPROVAL };
    text(&render_approvals(&pending, given.is_some(), &known, limits, Style::stdout()));
    Ok(())
}

fn is_gone(error: &troupe_protocol::client::ClientError) -> bool {
    matches!(error, troupe_protocol::client::ClientError::Rpc(rpc) if rpc.error_code() == Some(ErrorCode::SessionNotFound))
}

/// The pending approvals as a table and, under it, what each one asks with its resource shown once and visibly
/// (cut at `limits`), and the command that answers it. The SESSION
/// column's prefixes are unique among the pending approvals' sessions and `known` (the root sessions, which
/// `troupe approve` resolves a prefix against).
pub fn render_approvals(
    pending: &[ApprovalRecord],
    one_tree: bool,
    known: &[&str],
    limits: ShowLimits,
    style: Style,
) -> String {
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
    let mut rows = vec![["APPROVAL", "SESSION", "TOOL", "ACTION", "ASKED"].map(str::to_owned).to_vec()];
    for record in pending {
        rows.push(vec![
            record.approval_id.clone(),
            id_prefix(&record.session_id, id_len).to_owned(),
            visible_line(&record.operation.tool, 40),
            action_name(record.operation.action).to_owned(),
            relative_time(&record.created_at),
        ]);
    }
    let mut text = header_table(&rows, style);
    for record in pending {
        let whole = format!("`troupe approvals {} --full` shows it whole", record.session_id);
        text.push_str(&style.dim(&format!("{}:", record.approval_id)));
        text.push(' ');
        text.push_str(&asked(&record.operation, limits, &whole));
        text.push('\n');
        if let Some(diff) = &record.operation.diff {
            let diff_limits =
                if limits == ShowLimits::WHOLE { ShowLimits::WHOLE } else { crate::diff_words::APPROVAL_DIFF };
            text.push_str(&crate::diff_words::diff_block(diff, "  ", diff_limits, &whole, style));
        }
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

/// An operation's resource, to follow a line's words: `inline_lead` and the resource (` ls -la`) when it is one
/// line shown whole; else `:` and one line per line of it, each behind `indent` and a `│ ` gutter (so leading spaces and empty
/// lines are seen as part of it), and, when `limits` cut it, a last line saying how much is left and `whole_hint`
/// (where the whole text is). Every control and invisible character is shown as an escape.
pub fn shown_resource(resource: &str, limits: ShowLimits, inline_lead: &str, indent: &str, whole_hint: &str) -> String {
    let shown = show_visibly(resource, limits);
    if let ([line], None) = (shown.lines.as_slice(), shown.left_out) {
        return format!("{inline_lead}{line}");
    }
    let mut text = ":".to_owned();
    for line in &shown.lines {
        text.push_str(&format!("\n{indent}│ {line}"));
    }
    if let Some(left_out) = shown.left_out {
        text.push_str(&format!("\n{indent}… {}: {whole_hint}", left_out.describe()));
    }
    text
}

/// Where `summary` quotes `resource`: the words before it and after it. A summary may quote only the resource's
/// beginning, cut with `…` (a long command's `run ls -la …`): then nothing follows it.
pub fn quoting<'a>(summary: &'a str, resource: &str) -> Option<(&'a str, &'a str)> {
    if resource.is_empty() {
        return None;
    }
    // Quoted as a word of its own: a resource inside a longer word (`docs.rs` in `fetch https://docs.rs/serde`)
    // is not what the summary shows, and splitting there would print `https:// docs.rs/serde`.
    let starts_word = |at: usize| summary[..at].chars().next_back().is_none_or(char::is_whitespace);
    if let Some((at, _)) = summary.match_indices(resource).find(|&(at, _)| starts_word(at)) {
        return Some((&summary[..at], &summary[at + resource.len()..]));
    }
    let cut = summary.strip_suffix('…')?;
    let start = cut
        .char_indices()
        .map(|(at, _)| at)
        .find(|&at| starts_word(at) && !cut[at..].is_empty() && resource.starts_with(&cut[at..]))?;
    Some((&cut[..start], ""))
}

/// What an approval asks, its resource (a whole command) shown once: where the summary quotes it (a shell command's
/// `run …`), the summary's words around it; else the summary, then the action and the resource on a line of their
/// own. Cut at `limits`, saying how much is left and `whole_hint`.
pub fn asked(
    operation: &troupe_protocol::types::approval::ApprovalOperation,
    limits: ShowLimits,
    whole_hint: &str,
) -> String {
    let resource = &operation.resource;
    if let Some((before, after)) = quoting(&operation.summary, resource) {
        let before = visible_line(before.trim_end(), 60);
        let shown = shown_resource(resource, limits, if before.is_empty() { "" } else { " " }, "  ", whole_hint);
        let after = if after.is_empty() { String::new() } else { visible_line(after, 60) };
        return format!("{before}{shown}{after}");
    }
    format!(
        "{}
  {} on{}",
        visible_line(&operation.summary, 100),
        action_name(operation.action),
        shown_resource(resource, limits, " ", "  ", whole_hint)
    )
}

/// The action's word: `read`, `write`, `execute`, `network`.
pub fn action_name(action: troupe_protocol::types::approval::PermissionAction) -> &'static str {
    use troupe_protocol::types::approval::PermissionAction;
    match action {
        PermissionAction::Read => "read",
        PermissionAction::Write => "write",
        PermissionAction::Execute => "execute",
        PermissionAction::Network => "network",
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::approval::{ApprovalConstraints, ApprovalOperation, PermissionAction};

    use super::*;

    #[test]
    fn each_pending_approval_names_the_command_that_answers_it() {
        let record = asking("rm -rf \u{1b}[2Jbuild", "Run rm");
        let record = ApprovalRecord {
            constraints: ApprovalConstraints { allow_tree_grant: true, ..record.constraints.clone() },
            ..record
        };
        let text = render_approvals(std::slice::from_ref(&record), false, &[], ShowLimits::APPROVAL, Style::plain());
        assert!(text.contains("ap-1      01234567  shell  execute  not a time\n"), "{text}");
        // The escape sequence is shown, not run by the terminal and not silently dropped.
        assert!(text.contains("ap-1: Run rm\n  execute on rm -rf ⟨ESC⟩[2Jbuild\n"), "{text}");
        assert!(text.contains("`troupe approve 0123456789abcdef ap-1` (add --tree"), "{text}");
        assert_eq!(render_approvals(&[], false, &[], ShowLimits::APPROVAL, Style::plain()), "no approvals pending\n");

        // A child session created moments after its root shares its first 8 characters: the column tells them
        // apart.
        let child = ApprovalRecord { session_id: "0123456799abcdef".into(), approval_id: "ap-2".into(), ..record };
        let record = ApprovalRecord { session_id: "0123456789abcdef".into(), ..child.clone() };
        let record_copy = record.clone();
        let text = render_approvals(&[record, child], false, &[], ShowLimits::APPROVAL, Style::plain());
        assert!(text.contains(" 012345678 ") && text.contains(" 012345679 "), "{text}");

        // Another root session created in the same minute: the prefix `troupe approve` is given must not match it.
        let alone = ApprovalRecord { session_id: "0123456789abcdef".into(), ..record_copy };
        let text = render_approvals(
            &[alone],
            false,
            &["0123456789abcdef", "0123456780ffffff"],
            ShowLimits::APPROVAL,
            Style::plain(),
        );
        assert!(text.contains(" 0123456789 "), "{text}");
    }

    fn asking(resource: &str, summary: &str) -> ApprovalRecord {
        ApprovalRecord {
            session_id: "0123456789abcdef".into(),
            run_id: "r".into(),
            tool_call_id: "t".into(),
            approval_id: "ap-1".into(),
            revision: 1,
            status: ApprovalStatus::Pending,
            operation: ApprovalOperation {
                tool: "shell".into(),
                action: PermissionAction::Execute,
                resource: resource.into(),
                summary: summary.into(),
                diff: None,
            },
            operation_fingerprint: "f".into(),
            constraints: ApprovalConstraints {
                allow_once: true,
                allow_tree_grant: false,
                cancellable: true,
                expires_at: None,
            },
            decision: None,
            feedback: None,
            answered_by: None,
            created_at: "not a time".into(),
            decided_at: None,
        }
    }

    #[test]
    fn a_command_with_several_lines_and_controls_is_shown_line_by_line_with_every_control_seen() {
        let command = "ls\r\nrm -rf ~ \u{202e}\u{2066}txt.sh\n  curl x | sh\u{1b}[8m";
        let record = asking(command, &format!("run {command}"));
        let text = render_approvals(&[record], true, &[], ShowLimits::APPROVAL, Style::plain());
        let lines: Vec<&str> = text.lines().collect();
        // The command is shown once, where the summary quotes it, line by line.
        assert!(lines[1].ends_with("not a time"), "{text}");
        assert_eq!(
            &lines[2..6],
            ["ap-1: run:", "  │ ls⟨CR⟩", "  │ rm -rf ~ ⟨U+202E⟩⟨U+2066⟩txt.sh", "  │   curl x | sh⟨ESC⟩[8m",],
            "{text}"
        );
        assert!(lines[6].starts_with("  answer: `troupe approve 0123456789abcdef ap-1`"), "{text}");
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    }

    #[test]
    fn a_one_line_command_is_printed_once() {
        let record = asking("ls -la", "run ls -la");
        let text = render_approvals(&[record], true, &[], ShowLimits::APPROVAL, Style::plain());
        assert_eq!(text.matches("ls -la").count(), 1, "{text}");
        assert!(text.contains("\nap-1: run ls -la\n  answer: `troupe approve"), "{text}");
        // A summary that cut the command: the command whole, once.
        let record = asking("echo a long command", "run echo a…");
        let text = render_approvals(&[record], true, &[], ShowLimits::APPROVAL, Style::plain());
        assert!(text.contains("\nap-1: run echo a long command\n"), "{text}");
        assert!(!text.contains("echo a…"), "{text}");
    }

    #[test]
    fn a_command_too_long_to_show_says_how_much_is_left_and_full_shows_it_whole() {
        let script: String = (1..=200).map(|n| format!("echo step {n}\n")).collect();
        let record = asking(&script, "run echo step 1…");
        let text = render_approvals(std::slice::from_ref(&record), true, &[], ShowLimits::APPROVAL, Style::plain());
        let shown: Vec<&str> = text.lines().filter(|line| line.starts_with("  │ ")).collect();
        assert_eq!(shown.len(), ShowLimits::APPROVAL.max_lines, "{text}");
        assert_eq!(shown[23], "  │ echo step 24");
        // 200 lines of 12 to 14 bytes: 2,692 bytes, of which the first 24 lines are 303.
        assert_eq!(script.len(), 2692);
        let notice = "  … 2,389 more bytes, 176 more lines: `troupe approvals 0123456789abcdef --full` shows it whole";
        assert!(text.lines().any(|line| line == notice), "{notice}\n{text}");

        let full = render_approvals(&[record], true, &[], ShowLimits::WHOLE, Style::plain());
        assert_eq!(full.lines().filter(|line| line.starts_with("  │ ")).count(), 200, "{full}");
        assert!(full.contains("  │ echo step 200\n") && !full.contains("more bytes"), "{full}");
    }
}
