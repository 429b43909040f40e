//! The reply budget of one connection: bytes of replies being built and of stored events being read for replays.
//!
//! A reservation waits until its bytes are free, first come first served (a large reservation is not starved by
//! a stream of small ones), and gives them back when dropped. A reservation asks for at most the whole budget, so
//! every reservation can eventually be granted.
//!
//! A holder that already holds part of the budget never waits for more: the members of one batch (one reply
//! frame) and one subscription's replay each form a holder, and a holder waiting for bytes that only its own
//! progress would free would wait forever. Such a reservation is taken at once while the holder's own bytes stay
//! within the budget, and refused ([`Reserved::OverBudget`]) beyond it: a batch of many large requests gets errors
//! for the members that do not fit, never more memory than one budget.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

pub(super) struct ReplyBudget {
    limit: usize,
    state: Mutex<BudgetState>,
    /// Woken (every waiter) when bytes are released, a waiter leaves the line, or something a waiter depends on
    /// closed.
    changed: Notify,
}

#[derive(Default)]
struct BudgetState {
    in_use: usize,
    /// Tickets of the waiting reservations, in arrival order; only the first may be granted.
    line: VecDeque<u64>,
    next_ticket: u64,
    closed: bool,
}

/// Which reservations count as one holder: how many reservations it holds now, and their bytes.
#[derive(Default)]
pub(super) struct Holder {
    held: AtomicUsize,
    bytes: AtomicUsize,
}

/// The outcome of a reservation.
pub(super) enum Reserved {
    Granted(Reservation),
    /// The budget or what the caller watches closed while waiting.
    Closed,
    /// The holder already holds part of the budget and these bytes would take it past the budget.
    OverBudget,
}

impl Holder {
    pub(super) fn holds(&self) -> bool {
        self.held.load(Ordering::Acquire) > 0
    }
}

/// Bytes of the budget, given back when dropped.
pub(super) struct Reservation {
    budget: Arc<ReplyBudget>,
    holder: Arc<Holder>,
    bytes: usize,
}

impl Reservation {
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = self.budget.state.lock();
        state.in_use -= self.bytes;
        self.holder.held.fetch_sub(1, Ordering::AcqRel);
        self.holder.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        drop(state);
        self.budget.changed.notify_waiters();
    }
}

/// Removes a waiting reservation's ticket from the line when its future is dropped before being granted.
struct Ticket<'a> {
    budget: &'a ReplyBudget,
    ticket: u64,
    granted: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut state = self.budget.state.lock();
        state.line.retain(|waiting| *waiting != self.ticket);
        drop(state);
        // The next in line may fit now.
        self.budget.changed.notify_waiters();
    }
}

impl ReplyBudget {
    pub(super) fn new(limit: usize) -> Arc<Self> {
        Arc::new(ReplyBudget { limit: limit.max(1), state: Mutex::new(BudgetState::default()), changed: Notify::new() })
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(super) fn in_use(&self) -> usize {
        self.state.lock().in_use
    }

    /// Wakes every waiter to check again whether what it waits for was closed.
    pub(super) fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// The connection is gone: waiters give up, later reservations fail at once.
    pub(super) fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_waiters();
    }

    /// Reserves `min(bytes, limit)` for `holder`, waiting in line for them unless `holder` already holds some.
    /// [`Reserved::Closed`] when the budget or what `gone` watches closed while waiting. Cancel-safe.
    pub(super) async fn reserve(
        self: &Arc<Self>,
        bytes: usize,
        holder: &Arc<Holder>,
        gone: impl Fn() -> bool,
    ) -> Reserved {
        let bytes = bytes.min(self.limit);
        let mut ticket: Option<Ticket<'_>> = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.state.lock();
                if state.closed || gone() {
                    return Reserved::Closed;
                }
                let holds = holder.holds();
                if holds && holder.bytes.load(Ordering::Acquire) + bytes > self.limit {
                    return Reserved::OverBudget;
                }
                let first = match &ticket {
                    Some(ticket) => state.line.front() == Some(&ticket.ticket),
                    None => state.line.is_empty(),
                };
                let fits = state.in_use == 0 || state.in_use + bytes <= self.limit;
                if (first && fits) || holds {
                    if let Some(ticket) = &mut ticket {
                        state.line.retain(|waiting| *waiting != ticket.ticket);
                        ticket.granted = true;
                    }
                    state.in_use += bytes;
                    holder.held.fetch_add(1, Ordering::AcqRel);
                    holder.bytes.fetch_add(bytes, Ordering::AcqRel);
                    drop(state);
                    // The next in line may fit as well.
                    self.changed.notify_waiters();
                    return Reserved::Granted(Reservation { budget: self.clone(), holder: holder.clone(), bytes });
                }
                if ticket.is_none() {
                    let number = state.next_ticket;
                    state.next_ticket += 1;
                    state.line.push_back(number);
                    ticket = Some(Ticket { budget: self, ticket: number, granted: false });
                }
            }
            changed.await;
        }
    }
}
