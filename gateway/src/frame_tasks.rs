//! The frames of one connection that have to wait (for their session, the disk, room in the queue), driven by one
//! task instead of one task each.
//!
//! Why one task: a rename's reply waits for its group commit, and the session answers a whole commit's renames at
//! once, from its own thread. With one task per frame, each answer woke its own task through the worker's remote
//! queue, and each reply it queued woke the HTTP dispatcher through the local queue, which the worker runs first:
//! the dispatcher wrote every reply with its own `sendto` (docs/performance.md, figure 4). Here the answers wake
//! this one task, which queues every reply that is ready before the dispatcher runs, so a commit's replies leave in
//! a few writes.
//!
//! The task ends when it has nothing left to drive, and the next frame that waits starts a new one, so an idle
//! connection holds no task. The work is detached from the connection's actor on purpose, as before: a disconnect
//! does not cancel an engine operation halfway; its reply is simply dropped. A work that panics is dropped alone
//! (the protocol session already turns a handler's panic into an error reply); the others go on.
//!
//! Everything here lives on the connection's worker thread, so plain `Rc`/`Cell` suffice.

use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use troupe_protocol::server::{ServerConnection, ServerProtocol};

use crate::read_gate::ReadGate;

/// A connection's waiting frames.
#[derive(Default)]
pub(crate) struct FrameTasks {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    works: RefCell<FuturesUnordered<Frame>>,
    /// Whether a driver task is running (it ends when `works` is empty).
    driving: Cell<bool>,
    /// The running driver's waker, to tell it of a new work.
    driver: RefCell<Option<Waker>>,
}

/// A frame's work, boxed once (so that it can be polled in place first and then pushed), with a panic inside it
/// logged and kept to that frame: what [`FrameTasks::push`] takes, so no work reaches the set unguarded.
pub(crate) struct Frame(LocalBoxFuture<'static, ()>);

impl Future for Frame {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

/// A text frame's work as a connection runs it: the request's own future, counted by the connection's read gate
/// until it ends, in the connection's span. [`contained`] boxes it, once per frame that has to wait; kept below
/// glibc's large requests (chunks of 1,024 bytes and up), which take the allocator's slow path and consolidate its
/// fast bins (docs/performance.md, figure 4).
pub(crate) fn frame_work<S: ServerProtocol>(
    connection: &ServerConnection<S>,
    read_gate: &Rc<ReadGate>,
    span: &tracing::Span,
    text: &str,
) -> impl Future<Output = ()> + 'static + use<S> {
    let work = connection.handle_text(text);
    tracing::Instrument::instrument(read_gate.track(work, text.len()), span.clone())
}

/// Wraps a frame's `work` into a [`Frame`].
pub(crate) fn contained(work: impl Future<Output = ()> + 'static) -> Frame {
    Frame(
        AssertUnwindSafe(work)
            .catch_unwind()
            .map(|outcome| {
                if let Err(panic) = outcome {
                    let what = panic
                        .downcast_ref::<&str>()
                        .copied()
                        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                        .unwrap_or("(no message)");
                    tracing::error!(panic = what, "a frame's work panicked; its reply is lost, the connection goes on");
                }
            })
            .boxed_local(),
    )
}

impl FrameTasks {
    /// Drives `work` to its end on the current worker, beside the connection's other waiting frames.
    pub(crate) fn push(&self, work: Frame) {
        self.inner.works.borrow_mut().push(work);
        if !self.inner.driving.replace(true) {
            actix::spawn(Driver { inner: self.inner.clone() });
        } else if let Some(driver) = self.inner.driver.borrow_mut().take() {
            driver.wake();
        }
    }

    /// Frames still being driven.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.works.borrow().len()
    }
}

/// The task that drives a connection's waiting frames until none is left.
struct Driver {
    inner: Rc<Inner>,
}

impl Drop for Driver {
    /// However the driver ends (its frames done, or its task dropped or unwound), the next frame starts a new one,
    /// so frames left in the set are not stranded.
    fn drop(&mut self) {
        self.inner.driving.set(false);
        if let Ok(mut driver) = self.inner.driver.try_borrow_mut() {
            *driver = None;
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let inner = &self.inner;
        let mut works = inner.works.borrow_mut();
        // Every frame that is ready is driven before this task yields, so their replies are queued together. (The
        // set itself yields after polling as many frames as it holds, waking this task again.)
        loop {
            match works.poll_next_unpin(cx) {
                Poll::Ready(Some(())) => {}
                // `Drop` marks the driver gone.
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => {
                    match &mut *inner.driver.borrow_mut() {
                        Some(waker) if waker.will_wake(cx.waker()) => {}
                        slot => *slot = Some(cx.waker().clone()),
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use troupe_protocol::server::ServerLimits;

    use super::*;

    /// Answers nothing: only the shape of a frame's future is under test.
    struct Nothing;
    impl ServerProtocol for Nothing {}

    #[test]
    fn a_frames_work_is_a_small_allocation() {
        let (connection, _outbound) = ServerConnection::new(Arc::new(Nothing), ServerLimits::default());
        let gate = ReadGate::new(8, 1 << 20);
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"session.get","params":{"session_id":"s"}}"#;
        let work = frame_work(&connection, &gate, &tracing::Span::none(), text);
        // What `contained` boxes: the work and a few words of its own. A chunk of 1,024 bytes or more (1,009 asked
        // for and up, with glibc's header and rounding) is a large request.
        let boxed = std::mem::size_of_val(&work) + 64;
        assert!(boxed < 1_009, "a frame's work would be a large allocation: {boxed} bytes");
    }

    /// Polls `condition` on the current worker until it holds (at most 5 s).
    async fn until(condition: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !condition() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the condition never held");
    }

    /// Pushes a frame that waits until the returned sender fires, then sets the returned flag.
    fn waiting_frame(tasks: &FrameTasks) -> (futures::channel::oneshot::Sender<()>, Rc<Cell<bool>>) {
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let finished = Rc::new(Cell::new(false));
        let flag = finished.clone();
        tasks.push(contained(async move {
            let _ = rx.await;
            flag.set(true);
        }));
        (tx, finished)
    }

    #[actix_web::test]
    async fn waiting_frames_finish_in_any_order_and_the_driver_ends_when_none_is_left() {
        let tasks = FrameTasks::default();
        let done = Rc::new(RefCell::new(Vec::new()));
        let (first_tx, first_rx) = futures::channel::oneshot::channel::<()>();
        let (second_tx, second_rx) = futures::channel::oneshot::channel::<()>();
        for (name, rx) in [("first", first_rx), ("second", second_rx)] {
            let done = done.clone();
            tasks.push(contained(async move {
                let _ = rx.await;
                done.borrow_mut().push(name);
            }));
        }
        assert_eq!(tasks.len(), 2);
        second_tx.send(()).unwrap();
        until(|| done.borrow().len() == 1).await;
        assert_eq!(*done.borrow(), ["second"]);
        first_tx.send(()).unwrap();
        until(|| !tasks.inner.driving.get()).await;
        assert_eq!(*done.borrow(), ["second", "first"]);
        assert_eq!(tasks.len(), 0);

        // A frame after the driver ended starts a new one.
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let after = done.clone();
        tasks.push(contained(async move {
            let _ = rx.await;
            after.borrow_mut().push("third");
        }));
        assert!(tasks.inner.driving.get());
        tx.send(()).unwrap();
        until(|| !tasks.inner.driving.get()).await;
        assert_eq!(*done.borrow(), ["second", "first", "third"]);
    }

    #[actix_web::test]
    async fn frames_left_by_a_driver_that_was_dropped_are_driven_by_the_next_one() {
        let tasks = FrameTasks::default();
        // A driver that is running (so a push spawns none) and then dies, as when its task unwinds or is dropped,
        // with a frame still waiting in the set.
        tasks.inner.driving.set(true);
        let doomed = Driver { inner: tasks.inner.clone() };
        let (tx, finished) = waiting_frame(&tasks);
        drop(doomed);
        assert!(!tasks.inner.driving.get());
        // The next frame starts a driver, which drives the stranded one too.
        tasks.push(contained(async {}));
        tx.send(()).unwrap();
        until(|| finished.get()).await;
    }

    #[actix_web::test]
    async fn a_frame_pushed_while_the_driver_waits_is_driven_and_a_panicking_one_stops_alone() {
        let tasks = FrameTasks::default();
        let (tx, finished) = waiting_frame(&tasks);
        // Let the driver run and wait on the first frame, then hand it two more.
        until(|| tasks.inner.driver.borrow().is_some()).await;
        tasks.push(contained(async { panic!("a frame's work failed") }));
        let ran = Rc::new(Cell::new(false));
        let ran_flag = ran.clone();
        tasks.push(contained(async move { ran_flag.set(true) }));
        until(|| ran.get()).await;
        assert!(!finished.get());
        tx.send(()).unwrap();
        until(|| finished.get() && !tasks.inner.driving.get()).await;
    }
}
