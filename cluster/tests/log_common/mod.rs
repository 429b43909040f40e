//! What the cluster's test suites share: connecting, and building and comparing events.
#![allow(dead_code)]

use troupe_cluster::{Cluster, ClusterSettings, names};
use troupe_protocol::types::events::EventJson;
use troupe_runtime::event_log::LogEntry;

pub fn connect(urls: &str, node: &str) -> Cluster {
    Cluster::connect(ClusterSettings::plain(urls, node)).unwrap()
}

/// A small event with sequence `seq`.
pub fn event(seq: u64) -> LogEntry {
    event_sized(seq, 0)
}

/// An event with sequence `seq` and `filler` more bytes of text.
pub fn event_sized(seq: u64, filler: usize) -> LogEntry {
    let json = format!(r#"{{"seq":{seq},"type":"note","text":"{}"}}"#, "é".repeat(filler / 2));
    LogEntry { seq, json: EventJson::from_json(json).unwrap() }
}

pub fn seqs(entries: &[LogEntry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.seq).collect()
}

pub fn texts(entries: &[LogEntry]) -> Vec<String> {
    entries.iter().map(|entry| entry.json.as_str().to_owned()).collect()
}

/// Messages stored on `subject`.
pub fn messages_on(cluster: &Cluster, subject: &str) -> u64 {
    cluster.block_on(async {
        let stream = cluster.jetstream().get_stream(names::EVENT_STREAM).await.unwrap();
        let info = stream.info_with_subjects(subject).await.unwrap();
        let counts: Vec<(String, usize)> = futures::TryStreamExt::try_collect(info).await.unwrap();
        counts.iter().map(|(_, count)| *count as u64).sum()
    })
}

/// A real `session_created` event (seq 1) of `session_id`, as a session's local log starts.
pub fn session_created(session_id: &str) -> EventJson {
    use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin};
    use troupe_protocol::types::events::{EventPayload, StoredEvent};
    let event = StoredEvent {
        session_id: session_id.to_owned(),
        run_id: None,
        seq: 1,
        timestamp: "2026-12-02T00:00:00Z".to_owned(),
        origin: None,
        payload: EventPayload::SessionCreated {
            origin: SessionOrigin::Root,
            cwd: "/".to_owned(),
            selection: RunSelection {
                agent: "default".to_owned(),
                model: ModelSelection { model: "local/echo".to_owned(), variant: None },
                preset: None,
            },
        },
    };
    EventJson::encode(&event).unwrap()
}
