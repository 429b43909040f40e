//! The run's system prompt, built once when the run starts (`troupe_runtime::system_prompt` words it): the tools
//! the run offers, the sandbox, the tree's permission mode at that moment, and the project's `AGENTS.md` files,
//! read then (on a blocking thread), so a file changed between two runs is seen by the second. The same facts give
//! the same bytes, so consecutive runs share the providers' prompt caches.

use troupe_protocol::types::session::PermissionMode;
use troupe_runtime::instructions::{self, ProjectInstructions};
use troupe_runtime::system_prompt::{PromptFacts, SandboxFacts, system_prompt};

use super::RunLoop;
use crate::ports::approval::TreeMode;

impl RunLoop {
    pub(super) async fn build_system_prompt(&self) -> String {
        let services = &self.setup.services;
        let (cwd, data_dir, sandbox) = (self.setup.cwd.clone(), services.data_dir.clone(), services.sandbox.clone());
        let gathered =
            tokio::task::spawn_blocking(move || instructions::gather(&cwd, &data_dir, sandbox.protected())).await;
        let instructions = gathered.unwrap_or_else(|error| {
            tracing::warn!(%error, "the project's instructions could not be gathered; the run goes on without them");
            ProjectInstructions::default()
        });
        // Said as the approval path would take it: a tree whose mode cannot be learned is treated as `ask`.
        let mode = self.setup.approvals.send(TreeMode).await.unwrap_or(PermissionMode::Ask);
        let sandbox = SandboxFacts::of(&services.sandbox);
        system_prompt(&PromptFacts {
            cwd: &self.setup.cwd,
            tools: &self.tool_specs,
            sandbox: &sandbox,
            mode,
            instructions: &instructions,
        })
    }
}
