//! Figure 4: durable append throughput with group commit (`session.rename` pipelined into one session, every
//! reply only after `fdatasync`) against a raw loop of `write` + `fdatasync` batches of the same lines in the
//! same directory.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::ensure;

use crate::Ctx;
use crate::harness::{InProcessDaemon, create_session, ms, raw_fdatasync_latency, rename, rename_pipelined};
use crate::report::{Row, Table, Target, median_p99, slowest};

const WINDOW: usize = 200;
/// Issue 15: group commit reaches at least half the rate of raw `write` + `fdatasync` batches of the same lines,
/// i.e. costs at most twice as much.
const GROUP_COMMIT_RATIO: f64 = 2.0;

/// Writes `lines` with one `write` and one `fdatasync` per `batch` lines; returns the elapsed time.
fn raw_batches(dir: &Path, lines: &[&[u8]], batch: usize) -> anyhow::Result<Duration> {
    let path = dir.join(format!("bench-raw-{}.jsonl", troupe_runtime::clock::new_id()));
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let started = Instant::now();
    let mut buffer = Vec::new();
    for chunk in lines.chunks(batch) {
        buffer.clear();
        for line in chunk {
            buffer.extend_from_slice(line);
            buffer.push(b'\n');
        }
        file.write_all(&buffer)?;
        // SAFETY: a valid open descriptor.
        ensure!(unsafe { libc::fdatasync(file.as_raw_fd()) } == 0, "fdatasync failed");
    }
    let elapsed = started.elapsed();
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(elapsed)
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let events = ctx.size(10_000, 200);
    let sequential = ctx.size(300, 10);
    let daemon = InProcessDaemon::start(None)?;
    let (client, _deliveries) = daemon.client().await?;
    let (mut rates, mut raw_rates, mut raw_single_rates) = (Vec::new(), Vec::new(), Vec::new());
    let (mut append_latencies, mut fsync_latencies) = (Vec::new(), Vec::new());
    let mut line_bytes = 0;
    for round in 0..ctx.rounds {
        let session = create_session(&client, daemon.path()).await?;
        let prefix = format!("dur{round}");
        let started = Instant::now();
        tokio::time::timeout(
            Duration::from_secs(300),
            rename_pipelined(&client, &session.session_id, &prefix, events, WINDOW, |_| {}),
        )
        .await??;
        rates.push(events as f64 / started.elapsed().as_secs_f64());

        // The same lines, as the daemon wrote them.
        let log = std::fs::read(daemon.path().join("sessions").join(&session.session_id).join("events.jsonl"))?;
        let lines: Vec<&[u8]> = log.split(|byte| *byte == b'\n').filter(|line| !line.is_empty()).skip(1).collect();
        ensure!(lines.len() == events, "the log holds {} renames, expected {events}", lines.len());
        line_bytes = lines.iter().map(|line| line.len() + 1).sum::<usize>() / lines.len();
        let elapsed = raw_batches(daemon.path(), &lines, WINDOW / 2)?;
        raw_rates.push(events as f64 / elapsed.as_secs_f64());
        let single = &lines[..lines.len().min(ctx.size(1000, 20))];
        let elapsed = raw_batches(daemon.path(), single, 1)?;
        raw_single_rates.push(single.len() as f64 / elapsed.as_secs_f64());

        // One acknowledged append at a time: the latency of a durable write through the whole stack.
        let seq_prefix = format!("seq{round}");
        for index in 0..sequential {
            let started = Instant::now();
            rename(&client, &session.session_id, &seq_prefix, index).await?;
            append_latencies.push(ms(started.elapsed()));
        }
        fsync_latencies.extend(raw_fdatasync_latency(daemon.path(), lines[0], sequential)?);
    }
    let (raw_rate, _) = median_p99(&raw_rates);
    let (raw_single, _) = median_p99(&raw_single_rates);
    let (rate, _) = median_p99(&rates);
    let (fsync, fsync_p99) = median_p99(&fsync_latencies);
    let (append, append_p99) = median_p99(&append_latencies);
    Ok(Table {
        figure: "4. Durable append throughput (group commit)".into(),
        note: format!(
            "{events} renames per round into a fresh session, {WINDOW} in flight from one client, {} rounds; lines \
             average {line_bytes} bytes. Baseline: the same lines written by a raw loop in the same directory, one \
             `write` + `fdatasync` per batch of {} lines (what a double-buffered group commit with {WINDOW} in \
             flight can reach), and per line. Sequential: one rename at a time vs one raw `write` + `fdatasync` of \
             one line. Target (issue 15): group commit ≥ 0.5× the raw batches' rate (ratio ≤ {GROUP_COMMIT_RATIO}).",
            ctx.rounds,
            WINDOW / 2
        ),
        rows: vec![
            Row::new(
                format!("raw write+fdatasync, batches of {}", WINDOW / 2),
                "lines/s",
                raw_rate,
                slowest(&raw_rates),
            ),
            Row::new("raw write+fdatasync, one line per sync", "lines/s", raw_single, slowest(&raw_single_rates)),
            Row::new("daemon: pipelined renames (group commit)", "events/s", rate, slowest(&rates))
                .rate(raw_rate)
                .target(Target::RatioAtMost(GROUP_COMMIT_RATIO)),
            Row::new("raw write+fdatasync of one line", "ms", fsync, fsync_p99),
            Row::new("daemon: one rename at a time", "ms", append, append_p99).cost(fsync),
        ],
    })
}
