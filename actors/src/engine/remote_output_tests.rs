//! The remote subscription's output rules, without a cluster: frames are collected as the sink would queue them.

use serde_json::Value;
use troupe_protocol::types::events::EventJson;

use super::*;

fn started(seq: u64, call: &str) -> LogEntry {
    let json = format!(
        r#"{{"session_id":"s","run_id":"r","seq":{seq},"timestamp":"t","payload":{{"type":"tool_call_started","tool_call_id":"{call}","tool":"shell","arguments":{{}},"action":"execute","resource":"x"}}}}"#
    );
    LogEntry { seq, json: EventJson::from_json(json).expect("json") }
}

fn terminated(seq: u64, call: &str) -> LogEntry {
    let json = format!(
        r#"{{"session_id":"s","run_id":"r","seq":{seq},"timestamp":"t","payload":{{"type":"tool_call_terminated","tool_call_id":"{call}"}}}}"#
    );
    LogEntry { seq, json: EventJson::from_json(json).expect("json") }
}

fn chunk(call: &str, offset: u64, data: &str) -> SharedOutput {
    SharedOutput::Chunk {
        run_id: "r".into(),
        tool_call_id: call.into(),
        stream: OutputStream::Stdout,
        offset,
        data: data.as_bytes().to_vec(),
    }
}

/// Collects what is offered; `room` frames fit, then the queue is full.
struct Queue {
    frames: Vec<Value>,
    room: usize,
}

impl Queue {
    fn new() -> Queue {
        Queue { frames: vec![], room: usize::MAX }
    }

    fn offer(&mut self) -> impl FnMut(&ByteString) -> Result<bool, SinkGone> + '_ {
        |frame| {
            if self.room == 0 {
                return Ok(false);
            }
            self.room -= 1;
            self.frames.push(serde_json::from_str(frame).expect("a frame is JSON"));
            Ok(true)
        }
    }

    /// Each frame as `method offset text`.
    fn shown(&self) -> Vec<String> {
        self.frames
            .iter()
            .map(|frame| {
                let params = &frame["params"];
                let data = params["data"].as_str().map(|data| BASE64.decode(data).expect("base64"));
                let offset = params.get("byte_offset").or(params.get("start_offset")).or(params.get("next_offset"));
                format!(
                    "{} {} {}",
                    frame["method"].as_str().unwrap_or_default(),
                    offset.and_then(Value::as_u64).unwrap_or(u64::MAX),
                    String::from_utf8_lossy(&data.unwrap_or_default())
                )
            })
            .collect()
    }
}

#[test]
fn output_that_comes_before_its_started_event_is_kept_and_sent_as_a_snapshot_right_after_it() {
    let (mut output, mut queue) = (RemoteOutput::new("s".into()), Queue::new());
    output.go_live(&mut queue.offer()).expect("live");
    output.on_output(chunk("c1", 0, "hello "), &mut queue.offer()).expect("early chunk");
    assert!(queue.frames.is_empty(), "nothing before the started event");
    output.after_event(&started(5, "c1"), &mut queue.offer()).expect("started");
    output.on_output(chunk("c1", 6, "world"), &mut queue.offer()).expect("chunk");
    output.after_event(&terminated(6, "c1"), &mut queue.offer()).expect("terminated");
    output.on_output(chunk("c1", 11, "late"), &mut queue.offer()).expect("late chunk");
    assert_eq!(queue.shown(), ["events.tool_output_snapshot 0 hello ", "events.tool_output_delta 6 world"]);
}

#[test]
fn nothing_is_sent_during_the_replay_and_the_running_calls_snapshots_come_when_it_turns_live() {
    let (mut output, mut queue) = (RemoteOutput::new("s".into()), Queue::new());
    output.after_event(&started(3, "c1"), &mut queue.offer()).expect("replayed started");
    output.on_output(chunk("c1", 0, "abc"), &mut queue.offer()).expect("chunk during replay");
    output.after_event(&started(4, "c2"), &mut queue.offer()).expect("replayed started");
    output.after_event(&terminated(5, "c2"), &mut queue.offer()).expect("replayed terminated");
    assert!(queue.frames.is_empty());
    output.go_live(&mut queue.offer()).expect("live");
    output.on_output(chunk("c1", 3, "d"), &mut queue.offer()).expect("chunk");
    assert_eq!(queue.shown(), ["events.tool_output_snapshot 0 abc", "events.tool_output_delta 3 d"]);
}

#[test]
fn a_chunk_lost_on_the_way_or_for_room_is_owed_as_a_gap_before_the_next_delta() {
    let (mut output, mut queue) = (RemoteOutput::new("s".into()), Queue::new());
    output.go_live(&mut queue.offer()).expect("live");
    output.after_event(&started(2, "c1"), &mut queue.offer()).expect("started");
    output.on_output(chunk("c1", 0, "ab"), &mut queue.offer()).expect("chunk");
    // Bytes 2..4 never arrived.
    output.on_output(chunk("c1", 4, "ef"), &mut queue.offer()).expect("chunk after a hole");
    queue.room = 0;
    output.on_output(chunk("c1", 6, "gh"), &mut queue.offer()).expect("no room");
    queue.room = usize::MAX;
    output.on_output(chunk("c1", 8, "ij"), &mut queue.offer()).expect("room again");
    assert_eq!(
        queue.shown(),
        [
            "events.tool_output_delta 0 ab",
            "events.tool_output_gap 4 ",
            "events.tool_output_delta 4 ef",
            "events.tool_output_gap 8 ",
            "events.tool_output_delta 8 ij",
        ]
    );
}

#[test]
fn an_ended_call_keeps_nothing() {
    let mut output = RemoteOutput::new("s".into());
    output.on_output(chunk("c1", 0, "abc"), &mut Queue::new().offer()).expect("chunk");
    output.on_output(SharedOutput::Ended { tool_call_id: "c1".into() }, &mut Queue::new().offer()).expect("end");
    assert!(output.windows.is_empty());
}

#[test]
fn only_the_last_64_kib_of_a_stream_are_kept() {
    let (mut output, mut queue) = (RemoteOutput::new("s".into()), Queue::new());
    let big = "x".repeat(TOOL_OUTPUT_RETAINED_BYTES + 10);
    output.on_output(chunk("c1", 0, &big), &mut queue.offer()).expect("chunk");
    output.go_live(&mut queue.offer()).expect("live");
    output.after_event(&started(2, "c1"), &mut queue.offer()).expect("started");
    assert_eq!(queue.frames.len(), 1);
    assert_eq!(queue.frames[0]["params"]["start_offset"], 10);
    assert_eq!(queue.frames[0]["params"]["end_offset"], (TOOL_OUTPUT_RETAINED_BYTES + 10) as u64);
}
