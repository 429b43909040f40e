//! Figure 14: tool turns through a real provider. A child daemon's `openai` provider (reqwest, SSE) talks to a fake
//! OpenAI-compatible server in this process ([`crate::fake_openai`], `Replies::ToolTurns`) that answers at once: a
//! `read_file` call per turn until the run has made as many tool calls as its input asks, then a short text. This
//! is the path a user's runs take (an HTTP request and a streamed reply per turn, the whole conversation encoded
//! into each request), which figure 7's `local/scripted` model skips; the anchors' side-by-side harness measured
//! the upstream daemon the same way (docs/performance.md).
//!
//! Per round, each in a fresh session (`yolo`, subscribed): runs of ten tool turns and of none through `openai`, and
//! the same ten-tool run through `local/scripted` (the same run with the provider's path taken out). A tool turn's
//! cost is the difference between the ten-tool run and the text-only one, over ten: what the session's creation,
//! its title request and the run's start and end cost is in both. The daemon's first run with tools, before the
//! rounds, is shown apart (a single measurement), and so is the first of a second daemon whose data directory holds
//! many sessions already, which a user who keeps sessions has: whatever its file tools' first checks cost with a
//! data directory that grows with every session (until the thirteenth session of issue 28 they walked the denied
//! paths' folders, a `stat` per session; now a bind mount is looked up in the kernel's mount table).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use troupe_protocol::client::{Client, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::run::{RunStartParams, ToolResultStatus};
use troupe_protocol::types::session::{PermissionMode, SetPermissionModeParams};

use crate::Ctx;
use crate::fake_openai::{FakeOpenAi, MODEL, Replies, tool_turns_input};
use crate::harness::{
    ChildDaemon, bench_tmp_root, connect, connect_script, create_sessions, ms, next_live_event, selection,
    subscribed_session, within,
};
use crate::report::{Row, Table, Target, median_p99};

/// Tool turns in the runs with tools (the anchors' "10-tool run").
const TOOL_TURNS: usize = 10;

/// The design anchors' budgets (shared/design/performance-anchors.md): a one-turn text run ≤ 3 ms on disk, each
/// extra tool turn ≤ 2 ms on disk and ≤ 1 ms of engine CPU.
const TEXT_RUN_MS: f64 = 3.0;
const TOOL_TURN_WALL_MS: f64 = 2.0;
const TOOL_TURN_CPU_MS: f64 = 1.0;

/// Sessions in the second daemon's data directory before its first run (a year of a user's sessions, about).
const KEPT_SESSIONS: usize = 10_000;

/// What each session a daemon keeps may add to the CPU of its first run with tools, in µs: 20 ms at
/// [`KEPT_SESSIONS`], a fifth of the anchors' whole start budget (0.1 s), once per daemon.
const PER_KEPT_SESSION_US: f64 = 2.0;

/// One run's wall time (run.start sent → run_completed held) and the daemon's CPU time over it.
struct Measured {
    wall: Duration,
    cpu: Duration,
}

/// Runs `input` on `model` in a fresh `yolo` session and waits for its completion; checks it made `tools` tool
/// calls, each a success.
async fn one_run(
    child: &ChildDaemon,
    client: &Client,
    deliveries: &mut Deliveries,
    cwd: &std::path::Path,
    model: &str,
    input: String,
    tools: usize,
) -> anyhow::Result<Measured> {
    let session = subscribed_session(client, deliveries, cwd).await?;
    let mode = SetPermissionModeParams { session_id: session.session_id.clone(), mode: PermissionMode::Yolo };
    within("set mode", client.call::<method::SessionSetPermissionMode>(mode)).await??;
    let params = RunStartParams {
        session_id: session.session_id.clone(),
        client_run_id: troupe_runtime::clock::new_id(),
        selection: selection(model),
        input,
        reset_fallback: false,
        attachments: Vec::new(),
    };
    let cpu_before = child.cpu_time()?;
    let started = Instant::now();
    let (reply, completed) = futures::join!(
        within("run.start", client.call::<method::RunStart>(params)),
        within("run_completed", completion(deliveries, &session.session_id))
    );
    reply??;
    let (completed_at, results) = completed??;
    let cpu = child.cpu_time()? - cpu_before;
    ensure!(results == tools, "{model}: {results} successful tool results, expected {tools}");
    Ok(Measured { wall: completed_at.duration_since(started), cpu })
}

/// `run` within a minute.
async fn timed(run: impl Future<Output = anyhow::Result<Measured>>) -> anyhow::Result<Measured> {
    tokio::time::timeout(Duration::from_secs(60), run).await?
}

/// Reads `session_id`'s live events until its run completes: when it completed, and its successful tool results.
async fn completion(deliveries: &mut Deliveries, session_id: &str) -> anyhow::Result<(Instant, usize)> {
    let mut results = 0;
    loop {
        let (at, event) = next_live_event(deliveries, session_id).await?;
        match event.payload {
            EventPayload::ToolCallTerminated { result, .. } => {
                ensure!(
                    result.status == ToolResultStatus::Ok,
                    "a tool call ended {:?}: {}",
                    result.status,
                    result.output
                );
                results += 1;
            }
            EventPayload::RunCompleted { .. } => return Ok((at, results)),
            payload @ (EventPayload::RunFailed { .. }
            | EventPayload::RunCancelled { .. }
            | EventPayload::RunInterrupted { .. }) => bail!("the run ended with {payload:?}"),
            _ => {}
        }
    }
}

/// The first `tools`-tool run on `model` of a daemon whose data directory holds `sessions` sessions, created
/// through it (64 requests in flight) before the run.
async fn first_run_with_sessions(
    ctx: &Ctx,
    vendor: &FakeOpenAi,
    cwd: &std::path::Path,
    model: &str,
    tools: usize,
    sessions: usize,
) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir_in(bench_tmp_root())?;
    let child = ChildDaemon::spawn(&ctx.program, dir.path(), None)?;
    let (client, mut deliveries) = connect(&child.url, &child.token).await?;
    vendor.connect(&client).await?;
    let created = create_sessions(&client, cwd, sessions, Instant::now() + Duration::from_secs(300)).await?;
    ensure!(created == sessions, "only {created} of {sessions} sessions created within 300 s");
    timed(one_run(&child, &client, &mut deliveries, cwd, model, tool_turns_input(tools), tools)).await
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let tools = ctx.size(TOOL_TURNS, 2);
    let runs_per_round = ctx.size(4, 1);
    let vendor = FakeOpenAi::start(Replies::ToolTurns)?;
    let dir = tempfile::tempdir_in(bench_tmp_root())?;
    let cwd = tempfile::tempdir_in(bench_tmp_root())?;
    super::runs::write_tool_file(cwd.path())?;
    let child = ChildDaemon::spawn(&ctx.program, dir.path(), None)?;
    let (client, mut deliveries) = connect(&child.url, &child.token).await?;
    vendor.connect(&client).await?;
    // The same run through `local/scripted`: `tools` tool turns, then the text.
    connect_script(&client, dir.path(), &super::runs::script(tools + 1)).await?;
    let openai = format!("openai/{MODEL}");

    // The daemon's first run with tools, apart: it sets up what later ones reuse (the HTTP client's connection, the
    // file tools' first checks), which a user pays once per daemon, not per turn.
    let first =
        timed(one_run(&child, &client, &mut deliveries, cwd.path(), &openai, tool_turns_input(tools), tools)).await?;

    let (mut text_wall, mut tools_wall, mut tools_cpu, mut scripted_cpu) = (vec![], vec![], vec![], vec![]);
    let (mut turn_wall, mut turn_cpu) = (vec![], vec![]);
    for _ in 0..ctx.rounds {
        for _ in 0..runs_per_round {
            let deliveries = &mut deliveries;
            let with_tools =
                timed(one_run(&child, &client, deliveries, cwd.path(), &openai, tool_turns_input(tools), tools))
                    .await?;
            let text_only =
                timed(one_run(&child, &client, deliveries, cwd.path(), &openai, tool_turns_input(0), 0)).await?;
            let scripted_input = "read it again and again".to_owned();
            let scripted =
                timed(one_run(&child, &client, deliveries, cwd.path(), "local/scripted", scripted_input, tools))
                    .await?;
            text_wall.push(ms(text_only.wall));
            tools_wall.push(ms(with_tools.wall));
            tools_cpu.push(ms(with_tools.cpu));
            scripted_cpu.push(ms(scripted.cpu));
            turn_wall.push((ms(with_tools.wall) - ms(text_only.wall)) / tools as f64);
            turn_cpu.push((ms(with_tools.cpu) - ms(text_only.cpu)) / tools as f64);
        }
    }
    drop(child);
    let kept = ctx.size(KEPT_SESSIONS, 50);
    let crowded = first_run_with_sessions(ctx, &vendor, cwd.path(), &openai, tools, kept).await?;
    let (connections, requests) = (vendor.connections(), vendor.requests());
    let per_kept = (ms(crowded.cpu) - ms(first.cpu)) * 1000.0 / kept as f64;
    drop(vendor);

    let (text, text_p99) = median_p99(&text_wall);
    let (ten, ten_p99) = median_p99(&tools_wall);
    let (turn, turn_p99) = median_p99(&turn_wall);
    let (cpu, cpu_p99) = median_p99(&tools_cpu);
    let (scripted, scripted_p99) = median_p99(&scripted_cpu);
    let (per_turn_cpu, per_turn_cpu_p99) = median_p99(&turn_cpu);
    Ok(Table {
        figure: format!("14. Tool turns through a real provider: `openai` over HTTP and SSE, {tools}-tool runs"),
        note: format!(
            "Child daemon ({}) with its real `openai` provider connected to a fake OpenAI-compatible server in the \
             bench process that answers each streamed turn at once: a `read_file` call of a 200-byte file in the \
             cwd until the run has made {tools}, then a short text; connections kept alive ({connections} TCP \
             connections served the figure's {requests} requests, the provider's model list and the sessions' \
             title requests included). Per round, \
             {runs_per_round} times, each in a fresh `yolo` session subscribed with the shared `Client`: a \
             {tools}-tool run and a text-only run through `openai`, and the same {tools}-tool run through \
             `local/scripted` (no HTTP); {} rounds, after the daemon's first {tools}-tool run (its own rows). \
             Then a second daemon's first {tools}-tool run, after {kept} sessions were created through it (64 in \
             flight): what its file tools' first checks cost with a data directory that large; target: its CPU beyond \
             the first daemon's first run ≤ {PER_KEPT_SESSION_US} µs per kept session. \
             Wall: `run.start` sent → `run_completed` held; CPU: the daemon process's user+system time over that. \
             An extra tool turn: ({tools}-tool run − text-only run) / {tools}, per pair. Targets: the design \
             anchors' budgets (a one-turn text run ≤ {TEXT_RUN_MS} ms, each extra tool turn ≤ {TOOL_TURN_WALL_MS} \
             ms and ≤ {TOOL_TURN_CPU_MS} ms of engine CPU). For scale, not a baseline of this run: the anchors' \
             side-by-side harness measured the upstream daemon at 107.5 ms of CPU per 10-tool run (179.5 ms with a \
             helper running beside it), 12.4 ms per extra tool turn and 17.5 ms per one-turn run, on a machine of \
             this kind (shared/design/performance-anchors.md).",
            ctx.program.describe(),
            ctx.rounds
        ),
        rows: vec![
            Row::new("one-turn text run: run.start → run_completed", "ms", text, text_p99)
                .target(Target::MedianAtMost(TEXT_RUN_MS)),
            Row::new(format!("{tools}-tool run: run.start → run_completed"), "ms", ten, ten_p99),
            Row::new("each extra tool turn (wall)", "ms", turn, turn_p99)
                .target(Target::MedianAtMost(TOOL_TURN_WALL_MS)),
            Row::new("each extra tool turn: daemon CPU", "ms", per_turn_cpu, per_turn_cpu_p99)
                .target(Target::MedianAtMost(TOOL_TURN_CPU_MS)),
            Row::new(format!("daemon CPU per {tools}-tool run, `openai`"), "ms", cpu, cpu_p99).cost(scripted),
            Row::new(
                format!("the daemon's first {tools}-tool run: run.start → run_completed"),
                "ms",
                ms(first.wall),
                ms(first.wall),
            ),
            Row::new(format!("the daemon's first {tools}-tool run: daemon CPU"), "ms", ms(first.cpu), ms(first.cpu)),
            Row::new(
                format!("the first {tools}-tool run of a daemon keeping {kept} sessions: run.start → run_completed"),
                "ms",
                ms(crowded.wall),
                ms(crowded.wall),
            ),
            Row::new(
                format!("the first {tools}-tool run of a daemon keeping {kept} sessions: daemon CPU"),
                "ms",
                ms(crowded.cpu),
                ms(crowded.cpu),
            ),
            Row::new("its CPU beyond the fresh daemon's first run, per kept session", "µs", per_kept, per_kept)
                .target(Target::MedianAtMost(PER_KEPT_SESSION_US)),
            Row::new(
                format!("daemon CPU per {tools}-tool run, `local/scripted` (baseline)"),
                "ms",
                scripted,
                scripted_p99,
            ),
        ],
    })
}
