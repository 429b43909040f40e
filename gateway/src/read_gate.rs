//! Pauses reading a connection while too many of its frames, or too many bytes of them, are still being answered.
//!
//! Frames are processed concurrently, and even a frame refused with -32003 needs room in the outbound queue for
//! its reply. A client that keeps sending without reading would otherwise pile up pending frames without end, each
//! holding its request. The gate counts the frames of one connection being answered and their bytes; at either cap
//! the inbound stream reports `Pending`, so the socket stops being read and TCP pushes back on the client. (A frame
//! is always taken when nothing is outstanding, so the bytes held stay below the byte cap plus one frame.)
//! Everything here lives on the connection's worker thread, so plain `Rc`/`Cell` suffice.

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::{FutureExt, Stream};

/// Counts a connection's outstanding frame tasks.
pub(crate) struct ReadGate {
    outstanding: Cell<usize>,
    cap: usize,
    outstanding_bytes: Cell<usize>,
    cap_bytes: usize,
    /// The reader parked at the cap, woken when a task finishes.
    parked_reader: Cell<Option<Waker>>,
}

impl ReadGate {
    pub(crate) fn new(cap: usize, cap_bytes: usize) -> Rc<Self> {
        Rc::new(ReadGate {
            outstanding: Cell::new(0),
            cap: cap.max(1),
            outstanding_bytes: Cell::new(0),
            cap_bytes: cap_bytes.max(1),
            parked_reader: Cell::new(None),
        })
    }

    /// Wraps the task of one frame of `bytes` so that it counts until it finishes (or is dropped).
    pub(crate) fn track<F: Future<Output = ()>>(
        self: &Rc<Self>,
        task: F,
        bytes: usize,
    ) -> impl Future<Output = ()> + use<F> {
        self.outstanding.set(self.outstanding.get() + 1);
        self.outstanding_bytes.set(self.outstanding_bytes.get() + bytes);
        let permit = Permit { gate: self.clone(), bytes };
        // A combinator, not an `async move` block: such a block keeps the task twice (as captured and as awaited),
        // which made every frame's boxed work 1,568 bytes, past the allocator's small-chunk range
        // (docs/performance.md, figure 4).
        task.map(move |()| drop(permit))
    }

    /// Wraps the inbound stream so that it is not polled while the gate is at its cap.
    pub(crate) fn gate<St>(self: &Rc<Self>, stream: St) -> Gated<St> {
        Gated { inner: stream, gate: self.clone() }
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.get()
    }
}

/// Held by a running frame task.
struct Permit {
    gate: Rc<ReadGate>,
    bytes: usize,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let gate = &self.gate;
        gate.outstanding.set(gate.outstanding.get().saturating_sub(1));
        gate.outstanding_bytes.set(gate.outstanding_bytes.get().saturating_sub(self.bytes));
        if let Some(reader) = gate.parked_reader.take() {
            reader.wake();
        }
    }
}

/// An inbound stream behind a [`ReadGate`].
pub(crate) struct Gated<St> {
    inner: St,
    gate: Rc<ReadGate>,
}

impl<St: Stream + Unpin> Stream for Gated<St> {
    type Item = St::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let gate = &self.gate;
        if gate.outstanding.get() >= gate.cap || gate.outstanding_bytes.get() >= gate.cap_bytes {
            self.gate.parked_reader.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use futures::task::noop_waker;

    use super::*;

    #[test]
    fn the_stream_pauses_at_the_cap_and_resumes_when_a_task_ends() {
        let gate = ReadGate::new(1, 1000);
        let mut stream = gate.gate(futures::stream::iter([1, 2]));
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Ready(Some(1)));
        let mut task = Box::pin(gate.track(async {}, 10));
        assert_eq!(gate.outstanding(), 1);
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Pending);
        assert_eq!(task.as_mut().poll(&mut cx), Poll::Ready(()));
        assert_eq!(gate.outstanding(), 0);
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Ready(Some(2)));
    }

    #[test]
    fn the_stream_pauses_at_the_byte_cap_and_always_takes_a_frame_when_nothing_is_outstanding() {
        let gate = ReadGate::new(100, 1000);
        let mut stream = gate.gate(futures::stream::iter([1, 2, 3]));
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Ready(Some(1)));
        // One frame larger than the cap is taken (nothing else was outstanding); then reading pauses.
        let mut big = Box::pin(gate.track(async {}, 5000));
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Pending);
        assert_eq!(big.as_mut().poll(&mut cx), Poll::Ready(()));
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Ready(Some(2)));
        let mut small = Box::pin(gate.track(async {}, 999));
        assert_eq!(stream.poll_next_unpin(&mut cx), Poll::Ready(Some(3)), "below the cap, reading goes on");
        assert_eq!(small.as_mut().poll(&mut cx), Poll::Ready(()));
    }
}
