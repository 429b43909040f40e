//! Figure 6: scale. A child daemon process (`serve --hibernate-after-ms 200`): time from spawn to the first
//! successful `GET /readyz`, its idle RSS after start, and its RSS per idle (hibernated) session after creating
//! 10,000 sessions; then that daemon's graceful stop, and a client's first `session.list` from a daemon started again
//! on those sessions, after the clean stop and after a kill.

use std::time::{Duration, Instant};

use anyhow::ensure;
use troupe_protocol::method;
use troupe_protocol::types::session::SessionListParams;

use crate::Ctx;
use crate::harness::{ChildDaemon, bench_tmp_root, connect, create_sessions, ms, within};
use crate::report::{Row, Table, Target, median_p99};
use crate::start_list;

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    // Start time: fresh data directory each time. The executable's pages are read afresh first, so its RSS is measured
    // from the same page-cache state in every run.
    ctx.program.drop_cached_pages()?;
    let starts = if ctx.smoke { 2 } else { ctx.rounds.max(5) };
    let (mut ready_samples, mut exit_samples, mut idle_rss) = (Vec::new(), Vec::new(), Vec::new());
    let (mut idle_anon, mut idle_file) = (Vec::new(), Vec::new());
    for _ in 0..starts {
        exit_samples.push(ms(ctx.program.spawn_exit_time()?));
        let dir = tempfile::tempdir_in(bench_tmp_root())?;
        let mut child = ChildDaemon::spawn(&ctx.program, dir.path(), Some(200))?;
        ready_samples.push(ms(child.time_to_ready));
        // Idle: started, nothing connected, given a moment to settle.
        tokio::time::sleep(Duration::from_millis(ctx.size(500, 100) as u64)).await;
        idle_rss.push(child.rss_kib()? as f64 / 1024.0);
        let (anon, file) = child.rss_anon_file_kib()?;
        idle_anon.push(anon as f64 / 1024.0);
        idle_file.push(file as f64 / 1024.0);
        child.kill();
    }

    // Sessions: one child, one client, pipelined creates, then everything hibernates.
    let sessions = ctx.size(10_000, 50);
    let dir = tempfile::tempdir_in(bench_tmp_root())?;
    let cwd = tempfile::tempdir_in(bench_tmp_root())?;
    let mut child = ChildDaemon::spawn(&ctx.program, dir.path(), Some(200))?;
    let (client, deliveries) = connect(&child.url, &child.token).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = child.rss_kib()?;
    let (anon_before, _) = child.rss_anon_file_kib()?;
    let started = Instant::now();
    let created = create_sessions(&client, cwd.path(), sessions, started + Duration::from_secs(300)).await?;
    let create_elapsed = started.elapsed();
    let live = child.rss_kib()?;
    // Hibernation after 200 ms idle; give every actor time to stop.
    tokio::time::sleep(Duration::from_millis(ctx.size(3000, 800) as u64)).await;
    let after = child.rss_kib()?;
    let (anon_after, _) = child.rss_anon_file_kib()?;
    ensure!(created > 0, "no session was created");
    let per_idle_kb = (after as f64 - before as f64) * 1024.0 / 1000.0 / created as f64;
    let per_idle_anon_kb = (anon_after as f64 - anon_before as f64) * 1024.0 / 1000.0 / created as f64;
    let per_live_kb = (live as f64 - before as f64) * 1024.0 / 1000.0 / created as f64;
    // Stopped as a service manager stops it: the daemon writes the session index (`session_index`) as it stops.
    // With no client connected: a graceful stop waits for each connection's close handshake, which a client whose
    // runtime this thread blocks (`terminate` waits synchronously) never finishes (the stop then took a second).
    drop((client, deliveries));
    let stop_time = child.terminate(Duration::from_secs(120))?;
    drop(child);

    // The same data directory, started again: what a daemon keeping these sessions costs at its start, and a
    // client's first look at them (`session.list`, every root session): after that clean stop (the start reads the
    // index), then after a killed daemon (no index: the start reads every session's cache).
    let after_stop = first_look(ctx, dir.path(), created).await?;
    let after_kill = first_look(ctx, dir.path(), created).await?;

    // Whether the linker could place the start's functions together (a stale list raises the idle RSS). Not in a
    // smoke run, which judges no target and usually runs a debug build (whose names no list made for a release
    // build has).
    let start_list =
        (ctx.program.real_binary && !ctx.smoke).then(|| start_list::coverage(&ctx.program.program)).transpose()?;
    let start_list_note = match start_list {
        Some(coverage) => {
            if coverage.is_stale() {
                eprintln!(
                    "warning: {} of the {} functions of build/startup-symbols.txt are not in {}: the list was made \
                     for another build, and figure 6's idle RSS is higher than with its own list (run \
                     scripts/startup-symbols)",
                    coverage.listed - coverage.found,
                    coverage.listed,
                    ctx.program.program.display()
                );
            }
            format!(
                " The start's function list (build/startup-symbols.txt, finding 8): {} of its {} names are in this \
                 executable{}.",
                coverage.found,
                coverage.listed,
                if coverage.is_stale() { " (made for another build: run scripts/startup-symbols)" } else { "" }
            )
        }
        None => String::new(),
    };
    let (ready, ready_p99) = median_p99(&ready_samples);
    let (exit, _) = median_p99(&exit_samples);
    let (rss, rss_p99) = median_p99(&idle_rss);
    let (anon, anon_p99) = median_p99(&idle_anon);
    let (file, file_p99) = median_p99(&idle_file);
    Ok(Table {
        figure: "6. Scale: start, idle memory, idle sessions".into(),
        note: format!(
            "Child daemon: {}. Start: {starts} spawns, each on a fresh data dir, the executable's cached pages \
             dropped before the first (`POSIX_FADV_DONTNEED`: its idle RSS depends on the page cache's state, \
             docs/performance.md finding 8); baseline: spawning the same executable with `--version` until it exits. \
             Sessions: {created} of {sessions} created in {:.1} s ({:.0}/s, \
             64 in flight); RSS before {:.1} MiB, after creating {:.1} MiB, after hibernation {:.1} MiB. Per-session \
             figures are single measurements (median = p99). KB = 1000 bytes.{start_list_note}",
            ctx.program.describe(),
            create_elapsed.as_secs_f64(),
            created as f64 / create_elapsed.as_secs_f64(),
            before as f64 / 1024.0,
            live as f64 / 1024.0,
            after as f64 / 1024.0
        ),
        rows: vec![
            Row::new("spawn → first /readyz 200", "s", ready / 1000.0, ready_p99 / 1000.0)
                .cost(exit / 1000.0)
                .target(Target::MedianAtMost(0.1)),
            Row::new("idle RSS after start", "MiB", rss, rss_p99).target(Target::MedianAtMost(15.0)),
            Row::new("of it anonymous (RssAnon: heap, stacks)", "MiB", anon, anon_p99),
            Row::new("of it file-backed (RssFile: the binary's code and data touched)", "MiB", file, file_p99),
            Row::new("RSS per idle (hibernated) session", "KB", per_idle_kb, per_idle_kb)
                .target(Target::MedianAtMost(20.0)),
            Row::new("RSS per live session (before hibernation)", "KB", per_live_kb, per_live_kb),
            Row::new("of the idle session's RSS, anonymous (RssAnon)", "KB", per_idle_anon_kb, per_idle_anon_kb),
            Row::new(format!("keeping {created} sessions: SIGTERM → exit"), "ms", ms(stop_time), ms(stop_time)),
            Row::new(
                format!("keeping {created} sessions, after that stop: spawn → first /readyz 200"),
                "s",
                ms(after_stop.ready) / 1000.0,
                ms(after_stop.ready) / 1000.0,
            ),
            Row::new(
                format!("keeping {created} sessions, after that stop: connect → first session.list answered"),
                "ms",
                ms(after_stop.listed),
                ms(after_stop.listed),
            ),
            Row::new(
                format!("keeping {created} sessions, after a kill: connect → first session.list answered"),
                "ms",
                ms(after_kill.listed),
                ms(after_kill.listed),
            ),
            Row::new(
                format!("keeping {created} sessions: RSS 0.5 s after the first session.list"),
                "MiB",
                after_stop.rss_mib,
                after_stop.rss_mib,
            ),
        ],
    })
}

/// A daemon started on a data directory that holds sessions, as a client first meets it.
struct FirstLook {
    /// Spawn → first successful `GET /readyz`.
    ready: Duration,
    /// Connect → the first `session.list` answered.
    listed: Duration,
    /// Its RSS 0.5 s after that.
    rss_mib: f64,
}

/// Starts a daemon on `data_dir`, which holds `sessions` root sessions, lists them once and kills it.
async fn first_look(ctx: &Ctx, data_dir: &std::path::Path, sessions: usize) -> anyhow::Result<FirstLook> {
    let daemon = ChildDaemon::spawn(&ctx.program, data_dir, Some(200))?;
    let started = Instant::now();
    let (client, _deliveries) = connect(&daemon.url, &daemon.token).await?;
    let listed = within("session.list", client.call::<method::SessionList>(SessionListParams::default())).await??;
    let listed_after = started.elapsed();
    ensure!(listed.sessions.len() == sessions, "session.list after a restart: {} of {sessions}", listed.sessions.len());
    drop(client);
    tokio::time::sleep(Duration::from_millis(ctx.size(500, 100) as u64)).await;
    let rss_mib = daemon.rss_kib()? as f64 / 1024.0;
    Ok(FirstLook { ready: daemon.time_to_ready, listed: listed_after, rss_mib })
}
