//! Project instructions in the system prompt, as an OpenAI-compatible vendor receives it: the user's
//! `AGENTS.md` beside `config.toml`, and the repository's from its root down to a subfolder the session works in,
//! outermost first; a change between runs reaches the next run, and a file over the budget is cut with a note.

use std::path::Path;

use serde_json::Value;
use troupe_test_support::FakeServer;
use troupe_test_support::replies::{models_list, openai_text};

use super::support::*;

/// The system message of each chat request the vendor received, in order.
fn system_prompts(vendor: &FakeServer) -> Vec<String> {
    vendor
        .bodies_to("/chat/completions")
        .iter()
        .map(|body| {
            let first = &body["messages"][0];
            assert_eq!(first["role"], "system", "{body}");
            first["content"].as_str().expect("a text system prompt").to_owned()
        })
        .collect()
}

fn position(prompt: &str, needle: &str) -> usize {
    prompt.find(needle).unwrap_or_else(|| panic!("{needle:?} is not in the system prompt:\n{prompt}"))
}

async fn run_once(client: &troupe_protocol::client::Client, daemon: &TestDaemon, cwd: &Path) {
    let session = create_session_in(client, cwd).await;
    let (watcher, mut deliveries) = daemon.client().await;
    within("subscribe", watcher.subscribe(&session.session_id, None)).await.expect("subscribe");
    let run_id = start_run(client, &session.session_id, selection_of("default", "openai/coder"), "hello").await;
    let events =
        events_until(&mut deliveries, |event| event.run_id.as_deref() == Some(&run_id) && is_terminal(event)).await;
    let last = events.last().map(|event| serde_json::to_value(&event.payload).expect("payload"));
    assert_eq!(last.as_ref().and_then(|payload| payload["type"].as_str()), Some("run_completed"), "{last:?}");
}

#[tokio::test]
async fn agents_files_from_the_user_and_the_repository_reach_the_system_prompt_and_follow_their_changes() {
    let vendor =
        FakeServer::start(vec![models_list(&["coder"]), openai_text("one"), openai_text("two"), openai_text("three")])
            .await;
    let daemon = TestDaemon::start();
    let (client, _) = daemon.client().await;
    connect_provider(&client, "openai", &[("base_url", &format!("{}/v1", vendor.base_url))], Some("k")).await.unwrap();

    let repo = daemon.project_path().canonicalize().unwrap().join("repo");
    let cwd = repo.join("crates").join("core");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join("AGENTS.md"), "ROOT-RULE: run make check.\n").unwrap();
    // A folder with no AGENTS.md offers its CLAUDE.md.
    std::fs::write(repo.join("crates").join("CLAUDE.md"), "CRATES-RULE: one crate per concern.\n").unwrap();
    std::fs::write(cwd.join("AGENTS.md"), "CORE-RULE: no unsafe.\n").unwrap();
    // Above the repository's root, nothing is read.
    std::fs::write(daemon.project_path().join("AGENTS.md"), "OUTSIDE-RULE\n").unwrap();
    let data_dir = daemon.data_path().canonicalize().unwrap();
    std::fs::write(data_dir.join("AGENTS.md"), "USER-RULE: answer briefly.\n").unwrap();

    run_once(&client, &daemon, &cwd).await;
    let prompt = &system_prompts(&vendor)[0];
    assert!(prompt.starts_with("You are troupe, a coding agent"), "{prompt}");
    assert!(prompt.contains(&format!("- Working directory: {}.", cwd.display())), "{prompt}");
    assert!(prompt.contains("  - `web_fetch`: Fetch a web page"), "{prompt}");
    let user = position(
        prompt,
        &format!("## {} (the user's own, for every project)\n\nUSER-RULE", data_dir.join("AGENTS.md").display()),
    );
    let root = position(prompt, &format!("## {}\n\nROOT-RULE: run make check.\n", repo.join("AGENTS.md").display()));
    let crates = position(prompt, &format!("## {}\n\nCRATES-RULE", repo.join("crates").join("CLAUDE.md").display()));
    let core = position(prompt, &format!("## {}\n\nCORE-RULE: no unsafe.\n", cwd.join("AGENTS.md").display()));
    assert!(user < root && root < crates && crates < core, "outermost first:\n{prompt}");
    assert!(!prompt.contains("OUTSIDE-RULE"), "{prompt}");

    // The next run reads the files again.
    std::fs::write(cwd.join("AGENTS.md"), "CORE-RULE-2: forbid unsafe.\n").unwrap();
    run_once(&client, &daemon, &cwd).await;
    let prompt = &system_prompts(&vendor)[1];
    assert!(prompt.contains("CORE-RULE-2: forbid unsafe.") && !prompt.contains("CORE-RULE: no unsafe."), "{prompt}");

    // A file beyond the budget keeps its beginning and says where the rest is.
    let big = "ROOT-LINE padding the root's instructions\n".repeat(1000);
    std::fs::write(repo.join("AGENTS.md"), &big).unwrap();
    run_once(&client, &daemon, &cwd).await;
    let prompt = &system_prompts(&vendor)[2];
    let note = format!("[cut: this file is {} bytes and only its first", big.len());
    position(prompt, &note);
    position(prompt, &format!("read the rest with read_file at {} if you need it]", repo.join("AGENTS.md").display()));
    assert!(prompt.contains("CORE-RULE-2"), "the nearest file is kept whole:\n{prompt}");
    let kept: usize = prompt.matches("ROOT-LINE").count();
    assert!(kept > 100 && kept < 1000, "{kept} lines of the root's file were kept");
    // The system prompt is the same for every request of the run and all three runs used the same tools.
    let tools = |index: usize| vendor.bodies_to("/chat/completions")[index]["tools"].clone();
    assert_eq!(tools(0), tools(2));
    assert_ne!(tools(0), Value::Null);
}
