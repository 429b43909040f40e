//! The sandbox's denied paths in the in-process file tools: the daemon's data directory inside the cwd, hard links
//! and symlinked folders leading into it, writes that must change nothing, and other denied paths.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::config::SandboxConfig;
use troupe_runtime::sandbox::Sandbox;
use troupe_runtime::tools::{ToolContext, ToolRegistry};

#[path = "sandbox_support/mounts.rs"]
mod mounts;
/// Skipping a test this machine cannot run, shared with the other sandbox tests.
#[path = "sandbox_support/unavailable.rs"]
mod unavailable;

use mounts::bind_mount;

const STEP: Duration = Duration::from_secs(20);
const TOKEN: &str = "tok_4d1f0c9b8a7e6d5c4b3a2f1e0d9c8b7a";
const API_KEY: &str = "sk-live-abcdefghijklmnopqrstuvwxyz012345";
const CONFIG: &str = "[sandbox]\nmode = \"workspace-write\"\n";

/// A home folder and a cwd holding the daemon's data directory, `.troupe`, with its token, credentials and config.
struct Layout {
    _root: tempfile::TempDir,
    home: PathBuf,
    cwd: PathBuf,
    data_dir: PathBuf,
}

impl Layout {
    fn new() -> Layout {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let home = base.join("home");
        let cwd = base.join("project");
        let data_dir = cwd.join(".troupe");
        std::fs::create_dir_all(data_dir.join("daemon")).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(data_dir.join("daemon/token"), TOKEN).unwrap();
        std::fs::write(
            data_dir.join("providers.json"),
            format!("{{\n  \"openai\": {{\n    \"api_key\": \"{API_KEY}\"\n  }}\n}}\n"),
        )
        .unwrap();
        std::fs::write(data_dir.join("config.toml"), CONFIG).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
        std::fs::write(cwd.join("notes.txt"), "the api_key goes in sk-example-not-a-key\n").unwrap();
        Layout { _root: root, home, cwd, data_dir }
    }

    fn sandbox(&self, config: &SandboxConfig) -> Arc<Sandbox> {
        Arc::new(Sandbox::new(config, &self.data_dir, Some(&self.home)))
    }

    fn context(&self) -> ToolContext {
        self.context_with(&SandboxConfig::default())
    }

    fn context_with(&self, config: &SandboxConfig) -> ToolContext {
        let mut context = ToolContext::new(&self.cwd);
        context.sandbox = self.sandbox(config);
        context
    }

    async fn call(&self, name: &str, arguments: Value) -> PersistedToolResult {
        execute(name, arguments, self.context()).await
    }

    /// A search of the cwd for `pattern` succeeds and finds nothing: whatever holds it is skipped or refused.
    async fn assert_search_finds_nothing(&self, pattern: &str) {
        let searched = self.call("search", json!({ "pattern": pattern })).await;
        assert_ok(&searched);
        assert!(searched.output.starts_with("no matches"), "{}", searched.output);
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.cwd.join(relative)).unwrap()
    }
}

async fn execute(name: &str, arguments: Value, context: ToolContext) -> PersistedToolResult {
    let registry = ToolRegistry::builtin();
    tokio::time::timeout(STEP, registry.get(name).unwrap().execute(arguments, context))
        .await
        .expect("the call ends in time")
}

/// A refusal by the sandbox that names why and shows nothing of the secrets.
fn assert_refused(result: &PersistedToolResult, why: &str) {
    assert_eq!(result.status, ToolResultStatus::Denied, "{}", result.output);
    assert!(result.output.contains("refused by the sandbox"), "{}", result.output);
    assert!(result.output.contains(why), "{:?} should say {why:?}", result.output);
    assert_no_secret(&result.output);
}

fn assert_no_secret(output: &str) {
    assert!(!output.contains(TOKEN) && !output.contains(API_KEY), "{output}");
    assert!(!output.contains("tok_4d1f") && !output.contains("sk-live"), "{output}");
}

fn assert_ok(result: &PersistedToolResult) {
    assert_eq!(result.status, ToolResultStatus::Ok, "{}", result.output);
}

#[tokio::test]
async fn reading_the_data_dir_is_refused_however_it_is_named() {
    let layout = Layout::new();
    for path in [
        ".troupe/daemon/token".to_owned(),
        "./.troupe/providers.json".to_owned(),
        "notes.txt/../.troupe/config.toml".to_owned(),
        layout.data_dir.join("daemon/token").to_string_lossy().into_owned(),
    ] {
        let result = layout.call("read_file", json!({"path": path})).await;
        assert_refused(&result, "the daemon's data directory");
    }
    let result = layout.call("read_file", json!({"path": ".troupe"})).await;
    assert_refused(&result, "the daemon's data directory");
}

#[tokio::test]
async fn a_hard_link_to_the_token_is_refused_by_read_file_edit_file_and_search() {
    let layout = Layout::new();
    std::fs::hard_link(layout.data_dir.join("daemon/token"), layout.cwd.join("innocent.txt")).unwrap();

    let read = layout.call("read_file", json!({"path": "innocent.txt"})).await;
    assert_refused(&read, "hard link");
    assert!(read.output.contains("the daemon's data directory"), "{}", read.output);

    let edited =
        layout.call("edit_file", json!({"path": "innocent.txt", "old_string": "tok_", "new_string": "x"})).await;
    assert_refused(&edited, "hard link");
    assert_eq!(layout.read(".troupe/daemon/token"), TOKEN);

    // Searching the cwd skips the link; searching the link itself is refused.
    layout.assert_search_finds_nothing("tok_").await;
    let rooted = layout.call("search", json!({"pattern": "tok_", "path": "innocent.txt"})).await;
    assert_refused(&rooted, "hard link");
}

#[tokio::test]
async fn a_symlinked_folder_into_the_data_dir_is_refused() {
    let layout = Layout::new();
    symlink(layout.data_dir.join("daemon"), layout.cwd.join("daemon-link")).unwrap();
    symlink(".troupe", layout.cwd.join("dot-link")).unwrap();

    let read = layout.call("read_file", json!({"path": "daemon-link/token"})).await;
    assert_refused(&read, "the daemon's data directory");
    let listed = layout.call("list_dir", json!({"path": "dot-link"})).await;
    assert_refused(&listed, "the daemon's data directory");
    let searched = layout.call("search", json!({"pattern": "api_key", "path": "dot-link"})).await;
    assert_refused(&searched, "the daemon's data directory");
    let written = layout.call("write_file", json!({"path": "dot-link/daemon/token", "content": "x"})).await;
    assert_refused(&written, "the daemon's data directory");
    assert_eq!(layout.read(".troupe/daemon/token"), TOKEN);
}

#[tokio::test]
async fn searching_the_cwd_skips_the_data_dir_but_finds_ordinary_files() {
    let layout = Layout::new();
    // A .gitignore that tries to pull the data directory back into the search changes nothing.
    std::fs::write(layout.cwd.join(".gitignore"), "!.troupe\n!.troupe/**\n").unwrap();
    for pattern in ["sk-", "api_key", "tok_", "sandbox"] {
        let result = layout.call("search", json!({"pattern": pattern, "path": "."})).await;
        assert_ok(&result);
        assert_no_secret(&result.output);
        assert!(!result.output.contains(".troupe"), "{}", result.output);
        if pattern == "sk-" || pattern == "api_key" {
            assert_eq!(result.output, "notes.txt:1: the api_key goes in sk-example-not-a-key");
        }
    }
    // The same search without a sandbox does reach the data directory: the sandbox is what keeps it out.
    let unconfined = execute("search", json!({"pattern": "sk-"}), ToolContext::new(&layout.cwd)).await;
    assert!(unconfined.output.contains("providers.json"), "{}", unconfined.output);

    let rooted = layout.call("search", json!({"pattern": "sk-", "path": ".troupe/daemon"})).await;
    assert_refused(&rooted, "the daemon's data directory");
}

#[tokio::test]
async fn writes_into_the_data_dir_are_refused_and_change_nothing() {
    let layout = Layout::new();
    std::fs::hard_link(layout.data_dir.join("config.toml"), layout.cwd.join("config-link.toml")).unwrap();

    for path in [".troupe/config.toml", ".troupe/new.txt", ".troupe/sub/dir/new.txt", "config-link.toml"] {
        let written = layout.call("write_file", json!({"path": path, "content": "mode = \"off\"\n"})).await;
        let why = if path == "config-link.toml" { "hard link" } else { "the daemon's data directory" };
        assert_refused(&written, why);
    }
    let edited = layout
        .call("edit_file", json!({"path": "config-link.toml", "old_string": "workspace-write", "new_string": "off"}))
        .await;
    assert_refused(&edited, "hard link");
    let edited_directly = layout
        .call("edit_file", json!({"path": ".troupe/config.toml", "old_string": "workspace-write", "new_string": "off"}))
        .await;
    assert_refused(&edited_directly, "the daemon's data directory");

    assert_eq!(layout.read(".troupe/config.toml"), CONFIG);
    assert!(!layout.data_dir.join("new.txt").exists());
    assert!(!layout.data_dir.join("sub").exists(), "a refused write creates no parent folders");
    let mut names: Vec<String> = std::fs::read_dir(&layout.data_dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["config.toml", "daemon", "providers.json"]);

    // An ordinary file next to the data directory is still written.
    assert_ok(&layout.call("write_file", json!({"path": "fine.txt", "content": "ok"})).await);
    assert_eq!(layout.read("fine.txt"), "ok");
}

#[tokio::test]
async fn listing_the_data_dir_is_refused_but_the_folder_holding_it_is_listed() {
    let layout = Layout::new();
    for path in [".troupe", ".troupe/daemon", ".troupe/."] {
        let listed = layout.call("list_dir", json!({"path": path})).await;
        assert_refused(&listed, "the daemon's data directory");
    }
    let listed = layout.call("list_dir", json!({})).await;
    assert_ok(&listed);
    assert_eq!(listed.output, ".troupe/\nnotes.txt");
}

#[tokio::test]
async fn a_hard_link_made_after_the_index_was_built_is_refused() {
    let layout = Layout::new();
    let context = layout.context();
    let sandbox = Arc::clone(&context.sandbox);
    // A first hard link makes the sandbox index the data directory.
    std::fs::hard_link(layout.data_dir.join("daemon/token"), layout.cwd.join("first.txt")).unwrap();
    assert_refused(&execute("read_file", json!({"path": "first.txt"}), context).await, "hard link");

    // The daemon then replaces providers.json atomically (a new inode), and a link to the new file appears.
    let replacement = layout.data_dir.join("providers.json.tmp");
    std::fs::write(&replacement, format!("{{\"api_key\": \"{API_KEY}\"}}\n")).unwrap();
    std::fs::rename(&replacement, layout.data_dir.join("providers.json")).unwrap();
    std::fs::hard_link(layout.data_dir.join("providers.json"), layout.cwd.join("second.txt")).unwrap();

    let mut context = ToolContext::new(&layout.cwd);
    context.sandbox = sandbox;
    assert_refused(&execute("read_file", json!({"path": "second.txt"}), context).await, "hard link");
}

#[tokio::test]
async fn other_denied_paths_are_refused_even_when_approved() {
    let layout = Layout::new();
    let private = layout.cwd.join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("key.pem"), "KEY").unwrap();
    std::fs::hard_link(private.join("key.pem"), layout.cwd.join("key-link.pem")).unwrap();
    let later = layout.cwd.join("later");
    let config = SandboxConfig {
        deny_read: vec![private.to_string_lossy().into_owned(), later.to_string_lossy().into_owned()],
        ..SandboxConfig::default()
    };

    let read = execute("read_file", json!({"path": "private/key.pem"}), layout.context_with(&config)).await;
    assert_refused(&read, "a denied path");
    assert!(read.output.contains(&*private.to_string_lossy()), "{}", read.output);
    let linked = execute("read_file", json!({"path": "key-link.pem"}), layout.context_with(&config)).await;
    assert_refused(&linked, "hard link");
    let written =
        execute("write_file", json!({"path": "private/new", "content": "x"}), layout.context_with(&config)).await;
    assert_refused(&written, "a denied path");
    assert!(!private.join("new").exists());

    // A denied path that did not exist when the daemon started is refused once it does.
    let context = layout.context_with(&config);
    std::fs::create_dir_all(&later).unwrap();
    std::fs::write(later.join("file"), "later").unwrap();
    assert_refused(&execute("read_file", json!({"path": "later/file"}), context).await, "a denied path");

    // `~/.ssh` is denied by default: an approval to read outside the cwd does not reach into it.
    let key = layout.home.join(".ssh/id_ed25519");
    let arguments = json!({"path": key.to_string_lossy()});
    let mut context = layout.context();
    context.approved_request =
        Some(ToolRegistry::builtin().get("read_file").unwrap().permission(&arguments, &layout.cwd).unwrap());
    assert_refused(&execute("read_file", arguments, context).await, "a denied path");
}

#[tokio::test]
async fn the_daemons_own_proc_files_are_refused_even_when_approved() {
    let layout = Layout::new();
    // File tools run inside the daemon: its environment, memory map and descriptors are behind /proc/self. A path
    // through a link of /proc (`/proc/self`) is refused before it can even be asked about, since inside the daemon
    // it names the daemon; a plain /proc path is asked about and then refused by the protected /proc.
    for (tool, path) in
        [("read_file", "/proc/self/environ"), ("read_file", "/proc/self/maps"), ("list_dir", "/proc/self/fd")]
    {
        let refused = ToolRegistry::builtin().get(tool).unwrap().permission(&json!({"path": path}), &layout.cwd);
        let error = refused.expect_err(path).to_string();
        assert!(error.contains("/proc/self"), "{tool} {path}: {error}");
    }
    let arguments = json!({"path": "/proc/1/environ"});
    let mut context = layout.context();
    context.approved_request =
        Some(ToolRegistry::builtin().get("read_file").unwrap().permission(&arguments, &layout.cwd).unwrap());
    assert_refused(&execute("read_file", arguments, context).await, "/proc");
}

#[tokio::test]
async fn an_unconfined_context_protects_nothing() {
    let layout = Layout::new();
    let read = execute("read_file", json!({"path": ".troupe/daemon/token"}), ToolContext::new(&layout.cwd)).await;
    assert_ok(&read);
    assert_eq!(read.output, TOKEN);
    assert!(Sandbox::unconfined().protected().is_empty());
    let sandbox = layout.sandbox(&SandboxConfig::default());
    assert_eq!(sandbox.protected().paths().first().map(PathBuf::as_path), Some(layout.data_dir.as_path()));
    assert!(!Path::new(&layout.cwd).join("innocent.txt").exists());
}

#[tokio::test]
async fn a_bind_mount_of_the_data_dir_is_refused() {
    let layout = Layout::new();
    let Some(_unmount) = bind_mount(&layout.data_dir, &layout.cwd.join("mnt")) else {
        return;
    };

    // By path, mnt/daemon/token is an ordinary file in the cwd; by the identity of mnt, it is in the data dir.
    let read = layout.call("read_file", json!({"path": "mnt/daemon/token"})).await;
    assert_refused(&read, "the daemon's data directory");
    let listed = layout.call("list_dir", json!({"path": "mnt"})).await;
    assert_refused(&listed, "the daemon's data directory");
    let written = layout.call("write_file", json!({"path": "mnt/new.txt", "content": "x"})).await;
    assert_refused(&written, "the daemon's data directory");
    assert!(!layout.data_dir.join("new.txt").exists());
    layout.assert_search_finds_nothing("tok_|sk-live").await;
}

#[tokio::test]
async fn a_bind_mount_of_a_folder_inside_the_data_dir_is_refused() {
    let layout = Layout::new();
    let Some(_unmount) = bind_mount(&layout.data_dir.join("daemon"), &layout.cwd.join("mnt")) else {
        return;
    };
    let read = layout.call("read_file", json!({"path": "mnt/token"})).await;
    assert_refused(&read, "the daemon's data directory");
    layout.assert_search_finds_nothing("tok_").await;
}

#[tokio::test]
async fn a_bind_mount_of_a_session_folder_deep_in_the_data_dir_is_refused() {
    // Session folders hold no folder, so the walk of the data dir's folders records them without reading them
    // (on file systems that count subfolders); one with stored outputs is read.
    let layout = Layout::new();
    let quiet = layout.data_dir.join("sessions/quiet");
    let busy = layout.data_dir.join("sessions/busy/outputs/call-1");
    std::fs::create_dir_all(&quiet).unwrap();
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(quiet.join("events.jsonl"), format!("{{\"secret\":\"{API_KEY}\"}}\n")).unwrap();
    std::fs::write(busy.join("output"), TOKEN).unwrap();
    let Some(_quiet) = bind_mount(&quiet, &layout.cwd.join("quiet")) else {
        return;
    };
    let Some(_busy) = bind_mount(&busy, &layout.cwd.join("busy")) else {
        return;
    };
    for path in ["quiet/events.jsonl", "busy/output"] {
        let read = layout.call("read_file", json!({ "path": path })).await;
        assert_refused(&read, "the daemon's data directory");
    }
    let listed = layout.call("list_dir", json!({"path": "quiet"})).await;
    assert_refused(&listed, "the daemon's data directory");
    layout.assert_search_finds_nothing("tok_|sk-live").await;
}

#[tokio::test]
async fn a_bind_mount_of_a_folder_made_in_the_data_dir_after_the_first_check_is_refused() {
    // The mount table is read when a location passes a bind mount, so a session's folder made after the file tools'
    // first check (when an index of the data dir's folders would have been walked) is known as one.
    let layout = Layout::new();
    // One sandbox for every call, as a daemon keeps one.
    let sandbox = layout.sandbox(&SandboxConfig::default());
    let call = |name: &'static str, arguments: Value| {
        let mut context = ToolContext::new(&layout.cwd);
        context.sandbox = Arc::clone(&sandbox);
        execute(name, arguments, context)
    };
    let early = layout.data_dir.join("sessions/early");
    std::fs::create_dir_all(&early).unwrap();
    let Some(_early) = bind_mount(&early, &layout.cwd.join("early")) else {
        return;
    };
    assert_ok(&call("read_file", json!({"path": "notes.txt"})).await);
    assert_refused(&call("list_dir", json!({"path": "early"})).await, "the daemon's data directory");

    let late = layout.data_dir.join("sessions/late");
    std::fs::create_dir_all(&late).unwrap();
    std::fs::write(late.join("events.jsonl"), format!("{{\"secret\":\"{API_KEY}\"}}\n")).unwrap();
    let Some(_late) = bind_mount(&late, &layout.cwd.join("late")) else {
        return;
    };
    let read = call("read_file", json!({"path": "late/events.jsonl"})).await;
    assert_refused(&read, "the daemon's data directory");
    let listed = call("list_dir", json!({"path": "late"})).await;
    assert_refused(&listed, "the daemon's data directory");
    let searched = call("search", json!({"pattern": "sk-live"})).await;
    assert_ok(&searched);
    assert!(searched.output.starts_with("no matches"), "{}", searched.output);
}

#[tokio::test]
async fn a_bind_mount_of_a_folder_on_a_file_system_mounted_inside_the_data_dir_is_refused() {
    // The data dir's sessions on a file system of their own: a folder of it, bind-mounted into the cwd, shows the
    // data dir's contents though its device is not the data dir's.
    let layout = Layout::new();
    let sessions = layout.data_dir.join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let Some(_sessions) = mounts::mount_tmpfs(&sessions) else {
        return;
    };
    std::fs::create_dir(sessions.join("s1")).unwrap();
    std::fs::write(sessions.join("s1/events.jsonl"), format!("{{\"secret\":\"{API_KEY}\"}}\n")).unwrap();
    let Some(_s1) = bind_mount(&sessions.join("s1"), &layout.cwd.join("s1")) else {
        return;
    };
    // And the file system's root itself, bound elsewhere: the mount table calls it a whole file system.
    let Some(_all) = bind_mount(&sessions, &layout.cwd.join("all")) else {
        return;
    };
    for path in ["s1/events.jsonl", "all/s1/events.jsonl"] {
        let read = layout.call("read_file", json!({ "path": path })).await;
        assert_refused(&read, "the daemon's data directory");
    }
    let listed = layout.call("list_dir", json!({"path": "all"})).await;
    assert_refused(&listed, "the daemon's data directory");
    layout.assert_search_finds_nothing("sk-live").await;
}

#[tokio::test]
async fn a_bind_mount_of_a_folder_beside_the_data_dir_is_not_refused() {
    // `.troupe-old` shares the data dir's first bytes, not its path: a bind mount of it is an ordinary folder.
    let layout = Layout::new();
    let beside = layout.cwd.join(".troupe-old");
    std::fs::create_dir(&beside).unwrap();
    std::fs::write(beside.join("plain.txt"), "plain\n").unwrap();
    let Some(_beside) = bind_mount(&beside, &layout.cwd.join("old")) else {
        return;
    };
    let read = layout.call("read_file", json!({"path": "old/plain.txt"})).await;
    assert_ok(&read);
    assert_eq!(read.output, "plain\n");
}

#[tokio::test]
async fn a_bind_mount_of_a_file_of_the_data_dir_is_refused() {
    // A file mounted on a file: one name each side, so neither the folders above it nor a second link give it away;
    // only the mount does.
    let layout = Layout::new();
    let target = layout.cwd.join("token-copy.txt");
    std::fs::write(&target, "plain\n").unwrap();
    let Some(_unmount) = mounts::bind_mount_on(&layout.data_dir.join("daemon/token"), &target) else {
        return;
    };
    let read = layout.call("read_file", json!({"path": "token-copy.txt"})).await;
    assert_refused(&read, "the daemon's data directory");
    let written = layout.call("write_file", json!({"path": "token-copy.txt", "content": "x"})).await;
    assert_refused(&written, "the daemon's data directory");
    assert_eq!(std::fs::read_to_string(layout.data_dir.join("daemon/token")).unwrap(), TOKEN);
    layout.assert_search_finds_nothing("tok_").await;
}

#[tokio::test]
async fn a_bind_mount_of_a_session_folder_of_another_data_dir_is_refused() {
    // Another daemon's data dir is known by its layout, found in the folders above a location: a folder of it
    // mounted elsewhere has none of those above it where it is mounted, so the folder it shows is judged where it
    // lies.
    let layout = Layout::new();
    let other = layout.home.join("other-data");
    let session = other.join("sessions/s1");
    std::fs::create_dir_all(&session).unwrap();
    std::fs::write(other.join(troupe_runtime::sandbox::data_dirs::MARKER), "").unwrap();
    std::fs::write(session.join("events.jsonl"), format!("{{\"secret\":\"{API_KEY}\"}}\n")).unwrap();
    let Some(_s1) = bind_mount(&session, &layout.cwd.join("s1")) else {
        return;
    };
    let read = layout.call("read_file", json!({"path": "s1/events.jsonl"})).await;
    assert_refused(&read, "a troupe data directory");
    layout.assert_search_finds_nothing("sk-live").await;
}
