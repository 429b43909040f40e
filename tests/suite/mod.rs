//! Test areas, one file each, sharing `support`.

mod approvals;
mod auth;
mod big_history;
mod boundary_edges;
mod cli;
mod cli_approval_text;
mod cli_big_session;
mod cli_connection;
mod cli_core;
mod cli_history;
mod cli_inspect;
mod cli_polish;
mod cli_run_control;
mod cli_selection_refusals;
mod cli_status;
mod cli_support;
mod cli_token_source;
mod cluster;
mod cluster_console;
mod cluster_follow;
mod cluster_presence;
mod cluster_providers;
mod cluster_three_nodes;
mod compaction;
mod compaction_attacks;
mod console_open;
mod daemon_hygiene;
mod data_dir_layout;
mod delegation;
mod delegation_attacks;
mod durability;
mod envelope;
mod event_order;
mod examples;
mod fallback_stickiness;
mod goal_blocked;
mod goals;
mod growth;
mod history;
mod history_attacks;
mod internal_agent_failures;
mod limits;
mod logs_status;
mod metrics;
mod metrics_support;
mod model_switches;
mod permission_mode_default;
mod plugin_lifetime;
mod plugin_messages;
mod plugins;
mod presence;
mod producers;
mod providers;
mod proxy;
mod proxy_console;
mod proxy_support;
mod raw_http;
mod replay_edges;
mod request_ids;
mod runs;
mod sandbox;
mod sandbox_data_dirs;
mod sandbox_modes;
mod session_admin;
mod session_faults;
mod sessions;
mod sigkill_trials;
mod skill_agents;
mod skills;
mod snapshots;
mod start_recovery;
mod steering;
mod subscriptions;
mod support;
mod terminal_support;
mod titles;
mod tool_isolation;
mod tool_messages;
mod tool_output;
mod tool_output_named;
mod tool_output_refs;
mod tool_stdin_bounds;
mod tui;
mod unix_socket;
mod unwritable_output;
mod usage;
mod web_console;

/// Finding processes by command line, shared with the runtime's sandbox tests.
#[path = "../../runtime/tests/sandbox_support/processes.rs"]
mod processes;

/// Skipping a test this machine cannot run (or failing it under `TROUPE_REQUIRE_SANDBOX=1`), shared with the
/// runtime's sandbox tests.
#[path = "../../runtime/tests/sandbox_support/unavailable.rs"]
mod unavailable;
