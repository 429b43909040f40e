use troupe_protocol::types::events::ToolCallRecord;
use troupe_protocol::types::run::ToolEmittedMessage;

use super::*;

fn event(seq: u64, payload: EventPayload) -> StoredEvent {
    StoredEvent { session_id: "s".into(), run_id: Some("r".into()), seq, timestamp: "t".into(), origin: None, payload }
}

fn turn_with_call(seq: u64, id: &str) -> StoredEvent {
    turn_with_calls(seq, &[id])
}

fn terminated(seq: u64, id: &str, output: &str, messages: Vec<ToolEmittedMessage>) -> StoredEvent {
    event(
        seq,
        EventPayload::ToolCallTerminated {
            tool_call_id: id.into(),
            result: PersistedToolResult {
                status: ToolResultStatus::Ok,
                output: output.into(),
                display: None,
                output_ref: None,
                additional_messages: messages,
            },
        },
    )
}

fn message(role: MessageRole, text: &str) -> ToolEmittedMessage {
    ToolEmittedMessage { role, parts: vec![MessagePart::Text { text: text.into() }] }
}

fn texts(message: &ChatMessage) -> Vec<String> {
    match message {
        ChatMessage::User { parts } => parts
            .iter()
            .map(|part| match part {
                UserPart::Text(text) => text.clone(),
                UserPart::File { path, .. } => format!("file:{path}"),
            })
            .collect(),
        other => vec![format!("{other:?}")],
    }
}

#[test]
fn the_result_comes_first_then_its_messages_in_order_with_system_ones_marked() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_call(2, "c1"));
    transcript.apply(&terminated(
        3,
        "c1",
        "result",
        vec![message(MessageRole::User, "from the user role"), message(MessageRole::System, "from the system role")],
    ));
    let messages = transcript.messages();
    assert_eq!(messages.len(), 4);
    assert!(matches!(&messages[1], ChatMessage::ToolResult { tool_call_id, tool, content, is_error: false }
        if tool_call_id == "c1" && tool == "probe" && content == "result"));
    assert_eq!(texts(&messages[2]), ["from the user role"]);
    assert_eq!(texts(&messages[3]), [SYSTEM_MESSAGE_MARKER, "from the system role"]);
}

#[test]
fn a_replayed_termination_replaces_the_unit_instead_of_adding_its_messages_twice() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_call(2, "c1"));
    transcript.apply(&terminated(
        3,
        "c1",
        "first",
        vec![message(MessageRole::User, "a"), message(MessageRole::User, "b")],
    ));
    transcript.apply(&turn_with_call(4, "c2"));
    transcript.apply(&terminated(5, "c2", "other", vec![]));
    // The same call terminates again, now with one message: its unit shrinks in place.
    transcript.apply(&terminated(6, "c1", "second", vec![message(MessageRole::User, "c")]));
    let shape: Vec<String> = transcript
        .messages()
        .iter()
        .map(|message| match message {
            ChatMessage::ToolResult { content, .. } => format!("result {content}"),
            ChatMessage::Assistant { tool_calls, .. } => format!("call {}", tool_calls[0].tool_call_id),
            user => texts(user).join(" "),
        })
        .collect();
    assert_eq!(shape, ["call c1", "result second", "c", "call c2", "result other"]);
    // And a later replacement of c2 still finds its (moved) unit.
    transcript.apply(&terminated(7, "c2", "other again", vec![message(MessageRole::User, "d")]));
    assert_eq!(texts(transcript.messages().last().unwrap()), ["d"]);
}

fn turn_with_calls(seq: u64, ids: &[&str]) -> StoredEvent {
    event(
        seq,
        EventPayload::ModelTurnCommitted {
            attempt_id: "a".into(),
            model: "local/scripted".into(),
            fallback_index: 0,
            text: String::new(),
            reasoning: None,
            tool_calls: ids
                .iter()
                .map(|id| ToolCallRecord {
                    tool_call_id: (*id).into(),
                    tool: "probe".into(),
                    arguments: serde_json::json!({}),
                })
                .collect(),
        },
    )
}

fn shape(transcript: &Transcript) -> Vec<String> {
    transcript
        .messages()
        .iter()
        .map(|message| match message {
            ChatMessage::ToolResult { tool_call_id, .. } => format!("result {tool_call_id}"),
            ChatMessage::Assistant { tool_calls, .. } => format!("calls {}", tool_calls.len()),
            user => texts(user).join(" "),
        })
        .collect()
}

#[test]
fn all_results_of_a_turn_come_before_the_messages_its_tools_emitted() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_calls(2, &["c1", "c2", "c3"]));
    transcript.apply(&terminated(
        3,
        "c1",
        "r1",
        vec![message(MessageRole::User, "m1a"), message(MessageRole::User, "m1b")],
    ));
    transcript.apply(&terminated(4, "c2", "r2", vec![]));
    transcript.apply(&terminated(5, "c3", "r3", vec![message(MessageRole::System, "m3")]));
    transcript.apply(&event(
        6,
        EventPayload::UserInputSubmitted { input_id: "i".into(), input: "steer".into(), attachments: Vec::new() },
    ));
    assert_eq!(
        shape(&transcript),
        [
            "calls 3",
            "result c1",
            "result c2",
            "result c3",
            "m1a",
            "m1b",
            &format!("{SYSTEM_MESSAGE_MARKER} m3"),
            "steer"
        ]
    );
    // A replayed termination of the first call still lands in place, its messages before the later call's.
    transcript.apply(&terminated(7, "c1", "r1 again", vec![message(MessageRole::User, "m1c")]));
    assert_eq!(
        shape(&transcript)[1..7],
        ["result c1", "result c2", "result c3", "m1c", &format!("{SYSTEM_MESSAGE_MARKER} m3"), "steer"]
    );
}

#[test]
fn messages_out_of_bounds_are_left_out_with_a_note_and_the_result_is_kept() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_calls(2, &["c1", "c2"]));
    transcript.apply(&terminated(3, "c1", "too many", vec![message(MessageRole::User, "x"); 5]));
    let empty = ToolEmittedMessage { role: MessageRole::User, parts: Vec::new() };
    transcript.apply(&terminated(4, "c2", "an empty one", vec![message(MessageRole::User, "y"), empty]));
    let messages = transcript.messages();
    assert_eq!(messages.len(), 3, "{messages:?}");
    let contents: Vec<&str> = messages[1..]
        .iter()
        .map(|message| match message {
            ChatMessage::ToolResult { content, .. } => content.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(contents[0].starts_with("too many") && contents[0].contains("at most 4"), "{}", contents[0]);
    assert!(contents[1].contains("no content parts"), "{}", contents[1]);
}

#[test]
fn a_call_that_never_terminated_gets_an_error_result_so_the_turn_stays_answerable() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_calls(2, &["c1", "c2"]));
    transcript.apply(&terminated(3, "c1", "r1", vec![message(MessageRole::User, "m1")]));
    transcript.apply(&event(4, EventPayload::RunCancelled { reason: None }));
    let messages = transcript.messages();
    assert_eq!(shape(&transcript), ["calls 2", "result c1", "result c2", "m1"]);
    assert!(matches!(&messages[2], ChatMessage::ToolResult { content, is_error: true, .. }
        if content == UNFINISHED_CALL_RESULT));
}

#[test]
fn file_parts_become_attachments_to_load() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_call(2, "c1"));
    let file = MessagePart::File { path: "artifacts/a.png".into(), mime_type: "image/png".into(), name: None };
    transcript.apply(&terminated(
        3,
        "c1",
        "r",
        vec![ToolEmittedMessage { role: MessageRole::User, parts: vec![file] }],
    ));
    assert!(matches!(&transcript.messages()[2], ChatMessage::User { parts }
        if matches!(&parts[0], UserPart::File { path, content: FileContent::NotLoaded, .. }
            if path == "artifacts/a.png")));
}

#[test]
fn a_skill_invocation_reaches_the_model_as_its_rendered_text() {
    use troupe_protocol::types::common::{ModelSelection, RunSelection};
    use troupe_protocol::types::skills::{SkillInvocation, SkillSource};
    let mut transcript = Transcript::default();
    transcript.apply(&event(
        2,
        EventPayload::RunStarted {
            client_run_id: "c".into(),
            selection: RunSelection {
                agent: "default".into(),
                model: ModelSelection { model: "local/echo".into(), variant: None },
                preset: None,
            },
            input: "/review a.rs".into(),
            fallback_index: 0,
            model_chain: Vec::new(),
            reset_fallback: false,
            skill: Some(SkillInvocation {
                name: "review".into(),
                arguments: "a.rs".into(),
                source: SkillSource::Project,
                rendered: "Review a.rs.".into(),
            }),
            requested_model: None,
            attachments: Vec::new(),
        },
    ));
    assert_eq!(texts(&transcript.messages()[0]), ["Review a.rs."]);
}

fn checkpoint(seq: u64, through_seq: u64, summary: &str, counts: CompactionCounts) -> StoredEvent {
    event(
        seq,
        EventPayload::ContextCheckpointCommitted {
            compaction_id: "k".into(),
            summary: summary.into(),
            through_seq,
            trigger: troupe_protocol::types::events::CompactionTrigger::Manual,
            compacted_messages: counts.messages,
            elided_tool_results: counts.tool_units,
        },
    )
}

fn user_input(seq: u64, text: &str) -> StoredEvent {
    event(
        seq,
        EventPayload::UserInputSubmitted { input_id: format!("i{seq}"), input: text.into(), attachments: Vec::new() },
    )
}

#[test]
fn a_checkpoint_replaces_the_history_through_its_seq_and_later_events_follow_it() {
    let mut transcript = Transcript::default();
    assert_eq!(transcript.compaction_counts(), None, "nothing to compact");
    transcript.apply(&user_input(2, "first"));
    transcript.apply(&turn_with_calls(3, &["c1", "c2"]));
    transcript.apply(&terminated(4, "c1", "r1", vec![message(MessageRole::User, "m1")]));
    transcript.apply(&terminated(5, "c2", "r2", vec![]));
    // user, assistant, two results, one emitted message; two tool units.
    let counts = transcript.compaction_counts().unwrap();
    assert_eq!(counts, CompactionCounts { messages: 5, tool_units: 2 });
    assert_eq!(transcript.messages().len(), 5);

    transcript.apply(&user_input(6, "after the summarized range"));
    transcript.apply(&checkpoint(7, 5, "the summary", counts));
    let shape = shape(&transcript);
    assert_eq!(shape.len(), 2, "{shape:?}");
    assert!(shape[0].starts_with("[Summary of the earlier conversation.") && shape[0].ends_with("the summary"));
    assert!(shape[0].contains("5 earlier messages") && shape[0].contains("2 tool results"), "{}", shape[0]);
    assert_eq!(shape[1], "after the summarized range");

    // Only the summary: nothing new to compact yet.
    let mut only_summary = Transcript::default();
    only_summary.apply(&user_input(2, "x"));
    only_summary.apply(&checkpoint(3, 2, "s", CompactionCounts { messages: 1, tool_units: 0 }));
    assert_eq!(only_summary.compaction_counts(), None);

    // A later turn and a later checkpoint: the newer summary replaces the older one too.
    transcript.apply(&turn_with_call(8, "c3"));
    transcript.apply(&terminated(9, "c3", "r3", vec![]));
    assert_eq!(transcript.compaction_counts(), Some(CompactionCounts { messages: 4, tool_units: 1 }));
    transcript.apply(&checkpoint(10, 9, "second summary", CompactionCounts { messages: 4, tool_units: 1 }));
    let shape = self::shape(&transcript);
    assert_eq!(shape.len(), 1);
    assert!(shape[0].ends_with("second summary"));
}

#[test]
fn a_termination_of_a_compacted_call_does_not_come_back_and_later_calls_still_find_their_turn() {
    let mut transcript = Transcript::default();
    transcript.apply(&turn_with_call(2, "old"));
    transcript.apply(&turn_with_call(3, "kept"));
    transcript.apply(&checkpoint(4, 2, "s", CompactionCounts { messages: 2, tool_units: 1 }));
    // The compacted call terminates late (a replayed termination): not history.
    transcript.apply(&terminated(5, "old", "late", vec![message(MessageRole::User, "late message")]));
    // The call of the kept turn lands in its (moved) turn.
    transcript.apply(&terminated(6, "kept", "r", vec![]));
    let shape = shape(&transcript);
    assert_eq!(shape[1..], ["calls 1", "result kept"], "{shape:?}");
}

#[test]
fn elision_takes_the_oldest_units_whole_and_the_summary_request_elides_only_what_it_must() {
    let mut transcript = Transcript::default();
    transcript.apply(&user_input(2, "task"));
    let big = "x".repeat(4_000);
    // The units emitted two messages, none, and one.
    for (index, seq) in [3u64, 5, 7].iter().enumerate() {
        let id = format!("c{index}");
        transcript.apply(&turn_with_call(*seq, &id));
        let emitted = [2, 0, 1][index];
        transcript.apply(&terminated(seq + 1, &id, &big, vec![message(MessageRole::User, "emitted"); emitted]));
    }
    let elided = transcript.messages_eliding(2);
    let results: Vec<&str> = elided
        .iter()
        .filter_map(|message| match message {
            ChatMessage::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    // Each marker says how many emitted messages were lost with its result.
    assert_eq!(
        results,
        [
            "[tool result elided: left out, with the 2 messages the tool emitted, to fit the request]",
            "[tool result elided: left out to fit the request]",
            big.as_str()
        ]
    );
    let emitted = elided.iter().filter(|message| texts(message) == ["emitted"]).count();
    assert_eq!(emitted, 1, "an elided result's emitted messages go with it");

    // Each result is ~1,000 tokens: a 2,000-token window with a 200 reserve fits one of them, not two.
    let (request, elided) =
        crate::compaction::summary_request(&transcript, "m".into(), None, Some("tests"), Some((2_000, 200)), 3);
    assert_eq!(elided, 2);
    let last = texts(request.messages.last().unwrap()).join("");
    assert!(last.contains("2 of the oldest tool results") && last.contains("Focus the summary on: tests"), "{last}");
    assert!(request.tools.is_empty());
    let (_, none) = crate::compaction::summary_request(&transcript, "m".into(), None, None, None, 3);
    assert_eq!(none, 0, "without a known window nothing is elided");
}

#[test]
fn the_elision_marker_counts_the_emitted_messages_lost_with_the_result() {
    assert_eq!(elided_result(0), "[tool result elided: left out to fit the request]");
    assert_eq!(
        elided_result(1),
        "[tool result elided: left out, with the 1 message the tool emitted, to fit the request]"
    );
    assert_eq!(
        elided_result(4),
        "[tool result elided: left out, with the 4 messages the tool emitted, to fit the request]"
    );
}

#[test]
fn a_users_attachments_follow_the_text_of_their_input_and_of_a_submitted_steer() {
    use troupe_protocol::types::common::{ModelSelection, RunSelection};
    let file = |name: &str| AttachedFile {
        path: format!("artifacts/{name}"),
        mime_type: "image/png".into(),
        name: name.into(),
        size: 1,
    };
    let mut transcript = Transcript::default();
    transcript.apply(&event(
        2,
        EventPayload::RunStarted {
            client_run_id: "c".into(),
            selection: RunSelection {
                agent: "default".into(),
                model: ModelSelection { model: "local/echo".into(), variant: None },
                preset: None,
            },
            input: "look".into(),
            fallback_index: 0,
            model_chain: Vec::new(),
            reset_fallback: false,
            skill: None,
            requested_model: None,
            attachments: vec![file("a.png"), file("b.png")],
        },
    ));
    transcript.apply(&event(
        3,
        EventPayload::UserInputSubmitted {
            input_id: "i".into(),
            input: "and".into(),
            attachments: vec![file("c.png")],
        },
    ));
    let messages = transcript.messages();
    assert_eq!(texts(&messages[0]), ["look", "file:artifacts/a.png", "file:artifacts/b.png"]);
    assert_eq!(texts(&messages[1]), ["and", "file:artifacts/c.png"]);
    assert!(matches!(&messages[0], ChatMessage::User { parts }
        if matches!(&parts[1], UserPart::File { name: Some(name), content: FileContent::NotLoaded, .. } if name == "a.png")));
}
