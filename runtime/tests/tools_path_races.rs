//! File tools against a hostile process that swaps a path component while they run.
//!
//! A folder in the cwd, `flip`, is exchanged atomically (`renameat2(RENAME_EXCHANGE)`) with a symlink to a denied
//! directory (the daemon's data directory, outside the cwd), as fast as a thread can, while `write_file`,
//! `edit_file`, `read_file`, `list_dir` and `search` run through it many times. Whatever instant the swap lands at,
//! nothing may be created, changed or read in the denied directory: a tool that checked the path and then used it
//! by name would follow the link some of the time.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rustix::fs::{CWD, RenameFlags, renameat_with};
use serde_json::{Value, json};
use troupe_protocol::types::run::{PersistedToolResult, ToolResultStatus};
use troupe_runtime::config::SandboxConfig;
use troupe_runtime::sandbox::Sandbox;
use troupe_runtime::tools::{ToolContext, ToolRegistry};

const STEP: Duration = Duration::from_secs(20);
const ROUNDS: usize = 300;
const TOKEN: &str = "tok_race_7c1e9a2b5d8f0e3c6a9b2d5f8e1c4a7b";
const API_KEY: &str = "sk-live-race-abcdefghijklmnopqrstuvwxyz";

/// Exchanges two names of a folder in a loop until dropped, counting the exchanges.
struct Flipper {
    stop: Arc<AtomicBool>,
    flips: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flipper {
    fn start(first: PathBuf, second: PathBuf) -> Flipper {
        let stop = Arc::new(AtomicBool::new(false));
        let flips = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, flips) = (stop.clone(), flips.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    renameat_with(CWD, &first, CWD, &second, RenameFlags::EXCHANGE).expect("exchange the two names");
                    flips.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        Flipper { stop, flips, thread: Some(thread) }
    }

    fn flips(&self) -> u64 {
        self.flips.load(Ordering::Relaxed)
    }
}

impl Drop for Flipper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Every entry under `root` (links not followed) with the contents of its files: the denied directory's state.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<String>> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        let relative = path.strip_prefix(root).unwrap().to_path_buf();
        if metadata.is_dir() {
            entries.insert(relative, None);
            for child in std::fs::read_dir(&path).unwrap() {
                pending.push(child.unwrap().path());
            }
        } else {
            entries.insert(relative, Some(String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()));
        }
    }
    entries
}

async fn execute(name: &str, arguments: Value, sandbox: &Arc<Sandbox>, cwd: &Path) -> PersistedToolResult {
    let mut context = ToolContext::new(cwd);
    context.sandbox = sandbox.clone();
    let registry = ToolRegistry::builtin();
    tokio::time::timeout(STEP, registry.get(name).unwrap().execute(arguments, context))
        .await
        .expect("the call ends in time")
}

fn assert_no_secret(name: &str, result: &PersistedToolResult) {
    let output = &result.output;
    assert!(!output.contains(TOKEN) && !output.contains(API_KEY), "{name} read the denied directory: {output}");
    assert!(!output.contains("providers.json"), "{name} listed the denied directory: {output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_flipping_to_a_symlink_never_leads_a_file_tool_into_a_denied_directory() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().canonicalize().unwrap();
    let cwd = base.join("project");
    let data_dir = base.join("data");
    std::fs::create_dir_all(data_dir.join("daemon")).unwrap();
    std::fs::write(data_dir.join("daemon/token"), TOKEN).unwrap();
    std::fs::write(data_dir.join("providers.json"), format!("{{\"api_key\": \"{API_KEY}\"}}\n")).unwrap();
    std::fs::write(data_dir.join("config.toml"), "[sandbox]\nmode = \"workspace-write\"\n").unwrap();
    // The real folder holds a config.toml too, so that the edit has something legitimate to do when it wins; not a
    // `daemon/token`, which would make the folder look like a data directory, denied in its own right.
    std::fs::create_dir_all(cwd.join("flip")).unwrap();
    std::fs::write(cwd.join("flip/config.toml"), "mode = 1\n").unwrap();
    symlink(&data_dir, cwd.join("flip_alt")).unwrap();
    let sandbox = Arc::new(Sandbox::new(&SandboxConfig::default(), &data_dir, None));
    let before = snapshot(&data_dir);

    let mut succeeded = 0;
    let flipper = Flipper::start(cwd.join("flip"), cwd.join("flip_alt"));
    for round in 0..ROUNDS {
        let calls = [
            ("write_file", json!({"path": format!("flip/new{round}/deeper/file.txt"), "content": "pwned"})),
            ("write_file", json!({"path": format!("flip/daemon/created{round}"), "content": "pwned"})),
            ("write_file", json!({"path": "flip/config.toml", "content": "mode = 2\n"})),
            ("edit_file", json!({"path": "flip/config.toml", "old_string": "mode", "new_string": "pwned"})),
            ("read_file", json!({"path": "flip/daemon/token"})),
            ("list_dir", json!({"path": "flip"})),
            ("search", json!({"pattern": "tok_race|sk-live", "path": "flip"})),
        ];
        for (name, arguments) in calls {
            let result = execute(name, arguments, &sandbox, &cwd).await;
            assert_no_secret(name, &result);
            succeeded += usize::from(result.status == ToolResultStatus::Ok);
        }
    }
    let flips = flipper.flips();
    drop(flipper);

    assert!(flips > ROUNDS as u64, "the flipper raced the tools ({flips} exchanges)");
    assert!(succeeded > 0, "calls that caught the real folder did their work");
    assert_eq!(snapshot(&data_dir), before, "nothing was created or changed in the denied directory");
}
