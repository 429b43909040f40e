//! Figure 11: the cluster on NATS JetStream (issue 26) against the file store, in the same run. Three setups, each
//! with two in-process daemons: the file store (two clients on one daemon), a cluster on one nats-server (R1), and
//! a cluster on three routed nats-servers (R3); in a cluster the session is hosted by node a and followed from node
//! b. For each: one rename at a time (append to acknowledgement), pipelined renames (events/s), the time from a
//! rename's send to its event at the other client (on node b in a cluster: through JetStream), and a one-turn
//! `local/echo` run from `run.start` to holding `run_completed`. Target: the run within 2× of the file store's.
//! Then, with the daemons as child processes (`cpu.rs`), the CPU time one such run costs each process.

mod cpu;

use std::time::Instant;

use anyhow::ensure;
use troupe::daemon::ClusterFlags;
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::session::{SessionRenameParams, TitleChange};
use troupe_test_support::{NatsCluster, NatsServer};

use crate::Ctx;
use crate::harness::{InProcessDaemon, bench_title, create_session, ms, next_live_event, rename_pipelined, within};
use crate::report::{Row, Table, Target, median_p99, slowest};

const WINDOW: usize = 200;
/// Issue 26: a one-turn text run on a cluster within 2× of the file store.
const RUN_RATIO: f64 = 2.0;

/// One setup's samples.
#[derive(Default)]
struct Samples {
    append_ms: Vec<f64>,
    rates: Vec<f64>,
    follow_ms: Vec<f64>,
    run_ms: Vec<f64>,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let program = troupe_test_support::nats::nats_server_program();
    if std::process::Command::new(&program).arg("--version").output().is_err() {
        return Ok(Table {
            figure: "11. The cluster on NATS JetStream".into(),
            note: format!(
                "skipped: {} is not installed (scripts/test installs Debian's nats-server)",
                program.display()
            ),
            rows: Vec::new(),
        });
    }
    let file = {
        let daemon = InProcessDaemon::start(None)?;
        measure(ctx, &daemon, &daemon).await?
    };
    let file_cpu = cpu::measure(ctx, cpu::Setup::FileStore).await?;
    let (r1, r1_cpu) = {
        let nats = NatsServer::start();
        let (a, b) = (node(&nats.url(), "a", 1)?, node(&nats.url(), "b", 1)?);
        let latency = measure(ctx, &a, &b).await?;
        drop((a, b));
        let setup = cpu::Setup::Cluster { urls: &nats.url(), replicas: 1, nats_pids: nats.pid().into_iter().collect() };
        (latency, cpu::measure(ctx, setup).await?)
    };
    let (r3, r3_cpu) = {
        let nats = NatsCluster::start(3);
        let (a, b) = (node(&nats.urls(), "a", 3)?, node(&nats.urls(), "b", 3)?);
        let latency = measure(ctx, &a, &b).await?;
        drop((a, b));
        let pids = nats.servers.iter().filter_map(NatsServer::pid).collect();
        (latency, cpu::measure(ctx, cpu::Setup::Cluster { urls: &nats.urls(), replicas: 3, nats_pids: pids }).await?)
    };
    let (file_append, _) = median_p99(&file.append_ms);
    let (file_rate, _) = median_p99(&file.rates);
    let (file_follow, _) = median_p99(&file.follow_ms);
    let (file_run, _) = median_p99(&file.run_ms);
    let mut rows = rows_of("file store", &file, None);
    for (name, samples) in [("cluster R1", &r1), ("cluster R3", &r3)] {
        rows.extend(rows_of(name, samples, Some((file_append, file_rate, file_follow, file_run))));
    }
    let (file_cpu_ms, file_cpu_p99) = median_p99(&file_cpu.host_ms);
    rows.push(Row::new("file store: CPU per one-turn run, the daemon", "ms", file_cpu_ms, file_cpu_p99));
    for (name, samples) in [("cluster R1", &r1_cpu), ("cluster R3", &r3_cpu)] {
        rows.extend(cpu_rows(name, samples, file_cpu_ms));
    }
    Ok(Table {
        figure: "11. The cluster on NATS JetStream against the file store".into(),
        note: format!(
            "In-process daemons; {} rounds, each on a fresh session: {} renames one at a time, {} pipelined ({WINDOW} \
             in flight), {} renames timed to the other client's notification (file store: a second client of the \
             same daemon; cluster: a client of node b following node a's session from JetStream), and one \
             `local/echo` run. R1: one nats-server; R3: three routed nats-servers, the stream and buckets with three \
             replicas. Baseline: the file store's row. Target (issue 26): the run ≤ {RUN_RATIO}× the file store's. \
             CPU rows: child-process daemons (`troupe serve`), {} one-turn runs per round, each awaited by the \
             host's client and by the follower's (file store: a second client of the same daemon; cluster: a \
             client of node b); user + system time of each process over the round, divided by the runs. A node's \
             capacity is about 1000 / (its ms per run) runs per CPU-second.",
            ctx.rounds,
            ctx.size(200, 5),
            ctx.size(2_000, 50),
            ctx.size(200, 5),
            ctx.size(100, 3),
        ),
        rows,
    })
}

fn rows_of(name: &str, samples: &Samples, baseline: Option<(f64, f64, f64, f64)>) -> Vec<Row> {
    let (append, append_p99) = median_p99(&samples.append_ms);
    let (rate, _) = median_p99(&samples.rates);
    let (follow, follow_p99) = median_p99(&samples.follow_ms);
    let (run, run_p99) = median_p99(&samples.run_ms);
    let append_row = Row::new(format!("{name}: one rename, send to ack"), "ms", append, append_p99);
    let rate_row = Row::new(format!("{name}: pipelined renames"), "events/s", rate, slowest(&samples.rates));
    let follow_row = Row::new(format!("{name}: send to the other client's event"), "ms", follow, follow_p99);
    let run_row = Row::new(format!("{name}: one-turn run to run_completed"), "ms", run, run_p99);
    match baseline {
        None => vec![append_row, rate_row, follow_row, run_row],
        Some((append_base, rate_base, follow_base, run_base)) => vec![
            append_row.cost(append_base),
            rate_row.rate(rate_base),
            follow_row.cost(follow_base),
            run_row.cost(run_base).target(Target::RatioAtMost(RUN_RATIO)),
        ],
    }
}

/// A cluster's CPU rows: the hosting node's against the file store's daemon, the following node's and the NATS
/// servers'.
fn cpu_rows(name: &str, samples: &cpu::CpuPerRun, file_ms: f64) -> Vec<Row> {
    let (host, host_p99) = median_p99(&samples.host_ms);
    let (follower, follower_p99) = median_p99(&samples.follower_ms);
    let (nats, nats_p99) = median_p99(&samples.nats_ms);
    vec![
        Row::new(format!("{name}: CPU per one-turn run, hosting node"), "ms", host, host_p99).cost(file_ms),
        Row::new(format!("{name}: CPU per one-turn run, following node"), "ms", follower, follower_p99),
        Row::new(format!("{name}: CPU per one-turn run, NATS servers"), "ms", nats, nats_p99),
    ]
}

/// A cluster node on `urls` with `replicas`, in process.
fn node(urls: &str, name: &str, replicas: usize) -> anyhow::Result<InProcessDaemon> {
    let config = format!("[titles]\nauto = false\n[cluster]\nreplicas = {replicas}\n");
    InProcessDaemon::start_configured(
        &config,
        ClusterFlags { nats: Some(urls.to_owned()), node: Some(name.to_owned()) },
    )
}

async fn measure(ctx: &Ctx, host: &InProcessDaemon, other: &InProcessDaemon) -> anyhow::Result<Samples> {
    let (client, mut deliveries) = host.client().await?;
    let (follower, mut followed) = other.client().await?;
    let mut samples = Samples::default();
    for round in 0..ctx.rounds {
        let session_id = create_session(&client, host.path()).await?.session_id;
        for index in 0..ctx.size(200, 5) {
            let started = Instant::now();
            rename_seq(&client, &session_id, &format!("ack{round}"), index).await?;
            samples.append_ms.push(ms(started.elapsed()));
        }
        let count = ctx.size(2_000, 50);
        let started = Instant::now();
        within(
            "pipelined renames",
            rename_pipelined(&client, &session_id, &format!("pipe{round}"), count, WINDOW, |_| {}),
        )
        .await??;
        samples.rates.push(count as f64 / started.elapsed().as_secs_f64());

        within("subscribe", follower.subscribe(&session_id, None)).await??;
        drain_replay(&mut followed, &session_id).await?;
        for index in 0..ctx.size(200, 5) {
            let started = Instant::now();
            let seq = rename_seq(&client, &session_id, &format!("follow{round}"), index).await?;
            loop {
                let (at, event) = within("the followed event", next_live_event(&mut followed, &session_id)).await??;
                if event.seq == seq {
                    samples.follow_ms.push(ms(at - started));
                    break;
                }
            }
        }

        within("subscribe", client.subscribe(&session_id, None)).await??;
        drain_replay(&mut deliveries, &session_id).await?;
        let started = Instant::now();
        let run_id = crate::harness::start_echo_run(&client, &session_id, "hello").await?;
        loop {
            let (at, event) = within("run_completed", next_live_event(&mut deliveries, &session_id)).await??;
            if event.run_id.as_deref() == Some(run_id.as_str())
                && matches!(event.payload, EventPayload::RunCompleted { .. })
            {
                samples.run_ms.push(ms(at - started));
                break;
            }
        }
    }
    ensure!(!samples.run_ms.is_empty(), "no run was measured");
    Ok(samples)
}

/// A rename of `session_id`; the seq of its event.
async fn rename_seq(client: &Client, session_id: &str, prefix: &str, index: usize) -> anyhow::Result<u64> {
    let params = SessionRenameParams {
        session_id: session_id.to_owned(),
        client_rename_id: format!("{prefix}-{index}"),
        change: TitleChange::Set { title: bench_title(prefix, index) },
    };
    Ok(within("session.rename", client.call::<method::SessionRename>(params)).await??.session.last_event_seq)
}

/// Reads `session_id`'s replay until its end, so that what follows is live.
async fn drain_replay(deliveries: &mut Deliveries, session_id: &str) -> anyhow::Result<()> {
    within("replay end", async {
        loop {
            match deliveries.next().await {
                Some(troupe_protocol::client::ClientDelivery::ReplayEnd { session_id: ended, .. })
                    if ended == session_id =>
                {
                    return Ok(());
                }
                Some(_) => {}
                None => anyhow::bail!("the deliveries ended"),
            }
        }
    })
    .await?
}
