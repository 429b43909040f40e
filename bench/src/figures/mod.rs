//! One module per figure of the issue. Each returns its table and fails (an error) when a correctness check
//! fails; timing targets are judged in the table, not here.

mod cluster;
mod cold_load;
mod durable;
mod fanout;
mod first;
mod history;
mod pipeline;
mod provider_turns;
mod rtt;
mod runs;
mod sandbox;
mod scale;
mod stream;
mod turn;

use crate::Ctx;
use crate::report::Table;

pub async fn run(figure: &str, ctx: &Ctx) -> anyhow::Result<Table> {
    match figure {
        "rtt" => rtt::run(ctx).await,
        "pipeline" => pipeline::run(ctx).await,
        "first" => first::run(ctx).await,
        "fanout" => fanout::run(ctx).await,
        "durable" => durable::run(ctx).await,
        "load" => cold_load::run(ctx).await,
        "scale" => scale::run(ctx).await,
        "runs" => runs::run(ctx).await,
        "history" => history::run(ctx).await,
        "turn" => turn::run(ctx).await,
        "stream" => stream::run(ctx).await,
        "provider" => provider_turns::run(ctx).await,
        "cluster" => cluster::run(ctx).await,
        "sandbox" => sandbox::run(ctx).await,
        other => anyhow::bail!("unknown figure {other}"),
    }
}

/// The `session.get` request the RPC figures send, with a fixed-width id so every frame has the same size.
pub fn session_get_frame(id: u64, session_id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"session.get","params":{{"session_id":"{session_id}"}}}}"#)
}

/// A `session.rename` request setting [`crate::harness::bench_title`]`(prefix, index)`, with a fixed-width id, so
/// every frame of one prefix has the same size.
pub fn session_rename_frame(id: u64, session_id: &str, prefix: &str, index: usize) -> anyhow::Result<String> {
    use troupe_protocol::types::session::{SessionRenameParams, TitleChange};
    let params = SessionRenameParams {
        session_id: session_id.to_owned(),
        client_rename_id: format!("{prefix}-{index:07}"),
        change: TitleChange::Set { title: crate::harness::bench_title(prefix, index) },
    };
    let params = serde_json::to_string(&params)?;
    Ok(format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"session.rename","params":{params}}}"#))
}

/// Ids start here so that they all have 7 digits.
pub const ID_BASE: u64 = 1_000_000;
