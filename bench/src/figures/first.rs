//! Figure 12: a client's first seconds. A fresh connection's first 3,000 `session.get` (32 in flight), with no
//! warm-up on that connection, against the echo of figures 1–2 driven the same way (a fresh connection each round).
//!
//! The daemon is not fresh: it runs, as a daemon does, and a connection of the set-up has already created the
//! sessions; what is new each round is the client's connection (its upgrade, protocol session and handshake),
//! which is what a client that connects feels. Two sessions are asked: one live (a client returning to a session
//! in use), and one hibernated (a client returning after the session's idle time, 60 s by default), on a second
//! daemon that hibernates sessions 100 ms after their last activity.

use std::time::{Duration, Instant};

use anyhow::ensure;

use super::pipeline::one_connection;
use super::rtt::echo_workers;
use super::{ID_BASE, session_get_frame};
use crate::Ctx;
use crate::echo::EchoServer;
use crate::harness::{InProcessDaemon, RawWs, create_session, ms, within};
use crate::report::{Row, Table, Target, median_p99, slowest};

/// Requests in flight: a client's first requests, not a saturating load.
const WINDOW: usize = 32;

/// Issue 28: p50 ≤ 1.3× the echo's and rate ≥ 0.6× the echo's (cost ratio ≤ 1/0.6).
const P50_RATIO_TARGET: f64 = 1.3;
const RATE_RATIO_TARGET: f64 = 1.667;

/// One side's rounds: the time to a usable connection, each round's rate, every request's latency.
#[derive(Default)]
struct Side {
    setup_ms: Vec<f64>,
    rates: Vec<f64>,
    latencies: Vec<f64>,
}

impl Side {
    /// A fresh connection to `url` (and its handshake when `handshake`), then `count` requests at once.
    async fn round(
        &mut self,
        url: &str,
        token: &str,
        handshake: bool,
        session_id: &str,
        count: usize,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut socket = RawWs::connect(url, token).await?;
        if handshake {
            socket.handshake().await?;
        }
        self.setup_ms.push(ms(started.elapsed()));
        let (elapsed, latencies) =
            within("first requests", one_connection(socket, session_id, count, WINDOW)).await??;
        self.rates.push(count as f64 / elapsed.as_secs_f64());
        self.latencies.extend(latencies);
        Ok(())
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let daemon = InProcessDaemon::start(None)?;
    let (client, _deliveries) = daemon.client().await?;
    let live = create_session(&client, daemon.path()).await?.session_id;

    let hibernating = InProcessDaemon::start(Some(Duration::from_millis(100)))?;
    let (hibernating_client, _hibernating_deliveries) = hibernating.client().await?;
    let hibernated = create_session(&hibernating_client, hibernating.path()).await?.session_id;

    // The canned reply: the live session's own `session.get` reply, on a connection of the set-up.
    let mut probe = RawWs::connect(&daemon.url(), &daemon.token).await?;
    probe.handshake().await?;
    probe.send(session_get_frame(ID_BASE, &live).into()).await?;
    let canned = probe.reply().await?;
    ensure!(canned.contains(&live), "session.get answered another session: {}", canned.as_str());
    drop(probe);
    let echo = EchoServer::start(&canned, ID_BASE, echo_workers())?;

    let count = ctx.size(3000, 100);
    let (mut echo_side, mut live_side, mut hibernated_side) = (Side::default(), Side::default(), Side::default());
    for _ in 0..ctx.rounds {
        // Interleaved, so that drift of a shared machine hits every side alike.
        echo_side.round(&echo.url(), "unused", false, &live, count).await?;
        live_side.round(&daemon.url(), &daemon.token, true, &live, count).await?;
        within("hibernation", async {
            while hibernating.is_live(&hibernated) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await?;
        hibernated_side.round(&hibernating.url(), &hibernating.token, true, &hibernated, count).await?;
        ensure!(!hibernating.is_live(&hibernated), "session.get loaded the hibernated session");
    }

    let (echo_p50, echo_p99) = median_p99(&echo_side.latencies);
    let (echo_rate, _) = median_p99(&echo_side.rates);
    let (echo_setup, echo_setup_p99) = median_p99(&echo_side.setup_ms);
    let mut rows = vec![Row::new("echo: round trip (baseline)", "ms", echo_p50, echo_p99)];
    let sides = [("live session", &live_side), ("hibernated session", &hibernated_side)];
    for (name, side) in sides {
        let (p50, p99) = median_p99(&side.latencies);
        rows.push(
            Row::new(format!("daemon, {name}: round trip"), "ms", p50, p99)
                .cost(echo_p50)
                .target(Target::RatioAtMost(P50_RATIO_TARGET)),
        );
    }
    rows.push(Row::new("echo: rate (baseline)", "req/s", echo_rate, slowest(&echo_side.rates)));
    for (name, side) in sides {
        let (rate, _) = median_p99(&side.rates);
        rows.push(
            Row::new(format!("daemon, {name}: rate"), "req/s", rate, slowest(&side.rates))
                .rate(echo_rate)
                .target(Target::RatioAtMost(RATE_RATIO_TARGET)),
        );
    }
    rows.push(Row::new("echo: connect (baseline)", "ms", echo_setup, echo_setup_p99));
    for (name, side) in sides {
        let (setup, setup_p99) = median_p99(&side.setup_ms);
        rows.push(Row::new(format!("daemon, {name}: connect + handshake"), "ms", setup, setup_p99).cost(echo_setup));
    }
    Ok(Table {
        figure: "12. A client's first seconds (`session.get` on a fresh connection)".into(),
        note: format!(
            "Each round a fresh connection sends {count} `session.get` at once, {WINDOW} in flight, with no warm-up \
             on it, {} rounds; the timed part starts at its first request (after the upgrade, and for the daemon \
             the handshake, whose `runtime.changed` notification arrives during the requests). The daemon is \
             running (not fresh) and its sessions exist: one live, one hibernated on a second daemon that \
             hibernates after 100 ms. Baseline: the echo of figures 1–2, a fresh connection each round. Round \
             trip: median and p99 of every request of every round; rates: median and worst round.",
            ctx.rounds
        ),
        rows,
    })
}
