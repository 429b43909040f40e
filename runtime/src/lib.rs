//! troupe-runtime: the parts of the engine that need no actors.
//!
//! - [`blocking`]: the debug assertion that no blocking file function runs on an actor's (async) thread.
//! - [`data_dir`]: where everything durable lives, and the private directories inside it.
//! - [`config`]: `config.toml`, read once at start.
//! - [`token`]: the bearer token that authenticates every WebSocket upgrade.
//! - [`event_log`]: a session's durable append-only log, `events.jsonl`.
//! - [`meta_cache`]: `meta.json`, a cache of a session's metadata so that listing does not read every log.
//! - [`catalog`]: the built-in providers, models and agents, and selection checks against a snapshot.
//! - [`runnable`]: whether a model, or a selection's whole fallback chain, can run now.
//! - [`clock`]: timestamps and identifiers, so that every event is stamped the same way.
//! - [`session_state`]: the projection of a session's events into its metadata, runs and history.
//! - [`approval_book`]: a session's approval records, answers by client id, and its tree's grants.
//! - [`run_ledger`]: the active run, its steering lane, runs by client id, and fallback stickiness.
//! - [`transcript`]: the model history, with tool-emitted messages materialized as the reference says.
//! - [`usage_book`]: a session's usage per (agent, model), spent and visible, summed exactly.
//! - [`compaction`]: the token estimate, the summary request and the checkpoint message of a compaction.
//! - [`model`]: streaming model providers (OpenAI-compatible, Anthropic, offline), error policy, pricing; async.
//! - [`provider_store`]: `providers.json`, provider connections and credentials (0600, replaced atomically).
//! - [`provider_share`]: the port through which a cluster's nodes share provider connections (filled by `cluster/`).
//! - [`redact`]: masking the daemon token and provider keys out of tool output (same length), whole or streamed.
//! - [`policy`]: the permission policy: hard denies, config and agent rules, built-ins, permission modes, the
//!   `auto_approve` classifier and operation fingerprints. Pure.
//! - [`sandbox`]: the kernel's bounds on tool processes (Landlock, network namespace, process lifetime) and the
//!   denied paths by file identity for in-process tools.
//! - [`input_files`]: the images and PDFs a client attaches to an input, checked and stored as artifacts.
//! - [`artifact_names`]: the artifacts a session's log names; [`artifact_collection`]: removing those none names.
//! - [`instructions`]: the `AGENTS.md` files of the user and of the session's repository, gathered for a run.
//! - [`system_prompt`]: a run's system prompt: who the agent is, its tools, sandbox and mode, how to work, and the
//!   project's instructions. Pure.
//! - [`skills`]: `SKILL.md` discovery from the project's and the user's skills directories, and rendering.
//! - [`changes`]: what file tools replaced (content-addressed blobs and a journal per session), diffs, and the
//!   rules of undo.
//! - [`stored_output`]: whole outputs of loud tool calls (`output_ref`), written durably and read back.
//! - [`mcp`]: MCP servers as tools: each `[mcp_servers]` server supervised (stdio ones sandboxed like tool processes),
//!   its tools offered as `mcp__<server>__<tool>` and called through the `rmcp` SDK.
//! - [`tools`]: the tools a model calls in a run (shell, file read/write/edit/list, search, web fetch), their permission
//!   requests and path confinement to the session's cwd. Unlike the rest, these are async and run processes.
//!
//! Everything here is synchronous and blocking: the actors call into it from `spawn_blocking` (or a writer thread)
//! whenever it touches the disk while serving; [`blocking::assert_may_block`] catches a call on an actor's thread in
//! debug builds. Errors are [`error::RuntimeError`], whose messages carry paths and operating-system
//! errors but never file contents or secrets.

pub mod approval_book;
pub mod artifact_collection;
pub mod artifact_names;
pub mod blocking;
pub mod branch;
pub mod catalog;
pub mod changes;
pub mod clock;
pub mod compaction;
pub mod config;
pub mod data_dir;
pub mod error;
pub mod event_log;
pub mod fork;
pub mod goal_state;
pub mod input_files;
pub mod instructions;
pub mod live_output_share;
pub mod mcp;
pub mod meta_cache;
pub mod metrics;
pub mod model;
pub mod policy;
pub mod presence_share;
pub mod producer_book;
pub mod provider_share;
pub mod provider_store;
pub mod recent;
pub mod redact;
pub mod regular_file;
pub mod run_ledger;
pub mod runnable;
pub mod sandbox;
pub mod session_directory;
pub mod session_index;
pub mod session_state;
pub mod skills;
pub mod stored_output;
pub mod system_prompt;
pub mod title;
pub mod token;
pub mod tool_stdin;
pub mod tools;
pub mod transcript;
pub mod usage_book;

pub use error::RuntimeError;
