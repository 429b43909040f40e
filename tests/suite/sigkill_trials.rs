//! SIGKILL at a random moment under a mixed load: renames, runs (scripted model, yolo mode) and session creates
//! from several clients, while a subscriber records every event it is sent. After a restart on the same data
//! directory, everything acknowledged is there exactly once and in order, and a run left in flight ends
//! `run_interrupted`.
//!
//! The trials are seeded; a failure prints the seed, and `TROUPE_TEST_SEED=<seed>` replays its choices (which
//! operations, on which sessions, and after how many acknowledgements the kill comes; the exact moment still
//! depends on timing).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use troupe_protocol::client::{Client, ClientDelivery, ClientError, Deliveries};
use troupe_protocol::method;
use troupe_protocol::types::common::SessionIdParams;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::run::RunStartParams;
use troupe_protocol::types::session::{
    PermissionMode, SessionCreateParams, SessionRenameParams, SetPermissionModeParams, TitleChange,
};

use super::support::*;

const TRIALS: u64 = 20;
/// Clients sending the load, besides the subscriber.
const WORKERS: u64 = 3;
/// Sessions created before the load starts.
const INITIAL_SESSIONS: usize = 2;

/// xorshift64*: tiny and seedable, enough to choose operations reproducibly.
struct TrialRng(u64);

impl TrialRng {
    fn new(seed: u64) -> TrialRng {
        // Spread nearby seeds apart; the state must never be zero.
        TrialRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn pick<'a>(&mut self, items: &'a [String]) -> Option<&'a String> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

/// Prints the seed when the test fails (its output is shown only then).
struct SeedReport {
    seed: u64,
    trial: u64,
}

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("sigkill trial {} failed; replay its choices with TROUPE_TEST_SEED={}", self.trial, self.seed);
        }
    }
}

struct AckedRename {
    session_id: String,
    client_rename_id: String,
    title: String,
    seq: u64,
}

struct AckedRun {
    session_id: String,
    run_id: String,
}

/// What the daemon acknowledged before it was killed.
#[derive(Default)]
struct Acknowledged {
    /// Sessions whose `session.create` was answered, the initial ones first.
    sessions: Vec<String>,
    /// Sessions in yolo mode, where runs are started.
    runnable: Vec<String>,
    renames: Vec<AckedRename>,
    runs: Vec<AckedRun>,
    /// The events the subscriber was sent, per session, in the order it got them.
    seen: HashMap<String, Vec<StoredEvent>>,
}

/// Every other turn calls the shell, and the text turns take a moment, so that kills land inside runs too.
fn script() -> Value {
    let pair = [
        json!({"tool_calls": [{"tool": "shell", "arguments": {"command": "echo step"}}]}),
        json!({"text": "step done", "delay_ms": 20}),
    ];
    json!({"turns": pair.iter().cycle().take(200).cloned().collect::<Vec<_>>()})
}

/// An error of a call made while the daemon may be dying: the connection's end stops the worker; a JSON-RPC
/// error is a bug.
fn alive<T>(result: Result<T, ClientError>, what: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(ClientError::Rpc(error)) => panic!("{what} failed while the daemon was running: {error:?}"),
        Err(_) => None,
    }
}

struct Worker {
    client: Client,
    subscriber: Arc<Client>,
    acknowledged: Arc<Mutex<Acknowledged>>,
    acks: Arc<AtomicUsize>,
    project: PathBuf,
    rng: TrialRng,
    name: String,
}

impl Worker {
    /// Sends operations one after another until the daemon is gone.
    async fn run(mut self) {
        for index in 0u64.. {
            let going_on = match self.rng.below(10) {
                0..=5 => self.rename(index).await,
                6..=7 => self.start_run(index).await,
                _ => self.create().await,
            };
            if going_on.is_none() {
                return;
            }
        }
    }

    async fn rename(&mut self, index: u64) -> Option<()> {
        let session_id = self.rng.pick(&self.acknowledged.lock().sessions).cloned()?;
        let id = format!("{}-{index}", self.name);
        let title = format!("title {id}");
        let reply = self
            .client
            .call::<method::SessionRename>(SessionRenameParams {
                session_id: session_id.clone(),
                client_rename_id: id.clone(),
                change: TitleChange::Set { title: title.clone() },
            })
            .await;
        let reply = alive(reply, "session.rename")?;
        let seq = reply.session.title_updated_seq.expect("a set title has a seq");
        self.acknowledged.lock().renames.push(AckedRename { session_id, client_rename_id: id, title, seq });
        self.acks.fetch_add(1, Ordering::Relaxed);
        Some(())
    }

    async fn start_run(&mut self, index: u64) -> Option<()> {
        let Some(session_id) = self.rng.pick(&self.acknowledged.lock().runnable).cloned() else { return Some(()) };
        let reply = self
            .client
            .call::<method::RunStart>(RunStartParams {
                session_id: session_id.clone(),
                client_run_id: format!("{}-run-{index}", self.name),
                selection: selection_of("default", "local/scripted"),
                input: "go".into(),
                reset_fallback: false,
                attachments: Vec::new(),
            })
            .await;
        let reply = match reply {
            // A run is still going in that session: nothing was started, pick again.
            Err(ClientError::Rpc(error)) if error.typed_code() == Some("session_busy") => return Some(()),
            other => alive(other, "run.start")?,
        };
        self.acknowledged.lock().runs.push(AckedRun { session_id, run_id: reply.run_id });
        self.acks.fetch_add(1, Ordering::Relaxed);
        Some(())
    }

    async fn create(&mut self) -> Option<()> {
        let reply = self
            .client
            .call::<method::SessionCreate>(SessionCreateParams {
                selection: echo_selection(),
                cwd: Some(self.project.to_string_lossy().into_owned()),
            })
            .await;
        let session_id = alive(reply, "session.create")?.session.session_id;
        self.acknowledged.lock().sessions.push(session_id.clone());
        self.acks.fetch_add(1, Ordering::Relaxed);
        alive(self.subscriber.subscribe(&session_id, None).await, "events.subscribe")?;
        let mode = self
            .client
            .call::<method::SessionSetPermissionMode>(SetPermissionModeParams {
                session_id: session_id.clone(),
                mode: PermissionMode::Yolo,
            })
            .await;
        alive(mode, "session.set_permission_mode")?;
        self.acknowledged.lock().runnable.push(session_id);
        Some(())
    }
}

/// Records every event the subscriber is sent until its connection ends.
async fn record_deliveries(mut deliveries: Deliveries, acknowledged: Arc<Mutex<Acknowledged>>) {
    while let Some(delivery) = deliveries.next().await {
        if let ClientDelivery::Live(event) | ClientDelivery::ReplayEvent(event) = delivery {
            acknowledged.lock().seen.entry(event.session_id.clone()).or_default().push(event);
        }
    }
}

/// The complete lines of every session log on disk: what the killed daemon had written. An unterminated last line
/// (a write torn by the kill) was never acknowledged and is left out.
fn logs_on_disk(data_dir: &Path) -> HashMap<String, Vec<StoredEvent>> {
    let mut logs = HashMap::new();
    for entry in std::fs::read_dir(data_dir.join("sessions")).expect("sessions dir") {
        let dir = entry.expect("entry").path();
        let Ok(text) = std::fs::read_to_string(dir.join("events.jsonl")) else { continue };
        let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
        let events = complete
            .lines()
            .map(|line| serde_json::from_str::<StoredEvent>(line).unwrap_or_else(|error| panic!("{dir:?}: {error}")))
            .collect();
        logs.insert(dir.file_name().expect("name").to_string_lossy().into_owned(), events);
    }
    logs
}

fn ends_run(event: &StoredEvent) -> bool {
    is_terminal(event)
}

/// Runs started in `log` that have not ended there.
fn runs_in_flight(log: &[StoredEvent]) -> HashSet<String> {
    let mut running = HashSet::new();
    for event in log {
        match &event.payload {
            EventPayload::RunStarted { .. } => {
                running.insert(event.run_id.clone().expect("run_started has a run id"));
            }
            _ if ends_run(event) => {
                running.remove(event.run_id.as_deref().expect("a run's end has a run id"));
            }
            _ => {}
        }
    }
    running
}

/// The whole log of `session_id` as a fresh subscription replays it.
async fn replay(client: &Client, deliveries: &mut Deliveries, session_id: &str) -> Vec<StoredEvent> {
    let collect = async {
        let mut events = Vec::new();
        loop {
            match deliveries.next().await.expect("deliveries open") {
                ClientDelivery::ReplayEvent(event) if event.session_id == session_id => events.push(event),
                ClientDelivery::ReplayEnd { session_id: ended, .. } if ended == session_id => return events,
                _ => {}
            }
        }
    };
    let (subscribed, events) =
        within("replay", async { tokio::join!(client.subscribe(session_id, None), collect) }).await;
    let last_seq = subscribed.expect("events.subscribe");
    assert_eq!(events.last().map(|event| event.seq), Some(last_seq), "the replay ends at last_seq");
    events
}

/// Checks that hold for any log: seqs strictly increasing from `session_created` at 1, no id recorded twice,
/// every run started once and ended at most once.
fn check_log_shape(session_id: &str, log: &[StoredEvent]) {
    assert!(matches!(log.first().map(|e| (&e.payload, e.seq)), Some((EventPayload::SessionCreated { .. }, 1))));
    for pair in log.windows(2) {
        assert!(pair[0].seq < pair[1].seq, "{session_id}: seq {} after {}", pair[1].seq, pair[0].seq);
    }
    let mut renames = HashSet::new();
    let mut started = HashSet::new();
    let mut ended = HashSet::new();
    for event in log {
        assert_eq!(event.session_id, session_id);
        match &event.payload {
            EventPayload::SessionCreated { .. } => assert_eq!(event.seq, 1, "one session_created, first"),
            EventPayload::SessionTitleCommitted { client_rename_id, .. } => {
                assert!(renames.insert(client_rename_id.clone()), "{session_id}: rename {client_rename_id} twice");
            }
            EventPayload::RunStarted { .. } => {
                let run_id = event.run_id.clone().expect("run id");
                assert!(started.insert(run_id.clone()), "{session_id}: run {run_id} started twice");
            }
            _ if ends_run(event) => {
                let run_id = event.run_id.clone().expect("run id");
                assert!(started.contains(&run_id), "{session_id}: run {run_id} ended before it started");
                assert!(ended.insert(run_id.clone()), "{session_id}: run {run_id} ended twice");
            }
            _ => {}
        }
    }
}

/// Verifies one session after the restart; returns how many of its runs were left in flight.
async fn verify_session(
    client: &Client,
    deliveries: &mut Deliveries,
    session_id: &str,
    on_disk: &[StoredEvent],
    acknowledged: &Acknowledged,
) -> usize {
    let in_flight = runs_in_flight(on_disk);
    // The restarted daemon interrupts the runs it finds in flight; wait until it has.
    let log = eventually_some("runs left in flight end", WAIT, async || {
        let log = replay(client, deliveries, session_id).await;
        runs_in_flight(&log).is_empty().then_some(log)
    })
    .await;
    check_log_shape(session_id, &log);

    // What was on disk is replayed unchanged; after it, only the runs left in flight are written to, each ending
    // `run_interrupted`.
    assert!(log.len() >= on_disk.len() && log[..on_disk.len()] == *on_disk, "{session_id}: the log on disk changed");
    for event in &log[on_disk.len()..] {
        let run = event.run_id.as_deref().unwrap_or_default();
        assert!(in_flight.contains(run), "{session_id}: unexpected event after the restart: {event:?}");
    }
    for event in log[on_disk.len()..].iter().filter(|event| ends_run(event)) {
        assert!(matches!(event.payload, EventPayload::RunInterrupted { .. }), "{session_id}: {event:?}");
    }

    // Every event the subscriber was sent is there, at its seq, and it was sent them in order.
    let by_seq: HashMap<u64, &StoredEvent> = log.iter().map(|event| (event.seq, event)).collect();
    let seen = acknowledged.seen.get(session_id).map(Vec::as_slice).unwrap_or_default();
    for pair in seen.windows(2) {
        assert!(pair[0].seq < pair[1].seq, "{session_id}: sent seq {} after {}", pair[1].seq, pair[0].seq);
    }
    for event in seen {
        assert_eq!(by_seq.get(&event.seq), Some(&event), "{session_id}: a sent event was lost or changed");
    }

    // Every acknowledged rename is there, at the seq its reply named; the title is the last acknowledged one or a
    // later one.
    let mut last_acknowledged = 0;
    for rename in acknowledged.renames.iter().filter(|rename| rename.session_id == session_id) {
        let event = by_seq.get(&rename.seq).unwrap_or_else(|| panic!("{session_id}: rename at {} lost", rename.seq));
        let EventPayload::SessionTitleCommitted { client_rename_id, title, .. } = &event.payload else {
            panic!("{session_id}: seq {} is not the acknowledged rename: {event:?}", rename.seq)
        };
        assert_eq!((client_rename_id, title.as_deref()), (&rename.client_rename_id, Some(rename.title.as_str())));
        last_acknowledged = last_acknowledged.max(rename.seq);
    }
    let last_title = log.iter().rev().find_map(|event| match &event.payload {
        EventPayload::SessionTitleCommitted { title, .. } => Some((event.seq, title.clone())),
        _ => None,
    });
    assert!(last_title.as_ref().map_or(0, |(seq, _)| *seq) >= last_acknowledged);
    let meta =
        within("session.get", client.call::<method::SessionGet>(SessionIdParams { session_id: session_id.into() }))
            .await
            .expect("an acknowledged session exists")
            .session;
    assert_eq!(meta.title, last_title.and_then(|(_, title)| title), "{session_id}: the title is the log's last");
    assert!(meta.skipped_events.iter().all(|skipped| skipped.reason.contains("torn")), "{:?}", meta.skipped_events);

    // Every acknowledged run started exactly once (`check_log_shape`) and has ended.
    let started: HashSet<&str> = log
        .iter()
        .filter(|event| matches!(event.payload, EventPayload::RunStarted { .. }))
        .filter_map(|event| event.run_id.as_deref())
        .collect();
    for run in acknowledged.runs.iter().filter(|run| run.session_id == session_id) {
        assert!(started.contains(run.run_id.as_str()), "{session_id}: acknowledged run {} lost", run.run_id);
    }
    in_flight.len()
}

/// One trial: load, kill, restart, verify. Returns how many runs were left in flight.
async fn trial(seed: u64) -> usize {
    let mut rng = TrialRng::new(seed);
    let data_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let acknowledged: Arc<Mutex<Acknowledged>> = Arc::default();
    let (setup, _setup_deliveries) = daemon.client().await;
    connect_script(&setup, data_dir.path(), script()).await;
    let (subscriber, subscriber_deliveries) = daemon.client().await;
    let subscriber = Arc::new(subscriber);
    let recorder = tokio::spawn(record_deliveries(subscriber_deliveries, acknowledged.clone()));
    for _ in 0..INITIAL_SESSIONS {
        let session = create_session_in(&setup, project.path()).await;
        set_mode(&setup, &session.session_id, PermissionMode::Yolo).await;
        within("subscribe", subscriber.subscribe(&session.session_id, None)).await.expect("subscribe");
        let mut acknowledged = acknowledged.lock();
        acknowledged.sessions.push(session.session_id.clone());
        acknowledged.runnable.push(session.session_id);
    }

    let acks = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for index in 0..WORKERS {
        let worker = Worker {
            client: daemon.client().await.0,
            subscriber: subscriber.clone(),
            acknowledged: acknowledged.clone(),
            acks: acks.clone(),
            project: project.path().to_path_buf(),
            rng: TrialRng::new(rng.next()),
            name: format!("w{index}"),
        };
        workers.push(tokio::spawn(worker.run()));
    }
    let kill_after = 3 + rng.below(150) as usize;
    eventually("acknowledgements", || acks.load(Ordering::Relaxed) >= kill_after).await;
    daemon.kill();
    for worker in workers {
        within("a worker stops", worker).await.expect("worker");
    }
    within("the subscriber's connection ends", recorder).await.expect("recorder");
    drop(setup);
    let on_disk = logs_on_disk(data_dir.path());

    let daemon = spawn_daemon(data_dir.path(), "127.0.0.1:0");
    let (client, mut deliveries) = daemon.client().await;
    let acknowledged = std::mem::take(&mut *acknowledged.lock());
    let mut in_flight = 0;
    for session_id in &acknowledged.sessions {
        let log = on_disk.get(session_id).unwrap_or_else(|| panic!("acknowledged session {session_id} has no log"));
        in_flight += verify_session(&client, &mut deliveries, session_id, log, &acknowledged).await;
    }
    for run in &acknowledged.runs {
        assert!(acknowledged.sessions.contains(&run.session_id));
    }
    client.close().await;
    in_flight
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sigkills_under_mixed_load_lose_nothing_acknowledged_and_interrupt_runs_in_flight() {
    let base_seed = std::env::var("TROUPE_TEST_SEED").ok().and_then(|seed| seed.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64
    });
    let mut interrupted = 0;
    for trial_index in 0..TRIALS {
        let seed = base_seed.wrapping_add(trial_index);
        let _report = SeedReport { seed, trial: trial_index };
        interrupted += trial(seed).await;
    }
    // The trials must have exercised the interruption they claim to check.
    assert!(interrupted > 0, "no trial killed the daemon during a run (seed {base_seed})");
}
