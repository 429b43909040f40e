//! A remote named subscription's rules, without a cluster: frames are collected as the sink would queue them.

use std::cell::RefCell;

use serde_json::Value;
use troupe_protocol::types::tool_output::TOOL_OUTPUT_RETAINED_BYTES;

use super::*;

/// Collects what is offered; `room` transient frames fit, then the queue is full (the end always fits).
struct Queue {
    frames: RefCell<Vec<Value>>,
    room: RefCell<usize>,
}

impl Queue {
    fn new() -> Queue {
        Queue { frames: RefCell::new(vec![]), room: RefCell::new(usize::MAX) }
    }

    fn set_room(&self, room: usize) {
        *self.room.borrow_mut() = room;
    }

    /// Each frame as `method offset text`, or `end {offsets}`; the frames are taken.
    fn take(&self) -> Vec<String> {
        self.frames
            .take()
            .iter()
            .map(|frame| {
                let params = &frame["params"];
                assert_eq!(params["subscription_id"], "sub", "{frame}");
                assert_eq!(params["run_id"], "r1", "{frame}");
                let method = frame["method"].as_str().unwrap_or_default().trim_start_matches("events.tool_output_");
                if method == "end" {
                    return format!("end {}", params["end_offsets"]);
                }
                let data = params["data"].as_str().map(|data| BASE64.decode(data).expect("base64"));
                let offset = params.get("byte_offset").or(params.get("start_offset")).or(params.get("next_offset"));
                format!(
                    "{method} {} {}{}",
                    params["stream"].as_str().unwrap_or_default(),
                    offset.and_then(Value::as_u64).unwrap_or(u64::MAX),
                    data.map(|data| format!(" {}", String::from_utf8_lossy(&data))).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl NamedSink for Queue {
    fn offer_transient(&self, frame: &ByteString) -> Result<bool, SinkGone> {
        let mut room = self.room.borrow_mut();
        if *room == 0 {
            return Ok(false);
        }
        *room -= 1;
        self.frames.borrow_mut().push(serde_json::from_str(frame).expect("a frame is JSON"));
        Ok(true)
    }

    fn offer_end(&self, frame: &ByteString) {
        self.frames.borrow_mut().push(serde_json::from_str(frame).expect("a frame is JSON"));
    }
}

fn target(stream: Option<OutputStream>, from_offset: u64) -> NamedTarget {
    NamedTarget {
        session_id: "s".into(),
        tool_call_id: "c1".into(),
        subscription_id: "sub".into(),
        stream,
        from_offset,
    }
}

fn chunk(call: &str, stream: OutputStream, offset: u64, data: &str) -> SharedOutput {
    SharedOutput::Chunk {
        run_id: "r1".into(),
        tool_call_id: call.into(),
        stream,
        offset,
        data: data.as_bytes().to_vec(),
    }
}

fn stdout(offset: u64, data: &str) -> SharedOutput {
    chunk("c1", OutputStream::Stdout, offset, data)
}

fn durable(offset: u64, text: &str) -> CallEvent {
    CallEvent::Progress { stream: OutputStream::Stdout, offset, bytes: Some(text.as_bytes().to_vec()) }
}

fn record(events: Vec<CallEvent>) -> CallRecord {
    CallRecord { run_id: "r1".into(), events, through: 9 }
}

fn ended() -> SharedOutput {
    SharedOutput::Ended { tool_call_id: "c1".into() }
}

#[test]
fn a_running_call_gets_the_durable_and_heard_bytes_as_one_snapshot_then_deltas_then_one_end() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(None, 2)), Queue::new());
    output.on_shared(stdout(4, "ef"), &queue).expect("heard");
    output.on_shared(chunk("c2", OutputStream::Stdout, 0, "other call"), &queue).expect("another call");
    assert!(queue.take().is_empty(), "nothing before the record is read");
    let running = output.serve(&record(vec![durable(0, "abcd")]), &queue).expect("served");
    assert!(running);
    output.on_shared(stdout(6, "gh"), &queue).expect("delta");
    output.on_shared(chunk("c1", OutputStream::Stderr, 0, "oops"), &queue).expect("stderr");
    // A durable chunk read later says nothing new.
    output.on_logged(&durable(0, "abcdefgh"), &queue).expect("durable");
    output.on_shared(ended(), &queue).expect("end");
    output.on_logged(&CallEvent::Ended, &queue).expect("the end read later");
    output.on_shared(stdout(8, "late"), &queue).expect("late");
    assert_eq!(
        queue.take(),
        ["snapshot stdout 2 cdef", "delta stdout 6 gh", "delta stderr 2 ps", r#"end {"stderr":4,"stdout":8}"#]
    );
    assert_eq!(output.phase(), Phase::Over);
}

#[test]
fn bytes_known_neither_durably_nor_live_are_a_gap_never_invented() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    // The durable part ends at 3; the follow began after byte 10.
    output.on_shared(stdout(10, "kl"), &queue).expect("heard");
    output.serve(&record(vec![durable(0, "abc")]), &queue).expect("served");
    // A chunk lost on the way: 12..14 never arrives.
    output.on_shared(stdout(14, "op"), &queue).expect("after a hole");
    assert_eq!(
        queue.take(),
        ["snapshot stdout 0 abc", "gap stdout 10", "delta stdout 10 kl", "gap stdout 14", "delta stdout 14 op"]
    );
}

#[test]
fn with_nothing_known_before_the_first_delta_it_is_told_where_the_output_picks_up() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    output.serve(&record(vec![]), &queue).expect("served");
    output.on_shared(stdout(5, "fg"), &queue).expect("delta");
    assert_eq!(queue.take(), ["gap stdout 5", "delta stdout 5 fg"]);

    // From an offset past what was printed, nothing before it is owed.
    let (mut later, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 5)), Queue::new());
    later.serve(&record(vec![]), &queue).expect("served");
    later.on_shared(stdout(5, "fg"), &queue).expect("delta");
    assert_eq!(queue.take(), ["delta stdout 5 fg"]);
}

#[test]
fn a_durable_chunk_read_later_fills_a_hole_nothing_was_sent_past() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    output.serve(&record(vec![]), &queue).expect("served");
    output.on_logged(&durable(0, "abcd"), &queue).expect("durable");
    output.on_shared(stdout(4, "e"), &queue).expect("live");
    assert_eq!(queue.take(), ["delta stdout 0 abcd", "delta stdout 4 e"]);
}

#[test]
fn a_delta_without_room_is_owed_as_a_gap_before_the_next() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    output.serve(&record(vec![]), &queue).expect("served");
    output.on_shared(stdout(0, "ab"), &queue).expect("delta");
    queue.set_room(0);
    output.on_shared(stdout(2, "cd"), &queue).expect("no room");
    queue.set_room(1);
    output.on_shared(stdout(4, "ef"), &queue).expect("room for the gap only");
    queue.set_room(usize::MAX);
    output.on_shared(stdout(6, "gh"), &queue).expect("room");
    output.on_shared(ended(), &queue).expect("end");
    assert_eq!(
        queue.take(),
        ["delta stdout 0 ab", "gap stdout 4", "gap stdout 6", "delta stdout 6 gh", r#"end {"stdout":8}"#]
    );
}

#[test]
fn an_ended_call_is_served_whole_from_the_log_with_its_elided_length() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(None, 1)), Queue::new());
    let events = vec![
        durable(0, "abc"),
        durable(3, "def"),
        CallEvent::Elided { stream: OutputStream::Stdout, elided_bytes: 100 },
        CallEvent::Ended,
    ];
    let running = output.serve(&record(events), &queue).expect("served");
    assert!(!running);
    assert_eq!(queue.take(), ["snapshot stdout 1 bcdef", r#"end {"stderr":0,"stdout":106}"#]);
    assert_eq!(output.phase(), Phase::Over);
}

#[test]
fn a_chunk_whose_bytes_the_log_does_not_hold_is_a_gap_and_hides_the_elided_length() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    let events = vec![
        durable(0, "ab"),
        CallEvent::Progress { stream: OutputStream::Stdout, offset: 2, bytes: None },
        durable(5, "fg"),
        CallEvent::Progress { stream: OutputStream::Stdout, offset: 7, bytes: None },
        CallEvent::Elided { stream: OutputStream::Stdout, elided_bytes: 50 },
        CallEvent::Ended,
    ];
    output.serve(&record(events), &queue).expect("served");
    assert_eq!(queue.take(), ["snapshot stdout 0 ab", "gap stdout 5", "delta stdout 5 fg", r#"end {"stdout":7}"#]);
}

#[test]
fn an_end_heard_while_the_record_was_read_ends_the_subscription_at_once() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    output.on_shared(stdout(0, "abc"), &queue).expect("heard");
    output.on_shared(ended(), &queue).expect("ended");
    assert!(output.ended_heard());
    let running = output.serve(&record(vec![]), &queue).expect("served");
    assert!(!running);
    assert_eq!(queue.take(), ["snapshot stdout 0 abc", r#"end {"stdout":3}"#]);
}

#[test]
fn only_the_last_64_kib_heard_before_the_record_is_kept() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    let big = "x".repeat(TOOL_OUTPUT_RETAINED_BYTES + 10);
    output.on_shared(stdout(0, &big), &queue).expect("heard");
    output.serve(&record(vec![]), &queue).expect("served");
    let frames = queue.frames.borrow();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["params"]["start_offset"], 10);
}

#[test]
fn a_closed_subscription_is_sent_nothing_more() {
    let (mut output, queue) = (RemoteNamedOutput::new(target(Some(OutputStream::Stdout), 0)), Queue::new());
    output.serve(&record(vec![]), &queue).expect("served");
    output.close();
    output.on_shared(stdout(0, "ab"), &queue).expect("ignored");
    output.on_shared(ended(), &queue).expect("ignored");
    assert!(queue.take().is_empty());
}
