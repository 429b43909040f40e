//! Figure 11's CPU rows: what one run costs each process of a cluster, so that a node's capacity can be
//! extrapolated (runs per CPU-second). The daemons are child processes here (the figure's latency rows use in-process
//! daemons, whose threads share the bench's process and cannot be told apart): `troupe serve` with `[cluster]` in
//! its data dir's config.toml. For the file store, one daemon with two clients; in a cluster, the session is hosted
//! by node a and followed by a client of node b, through JetStream, and the NATS servers' CPU is counted too.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use troupe_protocol::client::Deliveries;
use troupe_protocol::types::events::EventPayload;

use crate::Ctx;
use crate::harness::{
    ChildDaemon, bench_tmp_root, connect, create_session, ms, next_live_event, process_cpu_time, start_echo_run, within,
};

/// CPU time per one-turn run, in ms, one sample per round.
#[derive(Default)]
pub(super) struct CpuPerRun {
    /// The daemon (file store) or node that hosts the session and executes the runs.
    pub host_ms: Vec<f64>,
    /// The node whose client follows the session (a cluster only).
    pub follower_ms: Vec<f64>,
    /// Every NATS server together (a cluster only).
    pub nats_ms: Vec<f64>,
}

/// Where the runs go: the file store (one daemon), or a cluster on the NATS servers at `urls`, whose processes are
/// `nats_pids`.
pub(super) enum Setup<'a> {
    FileStore,
    Cluster { urls: &'a str, replicas: usize, nats_pids: Vec<u32> },
}

pub(super) async fn measure(ctx: &Ctx, setup: Setup<'_>) -> anyhow::Result<CpuPerRun> {
    let dirs = tempfile::tempdir_in(bench_tmp_root())?;
    let (host, follower) = match &setup {
        Setup::FileStore => (spawn(ctx, &dirs.path().join("host"), None)?, None),
        Setup::Cluster { urls, replicas, .. } => (
            spawn(ctx, &dirs.path().join("a"), Some((urls, "cpu-a", *replicas)))?,
            Some(spawn(ctx, &dirs.path().join("b"), Some((urls, "cpu-b", *replicas)))?),
        ),
    };
    let nats_pids = match &setup {
        Setup::FileStore => Vec::new(),
        Setup::Cluster { nats_pids, .. } => nats_pids.clone(),
    };
    let follower_node = follower.as_ref().unwrap_or(&host);
    let (client, mut deliveries) = connect(&host.url, &host.token).await?;
    let (watcher, mut watched) = connect(&follower_node.url, &follower_node.token).await?;
    let runs = ctx.size(100, 3);
    let mut samples = CpuPerRun::default();
    for round in 0..ctx.rounds {
        let session_id = create_session(&client, dirs.path()).await?.session_id;
        within("subscribe", client.subscribe(&session_id, None)).await??;
        within("subscribe", watcher.subscribe(&session_id, None)).await??;
        let host_before = host.cpu_time()?;
        let follower_before = follower.as_ref().map(ChildDaemon::cpu_time).transpose()?;
        let nats_before = nats_cpu(&nats_pids)?;
        for index in 0..runs {
            let run_id = start_echo_run(&client, &session_id, &format!("round {round}, run {index}")).await?;
            until_completed(&mut deliveries, &session_id, &run_id).await?;
            until_completed(&mut watched, &session_id, &run_id).await?;
        }
        let per_run = |spent: Duration| ms(spent) / runs as f64;
        samples.host_ms.push(per_run(host.cpu_time()? - host_before));
        if let (Some(node), Some(before)) = (&follower, follower_before) {
            samples.follower_ms.push(per_run(node.cpu_time()? - before));
            samples.nats_ms.push(per_run(nats_cpu(&nats_pids)? - nats_before));
        }
    }
    Ok(samples)
}

/// `troupe serve` in `data_dir`, a node of the cluster `(urls, name, replicas)` when one is given.
fn spawn(ctx: &Ctx, data_dir: &Path, cluster: Option<(&str, &str, usize)>) -> anyhow::Result<ChildDaemon> {
    std::fs::create_dir_all(data_dir)?;
    let mut config = "[titles]\nauto = false\n".to_owned();
    if let Some((urls, name, replicas)) = cluster {
        config.push_str(&format!("[cluster]\nnats = \"{urls}\"\nnode = \"{name}\"\nreplicas = {replicas}\n"));
    }
    std::fs::write(data_dir.join("config.toml"), config)?;
    ChildDaemon::spawn(&ctx.program, data_dir, None).with_context(|| format!("start {}", data_dir.display()))
}

fn nats_cpu(pids: &[u32]) -> anyhow::Result<Duration> {
    pids.iter().map(|pid| process_cpu_time(*pid)).sum()
}

/// Reads `deliveries` until `run_id` completed; any other end of it fails the figure.
async fn until_completed(deliveries: &mut Deliveries, session_id: &str, run_id: &str) -> anyhow::Result<()> {
    loop {
        let (_, event) = within("run_completed", next_live_event(deliveries, session_id)).await??;
        if event.run_id.as_deref() != Some(run_id) {
            continue;
        }
        match event.payload {
            EventPayload::RunCompleted { .. } => return Ok(()),
            EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. } => {
                ensure!(false, "the run ended {:?}", event.payload.kind());
            }
            _ => {}
        }
    }
}
