//! Figure 2: pipelined RPC throughput: many `session.get` requests in flight on one connection and on 16
//! connections, against the same bare actix-ws server as figure 1. Each connection asks its own session, so that
//! 16 connections measure the gateway and the engine, not one session actor's serialization.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::rtt::echo_workers;
use super::{ID_BASE, session_get_frame};
use crate::Ctx;
use crate::echo::EchoServer;
use crate::harness::{InProcessDaemon, RawWs, create_session, is_reply, ms, reply_id};
use crate::report::{Row, Table, Target, median_p99, slowest};

/// Issue 15: the daemon's pipelined rate at least 0.6× the echo's, i.e. ratio (echo rate / daemon rate) ≤ 1/0.6 (1.667,
/// rounded so that the table prints it plainly).
const RATIO_TARGET: f64 = 1.667;

/// In flight per connection: below the daemon's default `max_in_flight` (256).
const WINDOW: usize = 128;

/// Drives `per_connection` requests on each socket (socket `i` asks `session_ids[i]`) with up to [`WINDOW`] in
/// flight. Returns the elapsed time and every request's latency in ms.
async fn drive(
    sockets: Vec<RawWs>,
    session_ids: &[String],
    per_connection: usize,
) -> anyhow::Result<(Duration, Vec<f64>)> {
    let started = Instant::now();
    let tasks = sockets.into_iter().zip(session_ids).map(|(socket, session_id)| {
        let session_id = session_id.clone();
        tokio::spawn(async move { one_connection(socket, &session_id, per_connection, WINDOW).await })
    });
    let mut latencies = Vec::new();
    for outcome in futures::future::join_all(tasks).await {
        latencies.extend(outcome??.1);
    }
    Ok((started.elapsed(), latencies))
}

/// `total` `session.get`s of `session_id` on `socket`, `window` in flight: the time from the first send to the
/// last reply, and each request's latency in ms, in the order the replies came.
pub(super) async fn one_connection(
    socket: RawWs,
    session_id: &str,
    total: usize,
    window: usize,
) -> anyhow::Result<(Duration, Vec<f64>)> {
    let frames: Vec<String> = (0..total).map(|index| session_get_frame(ID_BASE + index as u64, session_id)).collect();
    pipelined_frames(socket, &frames, window).await
}

/// Sends `frames` (request `i` has id `ID_BASE + i`) on `socket`, `window` in flight, and reads a successful reply
/// to each: the time from the first send to the last reply, and each request's latency in ms, in the order the
/// replies came.
pub(super) async fn pipelined_frames(
    socket: RawWs,
    frames: &[String],
    window: usize,
) -> anyhow::Result<(Duration, Vec<f64>)> {
    let total = frames.len();
    let (mut sink, mut stream) = socket.stream.split();
    let started = Instant::now();
    let mut sent_at = vec![Instant::now(); total];
    let mut latencies = Vec::with_capacity(total);
    let (mut sent, mut answered) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while answered < total {
        let mut fed = false;
        while sent < total && sent - answered < window {
            sink.feed(Message::text(frames[sent].clone())).await?;
            sent_at[sent] = Instant::now();
            sent += 1;
            fed = true;
        }
        if fed {
            sink.flush().await?;
        }
        ensure!(Instant::now() < deadline, "pipelined requests took over 120 s");
        let text = match tokio::time::timeout(Duration::from_secs(60), stream.next()).await? {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(other)) => bail!("unexpected frame {other:?}"),
            Some(Err(error)) => return Err(error.into()),
            None => bail!("the socket closed"),
        };
        if !is_reply(&text) {
            continue;
        }
        ensure!(text.contains("\"result\""), "a pipelined request failed: {}", text.as_str());
        let index = reply_id(&text).and_then(|id| id.checked_sub(ID_BASE)).map(|index| index as usize);
        let Some(index) = index.filter(|index| *index < sent) else {
            bail!("a reply to an unknown id: {}", text.as_str())
        };
        latencies.push(ms(sent_at[index].elapsed()));
        answered += 1;
    }
    let elapsed = started.elapsed();
    let _ = sink.close().await;
    Ok((elapsed, latencies))
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Table> {
    let daemon = InProcessDaemon::start(None)?;
    let (client, _deliveries) = daemon.client().await?;
    let mut session_ids = Vec::new();
    for _ in 0..16 {
        session_ids.push(create_session(&client, daemon.path()).await?.session_id);
    }
    let session = &session_ids[0];
    let mut probe = RawWs::connect(&daemon.url(), &daemon.token).await?;
    probe.handshake().await?;
    probe.send(session_get_frame(ID_BASE, session).into()).await?;
    let canned = probe.reply().await?;
    let echo = EchoServer::start(&canned, ID_BASE, echo_workers())?;

    let total = ctx.size(32_000, 200);
    let mut rows = Vec::new();
    for connections in [1usize, 16] {
        let per_connection = total / connections;
        let (mut daemon_rates, mut echo_rates) = (Vec::new(), Vec::new());
        let (mut daemon_latencies, mut echo_latencies) = (Vec::new(), Vec::new());
        for _ in 0..ctx.rounds {
            let mut sockets = Vec::new();
            for _ in 0..connections {
                let mut socket = RawWs::connect(&daemon.url(), &daemon.token).await?;
                socket.handshake().await?;
                sockets.push(socket);
            }
            let (elapsed, latencies) = drive(sockets, &session_ids[..connections], per_connection).await?;
            daemon_rates.push((per_connection * connections) as f64 / elapsed.as_secs_f64());
            daemon_latencies.extend(latencies);

            let mut sockets = Vec::new();
            for _ in 0..connections {
                sockets.push(RawWs::connect(&echo.url(), "unused").await?);
            }
            let (elapsed, latencies) = drive(sockets, &session_ids[..connections], per_connection).await?;
            echo_rates.push((per_connection * connections) as f64 / elapsed.as_secs_f64());
            echo_latencies.extend(latencies);
        }
        let (echo_rate, _) = median_p99(&echo_rates);
        let (daemon_rate, _) = median_p99(&daemon_rates);
        rows.push(Row::new(
            format!("{connections} conn: bare echo (baseline)"),
            "req/s",
            echo_rate,
            slowest(&echo_rates),
        ));
        rows.push(
            Row::new(format!("{connections} conn: daemon"), "req/s", daemon_rate, slowest(&daemon_rates))
                .rate(echo_rate)
                .target(Target::RatioAtMost(RATIO_TARGET)),
        );
        let (echo_latency, _) = median_p99(&echo_latencies);
        let (daemon_latency, daemon_latency_p99) = median_p99(&daemon_latencies);
        rows.push(
            Row::new(
                format!("{connections} conn: daemon latency under load"),
                "ms",
                daemon_latency,
                daemon_latency_p99,
            )
            .cost(echo_latency),
        );
    }
    Ok(Table {
        figure: "2. Pipelined RPC throughput (`session.get`)".into(),
        note: format!(
            "{total} requests per round spread over the connections, {WINDOW} in flight per connection, each \
             connection asking its own session, {} rounds; baseline: the bare actix-ws server of figure 1. Rates: median and worst round; ratio = baseline rate / \
             daemon rate. Latency: send → reply of each request under that load.",
            ctx.rounds
        ),
        rows,
    })
}
