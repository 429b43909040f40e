//! `troupe sandbox explain SESSION_ID`: what a command run in a session may read and write, in words.
//!
//! Built from what the daemon reports (the sandbox in `runtime.snapshot.get`, the session's cwd from
//! `session.get`), so it describes the daemon's machine even when the client runs elsewhere.

use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::runtime::{EnclosingGitDir, SandboxEnforcement, SandboxMode, SandboxStatus};
use troupe_runtime::sandbox::environment::{INHERITED, LOCALE_PREFIX};
use troupe_runtime::sandbox::plan::{READABLE_DEVICES, SHARED_MEMORY, WRITABLE_DEVICES};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};

/// `troupe sandbox explain`: prints the rules, or their JSON with `json`.
pub async fn explain_command(connection: &Connection, session_id: String, json: bool) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = crate::session_ref::resolve_session_id(&client, &session_id).await?;
    let session = client.session_get(SessionIdParams { session_id }).await.map_err(explained)?.session;
    let snapshot = client.runtime_snapshot_get(Empty {}).await.map_err(explained)?.snapshot;
    client.close().await;
    let Some(sandbox) = snapshot.sandbox else {
        anyhow::bail!("this daemon does not report a sandbox (it is older than troupe's sandbox)");
    };
    if json {
        let value = serde_json::json!({ "session_id": session.session_id, "cwd": session.cwd, "sandbox": sandbox });
        crate::outln_clean!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        crate::out_clean!("{}", explain(&sandbox, &session.session_id, &session.cwd));
    }
    Ok(())
}

/// The rules for commands run in a session whose cwd is `cwd`, one per line.
pub fn explain(sandbox: &SandboxStatus, session_id: &str, cwd: &str) -> String {
    let mut text = format!("Session {session_id} in {cwd}\n");
    let enforcement = match (sandbox.enforcement, sandbox.landlock_abi) {
        (SandboxEnforcement::Landlock, Some(abi)) => format!("enforced by the kernel (Landlock ABI {abi})"),
        (SandboxEnforcement::Landlock, None) => "enforced by the kernel (Landlock)".to_owned(),
        (SandboxEnforcement::None, _) => "not enforced".to_owned(),
    };
    text.push_str(&format!("Sandbox mode {}, {enforcement}\n", sandbox.mode.as_str()));
    if let Some(refusal) = &sandbox.tools_refused {
        text.push_str(&format!("Commands are refused: {refusal}\n"));
        text.push_str(&file_tools_line(sandbox));
        return text;
    }
    if sandbox.mode == SandboxMode::Off {
        text.push_str(
            "Commands run with the daemon's full rights: they can read and write everything its user can, \
             including its data directory (token, provider keys, config). Only the permission mode decides \
             what runs.\n",
        );
        text.push_str(&environment_line(sandbox));
        text.push_str(&file_tools_line(sandbox));
        return text;
    }
    let (data_dir, others) = sandbox.denied.split_first().map_or((None, &[][..]), |(first, rest)| (Some(first), rest));
    text.push_str("A command there may\n");
    text.push_str("  read     everything, except:\n");
    if let Some(data_dir) = data_dir {
        text.push_str(&format!(
            "             {data_dir}  (troupe's data directory: token, provider keys, config, logs)\n"
        ));
    }
    for path in others {
        text.push_str(&format!("             {path}\n"));
    }
    text.push_str(&format!("             /dev, but for {}, {SHARED_MEMORY}\n", READABLE_DEVICES.join(", ")));
    text.push_str("           (names in those folders can be listed; their contents cannot be read)\n");
    text.push_str("  write    ");
    let mut writable = Vec::new();
    if sandbox.mode == SandboxMode::WorkspaceWrite {
        writable.push(format!("{cwd}  (the session's directory)"));
        writable.extend(sandbox.writable.iter().cloned());
    }
    writable.push("$TMPDIR  (the run's own temp dir, removed when the run ends)".to_owned());
    // Shared memory is a write root like the cwd: read-only commands only read it.
    if sandbox.mode == SandboxMode::WorkspaceWrite {
        writable.push(format!("{}, {SHARED_MEMORY}", WRITABLE_DEVICES.join(", ")));
    } else {
        writable.push(WRITABLE_DEVICES.join(", "));
    }
    text.push_str(&writable.join("\n           "));
    text.push_str("\n           and nothing inside the paths it may not read\n");
    let network = if sandbox.network { "yes" } else { "no: its own network namespace, with loopback only" };
    text.push_str(&format!("  network  {network}\n"));
    text.push_str(&holder_notes(sandbox, cwd));
    if sandbox.mode == SandboxMode::WorkspaceWrite {
        text.push_str(enclosing_git_dir_line(sandbox.enclosing_git_dir));
    }
    if !sandbox.pid_namespace {
        text.push_str("A process a command detaches (setsid) can outlive it here: no PID namespace is available.\n");
    }
    if sandbox.private_proc {
        text.push_str(
            "Commands see only their own processes in /proc, and outside what they may write they cannot change a \
             file's mode, owner or times (everything else is read-only in their own mount namespace).\n",
        );
    } else if sandbox.mode != SandboxMode::Off {
        text.push_str(
            "Commands see every process of this machine in /proc, with its command line: this system gives them no \
             /proc of their own (see the daemon's log for why). Pass no secret on a command line here. Without \
             their own mount namespace they can also change the mode and times of their account's files outside \
             what they may write.\n",
        );
    }
    text.push_str(
        "Everything a command starts is confined the same way and is killed when the command ends, is cancelled or \
         times out, and with the daemon. Commands have no terminal and cannot reach Unix sockets of services outside \
         the sandbox.\n",
    );
    text.push_str(&environment_line(sandbox));
    text.push_str(&file_tools_line(sandbox));
    text
}

/// One note per folder inside the session's directory that holds a denied path: Landlock grants whole folders, so
/// nothing new can be created, renamed or removed directly in such a folder.
fn holder_notes(sandbox: &SandboxStatus, cwd: &str) -> String {
    let cwd = std::path::Path::new(cwd);
    let mut holders: Vec<(&std::path::Path, Vec<String>)> = Vec::new();
    for denied in sandbox.denied.iter().map(std::path::Path::new) {
        if cwd.starts_with(denied) {
            return format!(
                "Note: the session's directory is inside {}, which commands may not touch at all.\n",
                denied.display()
            );
        }
        let Some(holder) = denied.parent().filter(|holder| holder.starts_with(cwd)) else { continue };
        let name = denied
            .strip_prefix(holder)
            .map_or_else(|_| denied.display().to_string(), |name| name.display().to_string());
        match holders.iter_mut().find(|(known, _)| *known == holder) {
            Some((_, names)) => names.push(name),
            None => holders.push((holder, vec![name])),
        }
    }
    holders
        .into_iter()
        .map(|(holder, names)| {
            format!(
                "Note: {} holds paths commands may not touch ({}), so commands cannot create, rename or remove \
                 anything directly in it (they can change its existing files and use its subfolders freely). \
                 Start sessions in a project folder rather than here.\n",
                holder.display(),
                names.join(", ")
            )
        })
        .collect()
}

/// Which of the daemon's environment variables commands get, in every mode.
fn environment_line(sandbox: &SandboxStatus) -> String {
    let mut names: Vec<String> = INHERITED.iter().map(|name| (*name).to_owned()).collect();
    names.push(format!("{LOCALE_PREFIX}*"));
    names.extend(sandbox.env.iter().cloned());
    format!(
        "Of the daemon's environment, commands get only {} (and TMPDIR, their run's temp dir); every other \
         variable stays out of their reach.\n",
        names.join(", ")
    )
}

/// What commands may do to the git directory of a repository holding the session's directory from outside it.
fn enclosing_git_dir_line(setting: EnclosingGitDir) -> &'static str {
    match setting {
        EnclosingGitDir::ReadOnly => {
            "When the session's directory is inside a git repository whose git directory lies outside it (a \
             subfolder, a worktree), commands may not write that git directory, so they cannot commit: git runs \
             its hooks and config later outside the sandbox. Set `[sandbox] enclosing_git_dir = \"writable\"` in \
             config.toml to let them, or start the session at the repository's root.\n"
        }
        EnclosingGitDir::Writable => {
            "When the session's directory is inside a git repository whose git directory lies outside it (a \
             subfolder, a worktree), commands may write that git directory, so they can commit ([sandbox] \
             enclosing_git_dir = \"writable\"), unless the repository holds the home folder (a dotfiles \
             repository).\n"
        }
    }
}

fn file_tools_line(sandbox: &SandboxStatus) -> String {
    if sandbox.denied.is_empty() {
        return String::new();
    }
    "File tools (read_file, write_file, edit_file, list_dir, search) refuse the same paths by inode in every mode, \
     hard links and bind mounts included.\n"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(mode: SandboxMode) -> SandboxStatus {
        SandboxStatus {
            mode,
            enforcement: if mode == SandboxMode::Off { SandboxEnforcement::None } else { SandboxEnforcement::Landlock },
            landlock_abi: Some(7),
            network: false,
            denied: vec!["/home/u/.troupe".into(), "/home/u/.ssh".into()],
            writable: vec!["/home/u/.cargo".into()],
            enclosing_git_dir: EnclosingGitDir::ReadOnly,
            env: vec!["CARGO_HOME".into()],
            tools_refused: None,
            pid_namespace: true,
            private_proc: true,
        }
    }

    #[test]
    fn workspace_write_names_every_readable_exception_and_writable_root() {
        let text = explain(&status(SandboxMode::WorkspaceWrite), "s1", "/home/u");
        assert!(text.contains("Landlock ABI 7"), "{text}");
        assert!(text.contains("/home/u/.troupe  (troupe's data directory"), "{text}");
        assert!(text.contains("/home/u/.ssh"), "{text}");
        assert!(text.contains("/home/u  (the session's directory)"), "{text}");
        assert!(text.contains("/home/u/.cargo"), "{text}");
        assert!(text.contains("network  no"), "{text}");
        assert!(text.contains("Note: /home/u holds paths commands may not touch (.troupe, .ssh)"), "{text}");
        assert_eq!(text.matches("Note:").count(), 1, "{text}");
    }

    #[test]
    fn read_only_writes_only_the_temp_dir_and_off_says_so() {
        let text = explain(&status(SandboxMode::ReadOnly), "s1", "/p");
        assert!(!text.contains("/p  (the session's directory)"), "{text}");
        let (read, write) = text.split_once("  write ").unwrap();
        assert!(read.contains(SHARED_MEMORY) && !write.contains(SHARED_MEMORY), "{text}");
        assert!(text.contains("$TMPDIR"), "{text}");
        let text = explain(&status(SandboxMode::Off), "s1", "/p");
        assert!(text.contains("full rights"), "{text}");
        assert!(
            text.contains("commands get only PATH, HOME,") && text.contains("LC_*, CARGO_HOME (and TMPDIR"),
            "{text}"
        );
    }

    #[test]
    fn says_whether_commands_see_other_processes() {
        let mut sandbox = status(SandboxMode::WorkspaceWrite);
        let text = explain(&sandbox, "s1", "/p");
        assert!(
            text.contains("Commands see only their own processes in /proc, and outside what they may write"),
            "{text}"
        );
        sandbox.private_proc = false;
        let text = explain(&sandbox, "s1", "/p");
        assert!(text.contains("Commands see every process of this machine in /proc"), "{text}");
    }

    #[test]
    fn says_whether_commands_may_write_an_enclosing_git_dir() {
        let mut sandbox = status(SandboxMode::WorkspaceWrite);
        let text = explain(&sandbox, "s1", "/repo/sub");
        assert!(text.contains("commands may not write that git directory"), "{text}");
        assert!(text.contains("enclosing_git_dir = \"writable\""), "{text}");
        sandbox.enclosing_git_dir = EnclosingGitDir::Writable;
        let text = explain(&sandbox, "s1", "/repo/sub");
        assert!(text.contains("commands may write that git directory"), "{text}");
        assert!(text.contains("unless the repository holds the home folder"), "{text}");
    }

    #[test]
    fn a_refusing_daemon_says_why() {
        let mut refused = status(SandboxMode::WorkspaceWrite);
        refused.enforcement = SandboxEnforcement::None;
        refused.tools_refused = Some("no Landlock".into());
        let text = explain(&refused, "s1", "/p");
        assert!(text.contains("Commands are refused: no Landlock"), "{text}");
    }
}
