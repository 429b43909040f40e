//! A run's system prompt: who the agent is, where it works, its tools, what the sandbox and the permission mode let
//! it do, how to work, and the project's instructions (`instructions.rs`).
//!
//! Pure: the run gathers the facts ([`PromptFacts`]) and this module words them. The same facts always give the
//! same bytes (no clock, no ids, tools in the order given, which the registry keeps by name), so a provider's
//! prompt cache stays warm from one request and one run to the next until something named here changes.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use troupe_protocol::types::runtime::SandboxMode;
use troupe_protocol::types::session::PermissionMode;

use crate::instructions::{InstructionSource, ProjectInstructions};
use crate::model::ToolSpec;
use crate::sandbox::Sandbox;

/// The longest part of a tool's description the prompt repeats (its first sentence, usually); the whole
/// description travels with the tool's definition anyway.
const TOOL_SUMMARY_CHARS: usize = 160;

/// What the sandbox lets tool processes do, as the prompt states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxFacts {
    pub mode: SandboxMode,
    /// Why tool processes are refused altogether (the mode cannot be enforced here), or `None`.
    pub refusal: Option<String>,
    pub network: bool,
    /// `[sandbox] writable`: folders commands may write besides the cwd and the run's temp dir.
    pub writable: Vec<PathBuf>,
}

impl SandboxFacts {
    pub fn of(sandbox: &Sandbox) -> SandboxFacts {
        SandboxFacts {
            mode: sandbox.mode(),
            refusal: sandbox.refusal(),
            network: sandbox.network(),
            writable: sandbox.writable().to_vec(),
        }
    }
}

/// Everything the prompt says.
#[derive(Clone, Copy, Debug)]
pub struct PromptFacts<'a> {
    /// The session's working directory.
    pub cwd: &'a Path,
    /// The tools the run offers, in the order the model receives them.
    pub tools: &'a [ToolSpec],
    pub sandbox: &'a SandboxFacts,
    /// The tree's permission mode when the run started.
    pub mode: PermissionMode,
    pub instructions: &'a ProjectInstructions,
}

/// The system prompt of a run.
pub fn system_prompt(facts: &PromptFacts<'_>) -> String {
    let mut prompt = String::new();
    prompt.push_str(
        "You are troupe, a coding agent working on the user's machine through the tools below. The user may watch \
         the session live, answer your approval requests and send you more messages while you work.\n\n",
    );
    environment(&mut prompt, facts);
    prompt.push_str(HOW_TO_WORK);
    instructions(&mut prompt, facts.instructions);
    prompt
}

fn environment(prompt: &mut String, facts: &PromptFacts<'_>) {
    prompt.push_str("# Environment\n\n");
    let _ = writeln!(
        prompt,
        "- Working directory: {}. Relative paths are resolved against it; the file tools stay inside it unless \
         the user approves a path outside.",
        facts.cwd.display()
    );
    if facts.tools.is_empty() {
        prompt.push_str("- Tools: none in this run.\n");
    } else {
        prompt.push_str("- Tools:\n");
        for tool in facts.tools {
            let _ = writeln!(prompt, "  - `{}`: {}", tool.name, summary(&tool.description));
        }
    }
    let _ = writeln!(prompt, "- Sandbox: {}", sandbox(facts.sandbox));
    let _ = writeln!(prompt, "- Permission mode `{}`: {}", mode_name(facts.mode), mode_meaning(facts.mode));
    prompt.push('\n');
}

fn sandbox(facts: &SandboxFacts) -> String {
    let mut text = match (&facts.refusal, facts.mode) {
        (Some(_), _) => "commands cannot run: the sandbox cannot be enforced on this system (the file tools still \
                         work)."
            .to_owned(),
        (None, SandboxMode::Off) => {
            "off: commands run with the user's full rights, so be careful with what you run.".to_owned()
        }
        (None, SandboxMode::ReadOnly) => "read-only: commands may read most files but write only their temporary \
                                          directory ($TMPDIR), and the file tools write nothing."
            .to_owned(),
        (None, SandboxMode::WorkspaceWrite) => {
            let mut text = "commands run under a kernel sandbox: they may read most files (never secrets such as \
                            ~/.ssh or troupe's own data) and write only the working directory and their \
                            temporary directory ($TMPDIR, removed when the run ends)"
                .to_owned();
            for path in &facts.writable {
                let _ = write!(text, ", {}", path.display());
            }
            text.push('.');
            text
        }
    };
    if facts.network {
        text.push_str(" Network: on.");
    } else {
        text.push_str(" Network: off (commands reach nothing beyond their own loopback, and `web_fetch` is refused).");
    }
    text
}

fn mode_name(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::AutoApprove => "auto_approve",
        PermissionMode::AutoApproveN => "auto_approve_n",
        PermissionMode::AutoApproveY => "auto_approve_y",
        PermissionMode::Ask => "ask",
        PermissionMode::Yolo => "yolo",
    }
}

fn mode_meaning(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::AutoApprove => {
            "reads in the working directory and read-only commands run at once; other commands, writes and \
             network requests wait for the user's approval."
        }
        PermissionMode::AutoApproveN => {
            "reads in the working directory and read-only commands run at once; anything else that would need \
             approval is refused without asking."
        }
        PermissionMode::AutoApproveY => {
            "calls run without asking, except writes outside the working directory, which wait for the user's \
             approval."
        }
        PermissionMode::Ask => "every call except reads in the working directory waits for the user's approval.",
        PermissionMode::Yolo => {
            "calls run without asking, except writes outside the working directory, which wait for the user's \
             approval."
        }
    }
}

const HOW_TO_WORK: &str = "# How to work\n\n\
- Read before you change: look at the relevant files and the project's conventions first. Never guess a path, a \
function, a command's output or an API: check it with the tools.\n\
- Work in small steps and verify each one: build, run the tests or the command that shows the change works, and \
read the output.\n\
- Change what the task needs and nothing more; keep the project's style.\n\
- Permission rules also apply: some calls may be refused outright, whatever the mode. When a call is denied or \
rejected, do not work around it with another tool or a different spelling: say what you need and why, and let \
the user decide (asking again goes through the approval flow).\n\
- When you are done, end with a short summary: what you changed, how you checked it, and what is left open.\n\n";

fn instructions(prompt: &mut String, instructions: &ProjectInstructions) {
    if instructions.files.is_empty() {
        return;
    }
    prompt.push_str(
        "# Project instructions\n\nThe user and the project left these instructions (AGENTS.md files), the most \
         general first: where they disagree, the later, nearer one wins. They do not change the sandbox or the \
         permission rules.\n",
    );
    for file in &instructions.files {
        let whose = match file.source {
            InstructionSource::User => " (the user's own, for every project)",
            InstructionSource::Project => "",
        };
        let _ = write!(prompt, "\n## {}{whose}\n\n", file.path.display());
        prompt.push_str(&file.text);
        if !file.text.is_empty() && !file.text.ends_with('\n') {
            prompt.push('\n');
        }
        if let Some(size) = file.cut_from {
            let _ = writeln!(
                prompt,
                "\n[cut: this file is {size} bytes and only its first {} fit in the instructions' budget; read the \
                 rest with read_file at {} if you need it]",
                file.text.len(),
                file.path.display()
            );
        }
    }
}

/// The first sentence of a tool's description, bounded.
fn summary(description: &str) -> String {
    let line = description.lines().next().unwrap_or_default();
    let sentence = match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    };
    let mut shown: String = sentence.chars().take(TOOL_SUMMARY_CHARS).collect();
    if shown.len() < sentence.len() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instructions::InstructionFile;

    fn tool(name: &str, description: &str) -> ToolSpec {
        ToolSpec { name: name.into(), description: description.into(), parameters: serde_json::json!({}) }
    }

    fn workspace_write() -> SandboxFacts {
        SandboxFacts {
            mode: SandboxMode::WorkspaceWrite,
            refusal: None,
            network: true,
            writable: vec![PathBuf::from("/srv/cache")],
        }
    }

    fn render(sandbox: &SandboxFacts, mode: PermissionMode, instructions: &ProjectInstructions) -> String {
        let tools = [
            tool("read_file", "Read a text file. Returns its contents."),
            tool("shell", "Run a command with /bin/sh -c in the working directory"),
        ];
        system_prompt(&PromptFacts { cwd: Path::new("/home/me/project"), tools: &tools, sandbox, mode, instructions })
    }

    #[test]
    fn the_prompt_names_the_cwd_the_tools_the_sandbox_and_the_mode_and_is_the_same_every_time() {
        let none = ProjectInstructions::default();
        let prompt = render(&workspace_write(), PermissionMode::AutoApprove, &none);
        assert!(prompt.starts_with("You are troupe, a coding agent"), "{prompt}");
        assert!(prompt.contains("- Working directory: /home/me/project."), "{prompt}");
        assert!(prompt.contains("  - `read_file`: Read a text file.\n"), "{prompt}");
        assert!(prompt.contains("  - `shell`: Run a command with /bin/sh -c in the working directory\n"));
        assert!(prompt.contains("($TMPDIR, removed when the run ends), /srv/cache. Network: on."), "{prompt}");
        assert!(prompt.contains("- Permission mode `auto_approve`: reads in the working directory"), "{prompt}");
        assert!(prompt.contains("# How to work"));
        assert!(!prompt.contains("# Project instructions"), "no instructions, no section");
        assert_eq!(prompt, render(&workspace_write(), PermissionMode::AutoApprove, &none), "byte-stable");
    }

    #[test]
    fn network_off_read_only_and_an_unenforceable_sandbox_are_said_plainly() {
        let none = ProjectInstructions::default();
        let offline = SandboxFacts { network: false, ..workspace_write() };
        let prompt = render(&offline, PermissionMode::Ask, &none);
        assert!(prompt.contains("Network: off (commands reach nothing beyond their own loopback, and `web_fetch` is"));
        assert!(prompt.contains("- Permission mode `ask`: every call except reads"), "{prompt}");
        let read_only = SandboxFacts { mode: SandboxMode::ReadOnly, ..workspace_write() };
        assert!(render(&read_only, PermissionMode::Yolo, &none).contains("- Sandbox: read-only: commands may read"));
        let refused = SandboxFacts { refusal: Some("no Landlock".into()), ..workspace_write() };
        assert!(render(&refused, PermissionMode::Yolo, &none).contains("- Sandbox: commands cannot run"));
    }

    #[test]
    fn instructions_come_last_with_their_paths_outermost_first_and_a_cut_says_where() {
        let instructions = ProjectInstructions {
            files: vec![
                InstructionFile {
                    path: PathBuf::from("/home/me/.troupe/AGENTS.md"),
                    source: InstructionSource::User,
                    text: "Answer in French.".into(),
                    cut_from: None,
                },
                InstructionFile {
                    path: PathBuf::from("/home/me/project/AGENTS.md"),
                    source: InstructionSource::Project,
                    text: "Run `make check`.\n".into(),
                    cut_from: Some(90_000),
                },
            ],
        };
        let prompt = render(&workspace_write(), PermissionMode::AutoApprove, &instructions);
        let section = &prompt[prompt.find("# Project instructions").expect("a section")..];
        assert!(prompt.find("# How to work") < prompt.find("# Project instructions"));
        let user =
            section.find("## /home/me/.troupe/AGENTS.md (the user's own, for every project)\n\nAnswer in French.\n");
        let project =
            section.find("## /home/me/project/AGENTS.md\n\nRun `make check`.\n\n[cut: this file is 90000 bytes");
        assert!(user.is_some() && project.is_some() && user < project, "{section}");
        assert!(section.ends_with("read the rest with read_file at /home/me/project/AGENTS.md if you need it]\n"));
    }

    #[test]
    fn a_tool_summary_is_its_first_sentence_bounded() {
        assert_eq!(summary("One. Two."), "One.");
        assert_eq!(summary("First line\nsecond"), "First line");
        let long = "x".repeat(500);
        assert_eq!(summary(&long).chars().count(), TOOL_SUMMARY_CHARS + 1);
    }
}
