//! Figure 1: RPC round trip, `session.get` on one connection, one request at a time, against a bare actix-ws
//! server answering the same frames with a reply of the same size.

use std::time::Instant;

use anyhow::ensure;
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;

use super::{ID_BASE, session_get_frame};
use crate::Ctx;
use crate::echo::EchoServer;
use crate::harness::{InProcessDaemon, RawWs, create_session, ms, within};
use crate::report::{Row, Table, Target, median_p99};

pub fn echo_workers() -> usize {
    // The gateway's default: the machine's parallelism capped at 4.
    std::thread::available_parallelism().map_or(1, |count| count.get()).clamp(1, 4)
}

/// `count` sequential calls of `frame`; the latency of each in ms.
async fn sequential(socket: &mut RawWs, frame: &str, count: usize) -> anyhow::Result<Vec<f64>> {
    let frame: tokio_tungstenite::tungstenite::Utf8Bytes = frame.into();
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        socket.send(frame.clone()).await?;
        let reply = socket.reply().await?;
        samples.push(ms(started.elapsed()));
        ensure!(reply.contains("\"result\""), "session.get failed: {}", reply.as_str());
    }
    Ok(samples)
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let daemon = InProcessDaemon::start(None)?;
    let (client, _deliveries) = daemon.client().await?;
    let session = create_session(&client, daemon.path()).await?;
    let frame = session_get_frame(ID_BASE, &session.session_id);

    let mut raw = RawWs::connect(&daemon.url(), &daemon.token).await?;
    raw.handshake().await?;
    let warmup = ctx.size(500, 10);
    within("warm-up", sequential(&mut raw, &frame, warmup)).await??;
    raw.send(frame.clone().into()).await?;
    let canned = raw.reply().await?;
    ensure!(canned.contains(&session.session_id), "session.get answered another session: {}", canned.as_str());

    let echo = EchoServer::start(&canned, ID_BASE, echo_workers())?;
    let mut bare = RawWs::connect(&echo.url(), "unused").await?;
    within("warm-up", sequential(&mut bare, &frame, warmup)).await??;

    let per_round = ctx.size(4000, 20);
    let (mut daemon_samples, mut echo_samples, mut client_samples) = (Vec::new(), Vec::new(), Vec::new());
    let params = SessionIdParams { session_id: session.session_id.clone() };
    for _ in 0..ctx.rounds {
        // Interleaved, so that drift of a shared machine hits both sides alike.
        daemon_samples.extend(within("rtt", sequential(&mut raw, &frame, per_round)).await??);
        echo_samples.extend(within("rtt", sequential(&mut bare, &frame, per_round)).await??);
        for _ in 0..per_round {
            let started = Instant::now();
            let result = client.call::<method::SessionGet>(params.clone()).await?;
            client_samples.push(ms(started.elapsed()));
            ensure!(result.session.session_id == session.session_id, "session.get answered another session");
        }
    }
    let (echo_median, echo_p99) = median_p99(&echo_samples);
    let (daemon_median, daemon_p99) = median_p99(&daemon_samples);
    let (client_median, client_p99) = median_p99(&client_samples);
    Ok(Table {
        figure: "1. RPC round trip (`session.get`, one connection, sequential)".into(),
        note: format!(
            "{} calls per side ({} rounds × {per_round}), reply frame {} bytes; baseline: bare actix-ws server \
             ({} workers, TCP_NODELAY) answering the same request frames with a reply of the same size; the same \
             raw tokio-tungstenite client drives both.",
            daemon_samples.len(),
            ctx.rounds,
            canned.len(),
            echo_workers()
        ),
        rows: vec![
            Row::new("bare actix-ws echo (baseline)", "ms", echo_median, echo_p99),
            Row::new("daemon, raw client", "ms", daemon_median, daemon_p99)
                .cost(echo_median)
                .target(Target::RatioAtMost(1.3)),
            Row::new("daemon, shared `Client::call`", "ms", client_median, client_p99).cost(echo_median),
        ],
    })
}
