//! Wire types: params, results, notifications and shared shapes of protocol 20. Params reject unknown fields;
//! results and notifications accept them, so a newer server's additive fields do not break an older client.

pub mod approval;
pub mod attachment;
pub mod changes;
pub mod common;
pub mod daemon;
pub mod events;
pub mod goal;
pub mod mcp;
pub mod origin;
pub mod plugin;
pub mod presence;
pub mod producers;
pub mod provider;
pub mod run;
pub mod runtime;
pub mod session;
pub mod skills;
pub mod tool_output;
pub mod usage;
