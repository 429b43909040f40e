//! Figure 5: cold load of a 100,000-event session. What a session actor does to load it (`event_log::open` with
//! the default tail, each event applied to a `Projector`, then `Projector::finish`) against plain `serde_json`
//! parsing of the same lines into `serde_json::Value`; for comparison, the whole-log load the daemon did before
//! (`event_log::load` + `SessionState::from_events`); and end to end, `session.resume` of a hibernated session
//! until its reply, with its projection snapshot (issue 15's target: ≤ 20 ms and ≤ 0.1× the full parse) and
//! without (the whole log scanned). Also what a snapshot costs: taking it on the actor, writing it off it.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_runtime::event_log::{self, SnapshotUse, snapshot};
use troupe_runtime::session_state::SessionState;

use crate::Ctx;
use crate::harness::{InProcessDaemon, create_session, ms, rename_pipelined, within};
use crate::report::{Row, Table, Target, median_p99};

const HIBERNATE_AFTER: Duration = Duration::from_millis(200);

/// Waits until the session's projection snapshot covers the whole log (`log_bytes`): written at hibernation, or
/// by a load that scanned past the previous one.
async fn wait_snapshot(session_dir: &Path, log_bytes: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshot::covered_len(session_dir) != Some(log_bytes) {
        ensure!(Instant::now() < deadline, "no snapshot covers the log ({:?})", snapshot::covered_len(session_dir));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// `session.resume` of the hibernated session, timed until its reply.
async fn timed_resume(client: &troupe_protocol::client::Client, session_id: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let resumed = within(
        "session.resume",
        client.call::<method::SessionResume>(SessionIdParams { session_id: session_id.into() }),
    )
    .await??;
    let elapsed = ms(started.elapsed());
    ensure!(resumed.session.session_id == session_id, "resumed another session");
    Ok(elapsed)
}

async fn wait_hibernated(daemon: &InProcessDaemon, session_id: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon.is_live(session_id) {
        ensure!(Instant::now() < deadline, "the session did not hibernate");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let events = ctx.size(100_000, 1_000);
    let daemon = InProcessDaemon::start(Some(HIBERNATE_AFTER))?;
    let (client, _deliveries) = daemon.client().await?;
    let session = create_session(&client, daemon.path()).await?;
    let session_id = session.session_id.clone();
    let generated = Instant::now();
    tokio::time::timeout(
        Duration::from_secs(600),
        rename_pipelined(&client, &session_id, "load", events - 1, 200, |_| {}),
    )
    .await??;
    let generated = generated.elapsed();
    wait_hibernated(&daemon, &session_id).await?;
    let session_dir = daemon.path().join("sessions").join(&session_id);
    let log_bytes = std::fs::metadata(event_log::log_path(&session_dir))?.len();
    // The hibernation wrote the snapshot the resumes start from.
    wait_snapshot(&session_dir, log_bytes).await?;
    let tail_limit = troupe_runtime::config::Limits::default().session_tail_bytes;

    let (mut load_samples, mut open_only_samples, mut parse_samples, mut resume_samples) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut whole_samples = Vec::new();
    let (mut projected_samples, mut resume_full_samples, mut take_samples, mut write_samples) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut snapshot_bytes = 0u64;
    let (mut tail_events, mut tail_bytes) = (0usize, 0usize);
    for _ in 0..ctx.rounds {
        // The daemon's load, as `SessionActor` does it: stream and check every line, apply each accepted event to
        // the projection, keep only the default tail of recent events.
        let started = Instant::now();
        let mut projector = SessionState::projector();
        let opened =
            event_log::open(&session_dir, troupe_runtime::config::Limits::default().session_tail_bytes, |event| {
                projector.apply(event)
            })?;
        let fallback_time = event_log::modified_rfc3339(&session_dir);
        let state = projector.finish(&session_id, opened.skipped.clone(), &fallback_time);
        load_samples.push(ms(started.elapsed()));
        ensure!(opened.last_seq == events as u64, "opened through seq {}, expected {events}", opened.last_seq);
        ensure!(opened.skipped.is_empty(), "the load skipped {} lines", opened.skipped.len());
        ensure!(state.meta().session_id == session_id, "the projection is of another session");
        ensure!(state.meta().last_event_seq == events as u64, "the projection ends at {}", state.meta().last_event_seq);
        tail_events = opened.tail.len();
        tail_bytes = opened.tail.iter().map(|entry| entry.len()).sum();
        let bounded = tail_bytes <= troupe_runtime::config::Limits::default().session_tail_bytes || tail_events == 1;
        let partial =
            log_bytes as usize <= troupe_runtime::config::Limits::default().session_tail_bytes || tail_events < events;
        ensure!(bounded && partial, "the tail kept {tail_events} events, {tail_bytes} bytes");
        drop((opened, state));

        // The same stream with nothing projected and no tail: the reading and checking alone.
        let started = Instant::now();
        let mut accepted = 0usize;
        let opened = event_log::open(&session_dir, 0, |_| accepted += 1)?;
        open_only_samples.push(ms(started.elapsed()));
        ensure!(accepted == events && opened.last_seq == events as u64, "the bare open accepted {accepted} events");
        drop(opened);

        // For comparison, the load before bounded history: the whole log in memory, then the projection.
        let started = Instant::now();
        let loaded = event_log::load(&session_dir)?;
        let state = SessionState::from_events(loaded.events.iter().map(|event| &event.event), loaded.skipped.clone())
            .map_err(|error| anyhow::anyhow!("projection: {error:?}"))?;
        whole_samples.push(ms(started.elapsed()));
        ensure!(loaded.events.len() == events, "loaded {} events, expected {events}", loaded.events.len());
        ensure!(state.meta().last_event_seq == events as u64, "the whole-log projection ends elsewhere");
        drop((loaded, state));

        // The baseline: the same read, each line parsed to a `serde_json::Value`.
        let started = Instant::now();
        let bytes = std::fs::read(event_log::log_path(&session_dir))?;
        let text = std::str::from_utf8(&bytes).context("utf-8")?;
        let mut values = Vec::with_capacity(events);
        for line in text.lines() {
            values.push(serde_json::from_str::<serde_json::Value>(line)?);
        }
        parse_samples.push(ms(started.elapsed()));
        ensure!(values.len() == events, "parsed {} lines", values.len());
        drop(values);

        // The daemon's load through the snapshot, in process: read and check the snapshot, scan what follows it
        // (nothing here), read the tail back.
        let started = Instant::now();
        let projected = event_log::open_projected(&session_dir, tail_limit)?;
        projected_samples.push(ms(started.elapsed()));
        ensure!(
            matches!(projected.snapshot, SnapshotUse::Used { .. }),
            "the load did not use the snapshot: {:?}",
            projected.snapshot
        );
        ensure!(projected.state.last_event_seq == events as u64, "the snapshot's projection ends elsewhere");
        ensure!(projected.opened.tail.len() == tail_events, "the snapshot load kept another tail");

        // What a live snapshot costs the actor (a clone of the state and the index), and writing it (encode,
        // write, fsync, rename, fsync of the directory), which runs on a blocking thread.
        let started = Instant::now();
        let pending = projected.opened.store.snapshot_of_live(&projected.state).context("a live snapshot")?;
        take_samples.push(ms(started.elapsed()));
        let started = Instant::now();
        pending.write(&session_dir)?;
        write_samples.push(ms(started.elapsed()));
        snapshot_bytes = std::fs::metadata(snapshot::snapshot_path(&session_dir))?.len();
        drop(projected);

        // End to end without a snapshot: a hibernated session resumed over the protocol scans its whole log (and
        // then writes a snapshot again, off the actor).
        wait_hibernated(&daemon, &session_id).await?;
        std::fs::remove_file(snapshot::snapshot_path(&session_dir))?;
        resume_full_samples.push(timed_resume(&client, &session_id).await?);
        ensure!(daemon.is_live(&session_id), "session.resume did not load the session");

        // End to end through the snapshot: the session hibernated after its snapshot was written.
        wait_hibernated(&daemon, &session_id).await?;
        wait_snapshot(&session_dir, log_bytes).await?;
        resume_samples.push(timed_resume(&client, &session_id).await?);
        ensure!(daemon.is_live(&session_id), "session.resume did not load the session");
        ensure!(
            std::fs::metadata(event_log::log_path(&session_dir))?.len() == log_bytes,
            "the log grew while resuming"
        );
    }
    let (parse, parse_p99) = median_p99(&parse_samples);
    let (load, load_p99) = median_p99(&load_samples);
    let (open_only, open_only_p99) = median_p99(&open_only_samples);
    let (resume, resume_p99) = median_p99(&resume_samples);
    let (whole, whole_p99) = median_p99(&whole_samples);
    let (projected, projected_p99) = median_p99(&projected_samples);
    let (resume_full, resume_full_p99) = median_p99(&resume_full_samples);
    let (take, take_p99) = median_p99(&take_samples);
    let (write, write_p99) = median_p99(&write_samples);
    Ok(Table {
        figure: format!("5. Cold load of a {events}-event session"),
        note: format!(
            "The log: {events} events (session_created + renames with 80-byte titles), {:.1} MB, written by the \
             daemon in {:.1} s; the file is in the page cache (a restart's load, not a cold disk). {} rounds. \
             The load keeps a tail of {tail_events} events ({:.2} MB, bound {} MiB) and the projection. \
             The projection snapshot is {:.1} KB. Baseline: `std::fs::read` + `serde_json::from_str::<Value>` per \
             line.",
            log_bytes as f64 / 1e6,
            generated.as_secs_f64(),
            ctx.rounds,
            tail_bytes as f64 / 1e6,
            troupe_runtime::config::Limits::default().session_tail_bytes / (1024 * 1024),
            snapshot_bytes as f64 / 1e3
        ),
        rows: vec![
            Row::new("serde_json::Value per line (baseline)", "ms", parse, parse_p99),
            Row::new("event_log::open (default tail) + Projector", "ms", load, load_p99)
                .cost(parse)
                .target(Target::RatioAtMost(1.3)),
            Row::new("event_log::open alone (no tail, nothing projected)", "ms", open_only, open_only_p99).cost(parse),
            Row::new("for comparison: event_log::load + SessionState::from_events (whole log)", "ms", whole, whole_p99)
                .cost(parse),
            Row::new("event_log::open_projected through the snapshot (default tail)", "ms", projected, projected_p99)
                .cost(parse),
            Row::new(
                "session.resume of the hibernated session, no snapshot (end to end)",
                "ms",
                resume_full,
                resume_full_p99,
            )
            .cost(parse),
            Row::new(
                "session.resume of the hibernated session, from its snapshot (end to end)",
                "ms",
                resume,
                resume_p99,
            )
            .cost(parse)
            .target(Target::MedianAtMost(20.0)),
            Row::new("  the same against the full parse (≥ 10× faster)", "ms", resume, resume_p99)
                .cost(parse)
                .target(Target::RatioAtMost(0.1)),
            Row::new("taking a live snapshot on the actor (clone of state and index)", "ms", take, take_p99),
            Row::new("writing it off the actor (encode, write, fsync, rename)", "ms", write, write_p99),
        ],
    })
}
