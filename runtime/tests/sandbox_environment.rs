//! Commands get an allowlisted environment: the daemon's secret variables (whatever their names) and its own
//! `TROUPE_*` settings do not reach them; `PATH` and the names `[sandbox] env` lists do. A test binary of its own
//! with one test, so that setting this process's environment races with no other thread.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use troupe_protocol::types::run::ToolResultStatus;
use troupe_runtime::config::{SandboxConfig, SandboxMode};

mod sandbox_support;

use sandbox_support::*;

const SECRET_VARIABLES: [&str; 11] = [
    "GPG_PASSPHRASE",
    "CI_JOB_JWT",
    "BW_SESSION",
    "SLACK_WEBHOOK_URL",
    "STRIPE_SK_LIVE",
    "OPENAI_API_KEY",
    "GITHUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "PGPASSWORD",
    "SSH_AUTH_SOCK",
    "DBUS_SESSION_BUS_ADDRESS",
];

#[test]
fn the_daemons_secret_variables_do_not_reach_a_command() {
    for name in SECRET_VARIABLES {
        // SAFETY: the only test of this binary, before any runtime or other thread of ours exists.
        unsafe { std::env::set_var(name, "secret-value-0123456789") };
    }
    // SAFETY: as above.
    unsafe { std::env::set_var("APP_HARMLESS_SETTING", "kept") };
    // SAFETY: as above.
    unsafe { std::env::set_var("APP_UNLISTED_SETTING", "dropped") };
    // The daemon's own settings are not a command's business, harmless or not (see `confine.rs`).
    // SAFETY: as above.
    unsafe { std::env::set_var("TROUPE_HARMLESS_SETTING", "dropped") };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let workspace = Workspace::new();
        for mode in [SandboxMode::WorkspaceWrite, SandboxMode::Off] {
            let listed = vec!["APP_HARMLESS_SETTING".to_owned(), "TROUPE_HARMLESS_SETTING".to_owned()];
            let sandbox = workspace.sandbox(SandboxConfig { env: listed, ..config(mode) });
            let result = workspace.run(&sandbox, "env").await;
            assert_status(&result, ToolResultStatus::Ok);
            for name in SECRET_VARIABLES {
                assert!(!result.output.contains(name), "{mode:?}: {name} reached the command: {}", result.output);
            }
            assert!(!result.output.contains("secret-value"), "{}", result.output);
            assert!(result.output.contains("APP_HARMLESS_SETTING=kept"), "{}", result.output);
            assert!(!result.output.contains("TROUPE_HARMLESS_SETTING"), "{}", result.output);
            assert!(!result.output.contains("APP_UNLISTED_SETTING"), "{}", result.output);
            assert!(result.output.contains("PATH="), "{}", result.output);
        }
    });
}
