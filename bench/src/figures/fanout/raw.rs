//! Figure 3's rows driven by lightweight raw WebSocket subscribers: the paced row (an offered 2,000 events/s)
//! and the saturation row. 100 shared `Client`s decoding every notification as JSON on this 2-core machine are
//! themselves the bound at saturation, so these subscribers only scan each frame for its `seq` (checked in order,
//! every event once) and the rename's index (for the latency); a gap is followed by a resubscribe from the cursor,
//! as a real client does, and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt;
use tokio_tungstenite::tungstenite::Message;
use troupe_protocol::client::Client;

use crate::harness::{InProcessDaemon, RawWs, create_session, rename};

/// How a round's renames are sent.
#[derive(Clone, Copy, Debug)]
pub(super) enum Writer {
    /// As fast as the replies come back, this many in flight.
    Pipelined { window: usize },
    /// At this many events per second (each sent at its due time, whatever the replies do), at most `window` in
    /// flight.
    Paced { per_second: u32, window: usize },
}

/// One round: notifications per second delivered, each delivery's latency (ms), gap recoveries.
pub(super) struct Round {
    pub(super) rate: f64,
    pub(super) latencies: Vec<f64>,
    pub(super) gaps: usize,
}

/// The beginning of every `events.subscription` frame (the encoder writes it byte for byte).
const EVENT_FRAME_PREFIX: &str = r#"{"jsonrpc":"2.0","method":"events.subscription","params":{"type":"event","#;

/// Renames of one round's writer go out with this client; the subscribers are raw sockets of the same daemon.
pub(super) async fn round(
    daemon: &InProcessDaemon,
    writer_client: &Client,
    subscribers: usize,
    events: usize,
    writer: Writer,
    prefix: &str,
) -> anyhow::Result<Round> {
    let session_id = create_session(writer_client, daemon.path()).await?.session_id;
    let epoch = Instant::now();
    let sent_at: Arc<Vec<AtomicU64>> = Arc::new((0..events).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let mut socket = RawWs::connect_small_reads(&daemon.url(), &daemon.token).await?;
        socket.handshake().await?;
        let next_seq = subscribe(&mut socket, &session_id, 1, 1).await?;
        ensure!(next_seq == 2, "a fresh session holds only session_created");
        let (sent_at, session_id, marker) = (sent_at.clone(), session_id.clone(), format!("\"{prefix} "));
        tasks.push(tokio::spawn(async move { read_all(socket, &session_id, &marker, events, &sent_at, epoch).await }));
    }
    let started = Instant::now();
    let on_send = |index: usize| sent_at[index].store(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
    tokio::time::timeout(
        Duration::from_secs(300),
        send_renames(writer_client, &session_id, prefix, events, writer, on_send),
    )
    .await??;
    let (mut last, mut latencies, mut gaps) = (started, Vec::with_capacity(events * subscribers), 0);
    for task in tasks {
        let read = tokio::time::timeout(Duration::from_secs(300), task).await???;
        last = last.max(read.last);
        gaps += read.gaps;
        latencies.extend(read.latencies);
    }
    let rate = (events * subscribers) as f64 / last.duration_since(started).as_secs_f64();
    Ok(Round { rate, latencies, gaps })
}

async fn send_renames(
    client: &Client,
    session_id: &str,
    prefix: &str,
    count: usize,
    writer: Writer,
    on_send: impl Fn(usize),
) -> anyhow::Result<()> {
    let (window, interval) = match writer {
        Writer::Pipelined { window } => (window, None),
        Writer::Paced { per_second, window } => (window, Some(Duration::from_secs(1) / per_second)),
    };
    let start = tokio::time::Instant::now();
    let on_send = &on_send;
    let mut calls = std::pin::pin!(
        futures::stream::iter(0..count)
            .then(|index| async move {
                if let Some(interval) = interval {
                    tokio::time::sleep_until(start + interval * index as u32).await;
                }
                index
            })
            .map(|index| async move {
                on_send(index);
                rename(client, session_id, prefix, index).await
            })
            .buffer_unordered(window)
    );
    while let Some(outcome) = calls.next().await {
        outcome?;
    }
    Ok(())
}

struct Read {
    latencies: Vec<f64>,
    last: Instant,
    gaps: usize,
}

/// Subscribes from `cursor` (request id `id`) and checks the reply's stored events continue at `cursor + 1`;
/// returns the next seq due.
async fn subscribe(socket: &mut RawWs, session_id: &str, cursor: u64, id: u64) -> anyhow::Result<u64> {
    let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "events.subscribe",
        "params": {"session_id": session_id, "cursor": cursor}});
    socket.send(request.to_string().into()).await?;
    loop {
        let text = crate::harness::within("the subscribe reply", socket.reply()).await??;
        let value: serde_json::Value = serde_json::from_str(&text)?;
        if value["id"] != id {
            continue;
        }
        let result = value.get("result").with_context(|| format!("events.subscribe failed: {value}"))?;
        let mut next_seq = cursor + 1;
        for event in result["events"].as_array().context("the reply's events")? {
            ensure!(event["seq"] == next_seq, "the reply holds seq {} where {next_seq} was due", event["seq"]);
            next_seq += 1;
        }
        return Ok(next_seq);
    }
}

/// Reads until the round's last event, checking order and completeness from the frames' text alone.
async fn read_all(
    mut socket: RawWs,
    session_id: &str,
    marker: &str,
    events: usize,
    sent_at: &[AtomicU64],
    epoch: Instant,
) -> anyhow::Result<Read> {
    let final_seq = events as u64 + 1;
    let mut read = Read { latencies: Vec::with_capacity(events), last: Instant::now(), gaps: 0 };
    let mut next_seq = 2u64;
    while next_seq <= final_seq {
        let text = match tokio::time::timeout(Duration::from_secs(60), socket.stream.next()).await? {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(other)) => bail!("unexpected frame {other:?}"),
            Some(Err(error)) => return Err(error.into()),
            None => bail!("the daemon closed the socket at seq {next_seq}"),
        };
        if !text.starts_with(EVENT_FRAME_PREFIX) {
            if text.contains(r#""type":"gap""#) {
                // Fell behind: resubscribe from the last event held, as a client does; the events the reply
                // carries are not timed (they were read from the log, not delivered live).
                read.gaps += 1;
                let reply_next = subscribe(&mut socket, session_id, next_seq - 1, 1 + read.gaps as u64).await?;
                next_seq = reply_next;
            }
            continue;
        }
        let seq = frame_number(&text, r#""seq":"#).context("an event notification without a seq")?;
        ensure!(seq == next_seq, "event {seq} arrived where {next_seq} was due");
        next_seq += 1;
        let index = frame_number(&text, marker).filter(|index| *index < events as u64);
        let Some(index) = index else { bail!("seq {seq} is not a rename of this round: {}", text.as_str()) };
        let now = epoch.elapsed().as_nanos() as u64;
        let sent = sent_at[index as usize].load(Ordering::Relaxed);
        read.latencies.push(now.saturating_sub(sent) as f64 / 1e6);
    }
    read.last = Instant::now();
    let _ = socket.stream.close(None).await;
    Ok(read)
}

/// The number right after the first `key` inside the frame's event (after `"event":{`).
fn frame_number(frame: &str, key: &str) -> Option<u64> {
    let event = &frame[frame.find(r#","event":{"#)?..];
    let digits = &event[event.find(key)? + key.len()..];
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_number_reads_the_event_seq_and_the_title_index() {
        let frame = format!(
            r#"{EVENT_FRAME_PREFIX}"session_id":"s","event":{{"seq":42,"type":"session_title_committed","title":"fanP0 0000007 xx"}}}}}}"#
        );
        assert_eq!(frame_number(&frame, r#""seq":"#), Some(42));
        assert_eq!(frame_number(&frame, "\"fanP0 "), Some(7));
        assert_eq!(frame_number(&frame, "\"other "), None);
    }
}
