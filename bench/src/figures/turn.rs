//! Figure 9: the one-turn text run of issue 15. A run whose only model turn answers 200 bytes of text in four
//! deltas, against `local/scripted` with zero model latency, on a child daemon (as figure 7), a fresh session per
//! run. Measured on the shared-client subscriber that sends `run.start`: the wall time to holding `run_completed`,
//! and the tail after the model's last byte, which issue 15 wants to be one durable batch.
//!
//! How many durable batches a run takes is not in its events (they carry their `seq`, not their batch): the figure
//! reads the daemon's count of `fdatasync`s from `GET /metrics` before and after each run.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use serde_json::json;
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::RunStartParams;

use crate::Ctx;
use crate::harness::{
    ChildDaemon, bench_tmp_root, connect, connect_script, metric_value, ms, next_live_event, raw_fdatasync_latency,
    scrape_metrics, selection, subscribed_session, within,
};
use crate::report::{Row, Table, Target, median_p99};

/// Four words of 49 bytes and a space each: 200 bytes, streamed by `local/scripted` as four deltas.
fn answer() -> String {
    (0..4).map(|word| format!("{}{} ", word, "x".repeat(48))).collect()
}

/// When the subscriber held each event of interest of one run.
struct Timeline {
    last_delta: Instant,
    committed: Instant,
    completed: Instant,
    deltas: usize,
    /// The kinds of the events that arrived after the tail started, in order, `run_completed` included.
    after_tail_start: Vec<&'static str>,
}

/// Reads `session_id`'s live events until its run completes. Other sessions' events cannot arrive: earlier runs
/// completed before their `run_completed` was read, and nothing else writes to them.
async fn timeline(deliveries: &mut Deliveries, session_id: &str) -> anyhow::Result<Timeline> {
    let (mut last_delta, mut committed, mut deltas) = (None, None, 0);
    // Arrival order of every event of the run, to count those after the tail's start.
    let mut arrivals: Vec<(Instant, &'static str)> = Vec::new();
    loop {
        let (at, event) = next_live_event(deliveries, session_id).await?;
        arrivals.push((at, event.payload.kind().unwrap_or("unknown")));
        match &event.payload {
            EventPayload::TextDelta { .. } => {
                last_delta = Some(at);
                deltas += 1;
            }
            EventPayload::ModelTurnCommitted { .. } => committed = Some(at),
            EventPayload::RunCompleted { .. } => {
                let (Some(last_delta), Some(committed)) = (last_delta, committed) else {
                    bail!("run_completed came before any text_delta or model_turn_committed")
                };
                let tail_start = last_delta.max(committed);
                let after_tail_start =
                    arrivals.iter().filter(|(arrival, _)| *arrival > tail_start).map(|(_, kind)| *kind).collect();
                return Ok(Timeline { last_delta, committed, completed: at, deltas, after_tail_start });
            }
            EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. } => {
                bail!("the run ended with {:?}", event.payload.kind())
            }
            _ => {}
        }
    }
}

/// One run in a fresh session: returns when `run.start` was sent and the run's timeline.
async fn one_run(
    client: &Client,
    deliveries: &mut Deliveries,
    cwd: &std::path::Path,
) -> anyhow::Result<(Instant, Timeline)> {
    // The subscribe reply's replay (the session's creation) is read here, outside the timed part.
    let session = subscribed_session(client, deliveries, cwd).await?;
    let params = RunStartParams {
        session_id: session.session_id.clone(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: selection("local/scripted"),
        input: "answer in text".to_owned(),
        reset_fallback: false,
        attachments: Vec::new(),
    };
    let started = Instant::now();
    // The reply and the events race: read the events while the call waits for its reply.
    let (reply, timeline) = futures::join!(
        within("run.start", client.call::<method::RunStart>(params)),
        within("run_completed", timeline(deliveries, &session.session_id))
    );
    reply??;
    Ok((started, timeline??))
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let runs_per_round = ctx.size(50, 3);
    let fsyncs_per_round = ctx.size(60, 5);
    let dir = tempfile::tempdir_in(bench_tmp_root())?;
    let cwd = tempfile::tempdir_in(bench_tmp_root())?;
    let child = ChildDaemon::spawn(&ctx.program, dir.path(), None)?;
    let (client, mut deliveries) = connect(&child.url, &child.token).await?;
    let text = answer();
    connect_script(&client, dir.path(), &json!({ "turns": [{ "text": text }] })).await?;

    let (mut walls, mut tails, mut delta_tails, mut events_after) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut syncs_per_run = Vec::new();
    // The events after the tail's start in the first run, to name them in the note.
    let mut tail_kinds: Option<Vec<&'static str>> = None;
    let mut fsync = Vec::new();
    for _ in 0..ctx.rounds {
        for _ in 0..runs_per_round {
            let syncs_before = fsync_count(&child)?;
            let (started, timeline) =
                tokio::time::timeout(Duration::from_secs(120), one_run(&client, &mut deliveries, cwd.path())).await??;
            // The session's creation was durable before the clock started, so the difference is the run's.
            syncs_per_run.push((fsync_count(&child)? - syncs_before) as f64);
            ensure!(timeline.deltas == 4, "{} text deltas, expected 4", timeline.deltas);
            walls.push(ms(timeline.completed.duration_since(started)));
            tails.push(ms(timeline.completed.duration_since(timeline.last_delta.max(timeline.committed))));
            delta_tails.push(ms(timeline.completed.duration_since(timeline.last_delta)));
            events_after.push(timeline.after_tail_start.len() as f64);
            tail_kinds.get_or_insert(timeline.after_tail_start);
        }
        // The baseline round by round, right after the runs, so that both see the same load on a shared disk.
        fsync.extend(raw_fdatasync_latency(dir.path(), &[b'x'; 400], fsyncs_per_round, Duration::ZERO)?);
    }
    drop(child);

    let (fsync_median, fsync_p99) = median_p99(&fsync);
    let (wall, wall_p99) = median_p99(&walls);
    let (tail, tail_p99) = median_p99(&tails);
    let (delta_tail, delta_tail_p99) = median_p99(&delta_tails);
    let (after, after_p99) = median_p99(&events_after);
    let (syncs, syncs_p99) = median_p99(&syncs_per_run);
    Ok(Table {
        figure: "9. One-turn text run: run.start → run_completed, `local/scripted`, zero model latency".into(),
        note: format!(
            "Child daemon ({}); each run in a fresh session (created and subscribed before the clock starts), one \
             turn answering {} bytes of text in 4 deltas, {runs_per_round} runs per round, {} rounds, measured on \
             the shared `Client` that sends `run.start`. Tail: from holding the later of the last `text_delta` and \
             `model_turn_committed` to holding `run_completed`; the issue's tail, from the model's last byte to the \
             terminal event, is read as last `text_delta` held → `run_completed` held. The events row counts what \
             arrives after the tail starts (first run: {}); `fdatasync`s per run are read from the daemon's \
             `GET /metrics` (`troupe_event_log_fsync_duration_seconds_count`) before and after each run. Baseline: one raw `write` + `fdatasync` of a 400-byte \
             line in the same directory, {fsyncs_per_round} after each round's runs. Targets: issue 15's absolute budgets for this machine.",
            ctx.program.describe(),
            text.len(),
            ctx.rounds,
            tail_kinds.unwrap_or_default().join(", ")
        ),
        rows: vec![
            Row::new("raw write+fdatasync of one line", "ms", fsync_median, fsync_p99),
            Row::new("wall: run.start sent → run_completed held", "ms", wall, wall_p99)
                .cost(fsync_median)
                .target(Target::MedianAtMost(1.5)),
            Row::new("tail: last text_delta → run_completed", "ms", delta_tail, delta_tail_p99)
                .cost(fsync_median)
                .target(Target::MedianAtMost(0.5)),
            Row::new("model_turn_committed → run_completed", "ms", tail, tail_p99).cost(fsync_median),
            Row::new("events held after the tail starts (run_completed included)", "events", after, after_p99),
            Row::new("fdatasyncs per run (session log, /metrics)", "syncs", syncs, syncs_p99),
        ],
    })
}

/// The daemon's count of session-log `fdatasync`s so far.
fn fsync_count(daemon: &ChildDaemon) -> anyhow::Result<u64> {
    Ok(metric_value(&scrape_metrics(daemon)?, "troupe_event_log_fsync_duration_seconds_count")? as u64)
}
