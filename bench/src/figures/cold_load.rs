//! Figure 5: cold load of a 100,000-event session. What the daemon does to load it
//! (`event_log::load` + `SessionState::from_events`) against plain `serde_json` parsing of the same lines
//! into `serde_json::Value`; and end to end, `session.resume` of a hibernated session until its reply.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_runtime::event_log;
use troupe_runtime::session_state::SessionState;

use crate::Ctx;
use crate::harness::{InProcessDaemon, create_session, ms, rename_pipelined, within};
use crate::report::{Row, Table, Target, median_p99};

const HIBERNATE_AFTER: Duration = Duration::from_millis(200);

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

    let (mut load_samples, mut load_only_samples, mut parse_samples, mut resume_samples) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ctx.rounds {
        // The daemon's load: read, check and parse every line, then project.
        let started = Instant::now();
        let loaded = event_log::load(&session_dir)?;
        let load_only = started.elapsed();
        let skipped = loaded.skipped.clone();
        let state = SessionState::from_events(loaded.events.iter().map(|event| &event.event), skipped)
            .map_err(|error| anyhow::anyhow!("projection: {error:?}"))?;
        load_samples.push(ms(started.elapsed()));
        load_only_samples.push(ms(load_only));
        ensure!(loaded.events.len() == events, "loaded {} events, expected {events}", loaded.events.len());
        ensure!(loaded.skipped.is_empty(), "the load skipped {} lines", loaded.skipped.len());
        ensure!(state.meta().session_id == session_id, "the projection is of another session");
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

        // End to end: a hibernated session resumed over the protocol.
        wait_hibernated(&daemon, &session_id).await?;
        let started = Instant::now();
        let resumed = within(
            "session.resume",
            client.call::<method::SessionResume>(SessionIdParams { session_id: session_id.clone() }),
        )
        .await??;
        resume_samples.push(ms(started.elapsed()));
        ensure!(resumed.session.session_id == session_id, "resumed another session");
        ensure!(daemon.is_live(&session_id), "session.resume did not load the session");
    }
    let (parse, parse_p99) = median_p99(&parse_samples);
    let (load, load_p99) = median_p99(&load_samples);
    let (load_only, load_only_p99) = median_p99(&load_only_samples);
    let (resume, resume_p99) = median_p99(&resume_samples);
    Ok(Table {
        figure: format!("5. Cold load of a {events}-event session"),
        note: format!(
            "The log: {events} events (session_created + renames with 80-byte titles), {:.1} MB, written by the \
             daemon in {:.1} s; the file is in the page cache (a restart's load, not a cold disk). {} rounds. \
             Baseline: `std::fs::read` + `serde_json::from_str::<Value>` per line.",
            log_bytes as f64 / 1e6,
            generated.as_secs_f64(),
            ctx.rounds
        ),
        rows: vec![
            Row::new("serde_json::Value per line (baseline)", "ms", parse, parse_p99),
            Row::new("event_log::load + SessionState::from_events", "ms", load, load_p99)
                .cost(parse)
                .target(Target::RatioAtMost(1.3)),
            Row::new("event_log::load alone", "ms", load_only, load_only_p99).cost(parse),
            Row::new("session.resume of the hibernated session (end to end)", "ms", resume, resume_p99).cost(parse),
        ],
    })
}
