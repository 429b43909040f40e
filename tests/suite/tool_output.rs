//! Live tool output over the wire: a subscriber that falls behind on a running tool's output misses deltas but
//! keeps its subscription; before the next delta it does get it is told where it picks up again
//! (`events.tool_output_gap`), and it still gets every durable event, in order.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use troupe_protocol::types::session::PermissionMode;

use super::support::*;

/// Bytes printed before the subscriber stalls: past the 64 KiB durable cap, so that no durable event is due while
/// it does not read (the next one is the call's end).
const HEAD: u64 = 70_000;
/// Bytes printed while the subscriber does not read: base64 in frames, far more than its socket buffers (a
/// 64 KiB receive buffer, the daemon's send buffer of at most `tcp_wmem`, 4 MiB by default) and a queue of 8
/// frames can hold.
const FLOOD: u64 = 8 * 1024 * 1024;
const TICK: &[u8] = b"tick\n";
/// The durable `tool_call_progress` text per stream, and the size of each progress event.
const DURABLE_CAP: u64 = 64 * 1024;
const PROGRESS_CHUNK: u64 = 16 * 1024;

/// `HEAD` bytes of `a`, then waits for `go`; `FLOOD` bytes of `b`, then a `tick` line every 50 ms until `stop`.
fn command() -> String {
    format!(
        "head -c {HEAD} /dev/zero | tr '\\0' a; touch waiting; while [ ! -e go ]; do sleep 0.01; done; \
         head -c {FLOOD} /dev/zero | tr '\\0' b; touch printed; while [ ! -e stop ]; do echo tick; sleep 0.05; done"
    )
}

/// The byte at `offset` of the command's stdout.
fn expected_byte(offset: u64) -> u8 {
    if offset < HEAD {
        b'a'
    } else if offset < HEAD + FLOOD {
        b'b'
    } else {
        TICK[((offset - HEAD - FLOOD) % TICK.len() as u64) as usize]
    }
}

fn decoded(params: &Value) -> Vec<u8> {
    BASE64.decode(params["data"].as_str().expect("data")).expect("base64")
}

fn check_bytes(start: u64, data: &[u8]) {
    for (index, byte) in data.iter().enumerate() {
        let offset = start + index as u64;
        assert_eq!(*byte, expected_byte(offset), "the byte at offset {offset} is not the command's");
    }
}

/// What the subscriber was sent, checked frame by frame.
#[derive(Default)]
struct Seen {
    /// Durable events, from the subscribe reply and `events.subscription` notifications, in arrival order.
    events: Vec<Value>,
    /// The tool call whose output this is (from the snapshot).
    tool_call: Option<(String, String)>,
    /// The stdout offset the subscriber has reached: the next delta starts here, unless a gap notice says
    /// otherwise.
    reached: Option<u64>,
    /// Gap notices, each with the offset the subscriber had reached when it came.
    gaps: Vec<(u64, Value)>,
    /// The offset the last gap notice announced, until a delta starting there arrives.
    announced: Option<u64>,
    deltas_after_a_gap: usize,
    /// The newest frames in short, for failure messages.
    recent: std::collections::VecDeque<String>,
}

impl Seen {
    fn absorb(&mut self, frame: Value) {
        let params = &frame["params"];
        if self.recent.len() == 12 {
            self.recent.pop_front();
        }
        let offsets = [&params["start_offset"], &params["end_offset"], &params["byte_offset"], &params["next_offset"]];
        let kind = params["event"]["payload"]["type"].as_str().unwrap_or_default();
        self.recent.push_back(format!("{} {kind} {offsets:?}", frame["method"].as_str().unwrap_or("reply")));
        match frame["method"].as_str() {
            None => {
                assert_eq!(frame["id"], 1, "{frame}");
                self.events.extend(frame["result"]["events"].as_array().expect("events").iter().cloned());
            }
            Some("events.subscription") => {
                assert_eq!(params["type"], "event", "the subscription stays open: {frame}");
                self.events.push(params["event"].clone());
            }
            Some("events.tool_output_snapshot") => {
                assert_eq!(params["stream"], "stdout", "{frame}");
                assert!(self.reached.is_none(), "one snapshot, before any delta");
                let data = decoded(params);
                let (start, end) = (params["start_offset"].as_u64().unwrap(), params["end_offset"].as_u64().unwrap());
                assert_eq!(end - start, data.len() as u64);
                assert!(data.len() as u64 <= 64 * 1024, "the retained window is 64 KiB at most");
                check_bytes(start, &data);
                self.reached = Some(end);
                let ids = (params["run_id"].as_str().unwrap(), params["tool_call_id"].as_str().unwrap());
                self.tool_call = Some((ids.0.to_owned(), ids.1.to_owned()));
            }
            Some("events.tool_output_delta") => {
                self.check_call(params);
                let offset = params["byte_offset"].as_u64().unwrap();
                let data = decoded(params);
                check_bytes(offset, &data);
                match self.announced.take() {
                    Some(announced) => {
                        assert_eq!(offset, announced, "the delta after a gap starts at its next_offset");
                        self.deltas_after_a_gap += 1;
                    }
                    None => assert_eq!(Some(offset), self.reached, "a delta skipped bytes without a gap notice"),
                }
                self.reached = Some(offset + data.len() as u64);
            }
            Some("events.tool_output_gap") => {
                self.check_call(params);
                let next = params["next_offset"].as_u64().unwrap();
                let reached = self.reached.expect("a gap follows the snapshot");
                assert!(next > self.announced.unwrap_or(reached), "a gap skips bytes: reached {reached}, {frame}");
                self.gaps.push((reached, params.clone()));
                self.announced = Some(next);
            }
            Some("runtime.changed") => {}
            Some(other) => panic!("unexpected {other}: {frame}"),
        }
    }

    fn check_call(&self, params: &Value) {
        let (run_id, tool_call_id) = self.tool_call.as_ref().expect("the snapshot came first");
        assert_eq!((&params["run_id"], &params["tool_call_id"]), (&json!(run_id), &json!(tool_call_id)));
        assert_eq!(params["stream"], "stdout");
    }

    /// Reads frames until `done` holds, failing after [`WAIT`] with what was seen (pings alone do not keep it
    /// waiting).
    async fn read_until(&mut self, subscriber: &mut RawSocket, what: &str, done: impl Fn(&Seen) -> bool) {
        let reading = async {
            while !done(self) {
                self.absorb(subscriber.recv().await);
            }
        };
        if tokio::time::timeout(WAIT, reading).await.is_err() {
            panic!(
                "timed out waiting for {what}: reached {:?}, gaps {:?}, events {:?}, newest frames {:?}",
                self.reached,
                self.gaps,
                self.kinds(),
                self.recent
            );
        }
    }

    /// The bytes of durable `tool_call_progress` text received.
    fn durable_output(&self) -> u64 {
        self.progress().iter().map(|payload| payload["text"].as_str().unwrap().len() as u64).sum()
    }

    fn progress(&self) -> Vec<&Value> {
        self.events
            .iter()
            .map(|event| &event["payload"])
            .filter(|payload| payload["type"] == "tool_call_progress")
            .collect()
    }

    fn kinds(&self) -> Vec<&str> {
        self.events.iter().map(|event| event["payload"]["type"].as_str().unwrap()).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_behind_on_live_output_is_told_where_it_resumes_and_still_gets_every_durable_event() {
    let daemon = TestDaemon::start_with(DaemonSetup {
        config_toml: Some("[limits]\noutbound_queue = 8\n".into()),
        ..DaemonSetup::default()
    });
    let project = daemon.project_path().to_path_buf();
    let (client, _deliveries) = daemon.client().await;
    let script = json!({"turns": [
        {"tool_calls": [{"tool": "shell", "arguments": {"command": command()}}]},
        {"text": "done"}
    ]});
    connect_script(&client, daemon.data_path(), script).await;
    let session = daemon.create_session(&client).await;
    set_mode(&client, &session.session_id, PermissionMode::Yolo).await;
    let run_id = start_run(&client, &session.session_id, selection_of("default", "local/scripted"), "go").await;
    eventually("the tool printed past the durable cap", || project.join("waiting").exists()).await;

    // Subscribe while the tool runs, and read until the durable cap is recorded and the stream's position known.
    let mut subscriber = daemon.raw_with_receive_buffer(64 * 1024).await;
    subscriber.handshake().await;
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "events.subscribe",
        "params": {"session_id": session.session_id}});
    subscriber.send(&subscribe).await;
    let mut seen = Seen::default();
    // Once the output passed the cap, the run holds less than a chunk of durable text back until the call ends,
    // so every progress event due before then has more than `DURABLE_CAP - PROGRESS_CHUNK` bytes in all. (The
    // live stream may lag the command by a few bytes that could begin a secret, held back for masking.)
    seen.read_until(&mut subscriber, "the durable cap", |seen| {
        seen.reached >= Some(DURABLE_CAP) && seen.durable_output() > DURABLE_CAP - PROGRESS_CHUNK
    })
    .await;
    assert_eq!(seen.tool_call.as_ref().map(|(run, _)| run.as_str()), Some(run_id.as_str()));

    // Stop reading while the tool prints far more than the buffers between us hold.
    std::fs::write(project.join("go"), "").unwrap();
    eventually("the flood is printed", || project.join("printed").exists()).await;

    // Read again: the missed deltas are announced by a gap notice, and the next delta starts where it says. Read
    // on into the slow ticks, which all arrive while the subscriber keeps up.
    seen.read_until(&mut subscriber, "a gap notice, then the ticks", |seen| {
        seen.deltas_after_a_gap > 0 && seen.reached > Some(HEAD + FLOOD)
    })
    .await;
    std::fs::write(project.join("stop"), "").unwrap();
    seen.read_until(&mut subscriber, "the run's end", |seen| seen.kinds().last() == Some(&"run_completed")).await;

    let (reached_before_gap, gap) = &seen.gaps[0];
    assert!(*reached_before_gap >= DURABLE_CAP && *reached_before_gap < HEAD + FLOOD, "{gap}");
    assert_eq!(gap["session_id"], json!(session.session_id));
    let total = seen.reached.unwrap();
    assert!(total > HEAD + FLOOD, "the subscriber follows the stream to its end");

    // The durable events: every one, in order, with the output's cap and what was elided.
    let seqs: Vec<u64> = seen.events.iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{:?}", seen.kinds());
    let of_the_call: Vec<&str> = seen
        .events
        .iter()
        .filter(|event| event["payload"]["tool_call_id"] == json!(seen.tool_call.as_ref().unwrap().1))
        .map(|event| event["payload"]["type"].as_str().unwrap())
        .collect();
    let (first, rest) = of_the_call.split_first().unwrap();
    assert_eq!(
        (*first, &rest[rest.len() - 2..]),
        ("tool_call_started", &["tool_output_elided", "tool_call_terminated"][..])
    );
    assert!(rest[..rest.len() - 2].iter().all(|kind| *kind == "tool_call_progress"), "{of_the_call:?}");
    let mut recorded = 0;
    for payload in seen.progress() {
        assert_eq!(payload["offset"].as_u64(), Some(recorded), "progress is contiguous from offset 0");
        let text = payload["text"].as_str().unwrap();
        check_bytes(recorded, text.as_bytes());
        recorded += text.len() as u64;
    }
    assert_eq!(recorded, DURABLE_CAP);
    let elided = seen.events.iter().find(|event| event["payload"]["type"] == "tool_output_elided").unwrap();
    assert_eq!(elided["payload"]["elided_bytes"].as_u64(), Some(total - DURABLE_CAP), "{elided}");
    let terminated_at = seen.events.iter().position(|event| event["payload"]["type"] == "tool_call_terminated");
    assert!(terminated_at < Some(seen.events.len() - 1), "{:?}", seen.kinds());
}
