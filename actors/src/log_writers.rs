//! The log writers: a small fixed pool of long-lived threads that write every session's durable batches.
//!
//! A session actor never blocks its arbiter on a file: when it has a batch to make durable, it moves its log store
//! and the batch into a [`WriteJob`], queues it here, and awaits the job's oneshot answer (the store and batch come
//! back with the outcome). Before this pool, each batch was one `tokio::task::spawn_blocking`: a task allocated and
//! handed to the arbiter runtime's blocking pool per batch, whose threads also serve every other blocking call and
//! are parked and retired by the pool. Dedicated threads that only ever wait on one queue take a batch with one
//! wake-up.
//!
//! # Invariants
//!
//! - **One writer per session.** The store is moved into the job and comes back with the answer, and the actor
//!   queues its next batch only after that, so at most one job of a session exists; any thread may take it.
//! - **Nothing published before it is durable.** The answer is sent after `append_batch` returned (its
//!   `fdatasync` included); the actor publishes only then.
//! - **Bounded.** The queue holds at most [`QUEUE_BOUND`] jobs. Each live session has at most one job in it, so
//!   it fills only with that many sessions writing at once; a session that finds it full waits (asynchronously, on
//!   its own write future, never blocking its arbiter) for room, while its new events gather into its next batch.
//! - **Independent sessions overlap.** Batches of different sessions are in different files, so they cannot share
//!   an `fdatasync`; the pool has several threads (at least two, and two per session thread) taking jobs from one
//!   shared queue, so a session's fsync never waits behind another session's unless every thread is busy.
//! - **A failure poisons, a panic does not hang.** A failed write is answered as a failed outcome. A panic while
//!   writing drops the job, and with it the answer's sender: the actor sees its receiver fail and poisons the
//!   session, as for a failed write. The thread catches the panic and goes on serving other sessions.
//!
//! # Lifetime
//!
//! The engine owns the pool ([`LogWriters`]) and installs a handle on each of its session arbiters (a thread-local,
//! see [`LogWriters::installer`]): that handle is weak, so only the engine keeps the queue open.
//! [`LogWriters::stop`] (at engine shutdown, after the sessions drained) closes the queue; the threads finish the
//! jobs already queued and exit, and `stop` joins them (past a grace period it leaves a thread stuck in the kernel
//! detached). Dropping the pool without `stop` closes the queue too; the threads are then detached, which is safe
//! because each exits by itself as soon as the queue is empty and holds nothing but the stores of the jobs it is
//! finishing.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use troupe_runtime::error::RuntimeError;
use troupe_runtime::event_log::{EventStore, LogEntry};

/// A session's store as the writers take it: whichever backend the daemon runs on.
pub type SessionStore = Box<dyn EventStore>;

/// Jobs that may wait in the queue. Each live session has at most one job queued or being written, so this is
/// the number of sessions that can be waiting for a writer at once before a new one waits for room.
pub const QUEUE_BOUND: usize = 1024;

/// How long [`LogWriters::stop`] waits for the writer threads to exit.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// A session's batch on its way to a writer thread.
struct WriteJob {
    store: SessionStore,
    batch: Vec<LogEntry>,
    answer: oneshot::Sender<Written>,
}

/// A finished batch: the session's store and batch back, with the write's outcome.
pub struct Written {
    pub store: SessionStore,
    pub batch: Vec<LogEntry>,
    pub outcome: Result<(), RuntimeError>,
}

/// Why a batch was not written at all (the store is gone with the job; the session must be poisoned).
#[derive(Debug, thiserror::Error)]
pub enum WriterUnavailable {
    #[error("no log writer serves this thread")]
    NotInstalled,
    #[error("the log writers have stopped (the daemon is shutting down)")]
    Stopped,
    #[error("the log writer failed while writing the batch")]
    Lost,
}

thread_local! {
    /// The queue of the pool serving this thread's session actors (weak: the engine's pool owns the queue).
    static CURRENT: RefCell<Option<mpsc::WeakSender<WriteJob>>> = const { RefCell::new(None) };
}

/// Queues `batch` for durable writing on the current thread's pool; resolves when it has been written (or not).
///
/// The queue is looked up now, on the caller's thread (a session arbiter), not when the future is first polled.
pub fn write(
    store: SessionStore,
    batch: Vec<LogEntry>,
) -> impl Future<Output = Result<Written, WriterUnavailable>> + 'static {
    let queue = CURRENT.with(|current| current.borrow().clone());
    async move {
        let queue = queue.ok_or(WriterUnavailable::NotInstalled)?.upgrade().ok_or(WriterUnavailable::Stopped)?;
        let (answer, answered) = oneshot::channel();
        queue.send(WriteJob { store, batch, answer }).await.map_err(|_| WriterUnavailable::Stopped)?;
        // Holding the sender past the send would keep the queue open during shutdown.
        drop(queue);
        answered.await.map_err(|_| WriterUnavailable::Lost)
    }
}

/// The pool: its queue and its threads. Owned by the engine.
pub struct LogWriters {
    /// The only strong sender: dropping it closes the queue.
    queue: Mutex<Option<mpsc::Sender<WriteJob>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl LogWriters {
    /// Starts the writer threads for an engine with `session_threads` session arbiters: two per arbiter (at least
    /// two), so that while one session's batch waits on its `fdatasync`, a session on the same arbiter still finds
    /// a free writer. Idle writers cost a parked thread each.
    pub fn start(session_threads: usize) -> std::io::Result<LogWriters> {
        let (queue, jobs) = mpsc::channel(QUEUE_BOUND);
        let jobs = Arc::new(Mutex::new(jobs));
        let handles = (0..(2 * session_threads).max(2))
            .map(|index| {
                let jobs = jobs.clone();
                std::thread::Builder::new().name(format!("troupe-log-writer-{index}")).spawn(move || serve(&jobs))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(LogWriters { queue: Mutex::new(Some(queue)), threads: Mutex::new(handles) })
    }

    /// A closure that makes this pool serve the session actors of the thread that runs it: the engine runs it on
    /// each session arbiter before any session starts there (an arbiter runs what it is given in order).
    pub fn installer(&self) -> impl FnOnce() + Send + 'static {
        let weak = self.queue.lock().as_ref().map(mpsc::Sender::downgrade);
        move || CURRENT.with(|current| *current.borrow_mut() = weak)
    }

    /// Closes the queue and waits (off the caller's thread) until every writer thread has written what was queued
    /// and exited, for at most [`STOP_GRACE`]: a writer still blocked in the kernel after that (a hung disk) is
    /// left detached, because the daemon's exit must not wait on it and it holds nothing to flush.
    pub async fn stop(&self) {
        drop(self.queue.lock().take());
        let threads = std::mem::take(&mut *self.threads.lock());
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                // A writer catches panics of its jobs, so a join error would be a bug in `serve` itself; the
                // thread is gone either way.
                if thread.join().is_err() {
                    tracing::error!("a log writer thread panicked outside a job");
                }
            }
        });
        if tokio::time::timeout(STOP_GRACE, joined).await.is_err() {
            tracing::warn!("a log writer thread did not stop in time; leaving it detached");
        }
    }
}

/// A writer thread: takes jobs until the queue is closed and empty.
fn serve(jobs: &Mutex<mpsc::Receiver<WriteJob>>) {
    loop {
        // The lock is held only while waiting for a job, so one idle thread waits on the queue and the others on
        // the lock; a thread writing a batch holds neither.
        let job = jobs.lock().blocking_recv();
        let Some(job) = job else { return };
        let written = std::panic::catch_unwind(AssertUnwindSafe(move || {
            let WriteJob { mut store, batch, answer } = job;
            let outcome = store.append_batch(&batch);
            // The session may have stopped meanwhile; the batch is durable (or not) either way.
            let _ = answer.send(Written { store, batch, outcome });
        }));
        if written.is_err() {
            // The job, and with it its answer's sender, was dropped by the unwinding: the session sees its write
            // lost and poisons itself.
            tracing::error!("a log writer panicked while writing a batch; its session restarts");
        }
    }
}

#[cfg(test)]
mod tests {
    use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin};
    use troupe_protocol::types::events::{EventJson, EventPayload, StoredEvent};
    use troupe_runtime::event_log::{FileEventStore, LogWriter};

    use super::*;

    const SESSION_ID: &str = "0190f5c2-0000-7000-8000-000000000001";

    fn entry(seq: u64) -> LogEntry {
        let payload = if seq == 1 {
            EventPayload::SessionCreated {
                origin: SessionOrigin::Root,
                cwd: "/work".to_owned(),
                selection: RunSelection {
                    agent: "default".to_owned(),
                    model: ModelSelection { model: "local/echo".to_owned(), variant: None },
                    preset: None,
                },
            }
        } else {
            EventPayload::UserInputAdmitted {
                input_id: format!("input-{seq}"),
                input: "hello".to_owned(),
                attachments: Vec::new(),
            }
        };
        let event = StoredEvent {
            session_id: SESSION_ID.to_owned(),
            run_id: None,
            seq,
            timestamp: "2026-01-01T00:00:00.000Z".to_owned(),
            origin: None,
            payload,
        };
        LogEntry { seq, json: EventJson::encode(&event).unwrap() }
    }

    /// A new session log in a temporary directory, holding its first event.
    fn created_store() -> (tempfile::TempDir, SessionStore) {
        let temp = tempfile::tempdir().unwrap();
        std::fs::create_dir(temp.path().join("sessions")).unwrap();
        let session_dir = temp.path().join("sessions").join(SESSION_ID);
        let first = entry(1);
        let writer = LogWriter::create(&session_dir, &first.json).unwrap();
        (temp, Box::new(FileEventStore::created(writer, &first)))
    }

    fn timeout<F: Future>(future: F) -> tokio::time::Timeout<F> {
        tokio::time::timeout(std::time::Duration::from_secs(10), future)
    }

    #[tokio::test]
    async fn a_batch_comes_back_durable_and_writes_stop_with_the_pool() {
        let writers = LogWriters::start(1).unwrap();
        writers.installer()();
        let (_temp, store) = created_store();
        let written = timeout(write(store, vec![entry(2), entry(3)])).await.unwrap().unwrap();
        written.outcome.unwrap();
        assert_eq!(written.store.last_seq(), 3);
        assert_eq!(written.batch.iter().map(|entry| entry.seq).collect::<Vec<_>>(), vec![2, 3]);

        timeout(writers.stop()).await.unwrap();
        assert!(writers.threads.lock().is_empty());
        let after_stop = timeout(write(written.store, vec![entry(4)])).await.unwrap();
        assert!(matches!(after_stop, Err(WriterUnavailable::Stopped)));
    }

    #[test]
    fn a_thread_without_a_pool_is_refused() {
        let (_temp, store) = created_store();
        let refused = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            runtime.block_on(write(store, vec![entry(2)])).err()
        });
        assert!(matches!(refused.join().unwrap(), Some(WriterUnavailable::NotInstalled)));
    }
}
