//! `troupe sandbox explain SESSION_ID`: what a command run in a session may read and write, in words.
//!
//! Built from what the daemon reports (the sandbox in `runtime.snapshot.get`, the session's cwd from
//! `session.get`), so it describes the daemon's machine even when the client runs elsewhere.

use troupe_protocol::method;
use troupe_protocol::types::common::{Empty, SessionIdParams};
use troupe_protocol::types::runtime::{SandboxEnforcement, SandboxMode, SandboxStatus};
use troupe_runtime::sandbox::plan::{READABLE_DEVICES, SHARED_MEMORY, WRITABLE_DEVICES};

use crate::commands::Connection;
use troupe_protocol::client::ClientOptions;

/// `troupe sandbox explain`: prints the rules, or their JSON with `json`.
pub async fn explain_command(connection: &Connection, session_id: String, json: bool) -> anyhow::Result<()> {
    let (client, _deliveries) = connection.connect(ClientOptions::default()).await?;
    let session = client.call::<method::SessionGet>(SessionIdParams { session_id }).await?.session;
    let snapshot = client.call::<method::RuntimeSnapshotGet>(Empty {}).await?.snapshot;
    client.close().await;
    let Some(sandbox) = snapshot.sandbox else {
        anyhow::bail!("this daemon does not report a sandbox (it is older than troupe's sandbox)");
    };
    if json {
        let value = serde_json::json!({ "session_id": session.session_id, "cwd": session.cwd, "sandbox": sandbox });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", explain(&sandbox, &session.session_id, &session.cwd));
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
    text.push_str(&format!("             /dev, but for {}\n", READABLE_DEVICES.join(", ")));
    text.push_str("           (names in those folders can be listed; their contents cannot be read)\n");
    text.push_str("  write    ");
    let mut writable = Vec::new();
    if sandbox.mode == SandboxMode::WorkspaceWrite {
        writable.push(format!("{cwd}  (the session's directory)"));
        writable.extend(sandbox.writable.iter().cloned());
    }
    writable.push("$TMPDIR  (the run's own temp dir, removed when the run ends)".to_owned());
    writable.push(format!("{}, {SHARED_MEMORY}", WRITABLE_DEVICES.join(", ")));
    text.push_str(&writable.join("\n           "));
    text.push_str("\n           and nothing inside the paths it may not read\n");
    let network = if sandbox.network { "yes" } else { "no: its own network namespace, with loopback only" };
    text.push_str(&format!("  network  {network}\n"));
    let cwd_path = std::path::Path::new(cwd);
    for denied in &sandbox.denied {
        let denied = std::path::Path::new(denied);
        if denied != cwd_path && denied.starts_with(cwd_path) {
            let holder = denied.parent().map_or_else(|| cwd.to_owned(), |parent| parent.display().to_string());
            text.push_str(&format!(
                "Note: {} lies inside the session's directory, so nothing new can be created directly in {holder} \
                 (its existing files and subfolders stay usable). Keep troupe's data directory out of projects.\n",
                denied.display()
            ));
        }
        if cwd_path.starts_with(denied) {
            text.push_str(&format!(
                "Note: the session's directory is inside {}, which commands may not touch at all.\n",
                denied.display()
            ));
        }
    }
    text.push_str(
        "Everything a command starts is confined the same way and is killed with its run and with the daemon.\n",
    );
    text.push_str(&file_tools_line(sandbox));
    text
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
            tools_refused: None,
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
        assert!(text.contains("Note: /home/u/.troupe lies inside the session's directory"), "{text}");
    }

    #[test]
    fn read_only_writes_only_the_temp_dir_and_off_says_so() {
        let text = explain(&status(SandboxMode::ReadOnly), "s1", "/p");
        assert!(!text.contains("/p  (the session's directory)"), "{text}");
        assert!(text.contains("$TMPDIR"), "{text}");
        let text = explain(&status(SandboxMode::Off), "s1", "/p");
        assert!(text.contains("full rights"), "{text}");
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
