//! Starting an actor whose mailbox has no bound, for actors that every connection reaches through one shared
//! address (session actors: `session_router.rs`).
//!
//! Once a bounded mailbox holds its capacity (16 messages by default), actix parks the sender that filled it, and
//! every later `send` through that address clones it (two allocations) to queue the message all the same; the
//! bound holds no request back. What bounds such an actor's queue is what bounds its senders.

use actix::dev::channel;
use actix::prelude::*;

/// A mailbox capacity of 0: actix's channel never parks a sender of it.
const NO_BOUND: usize = 0;

/// Starts the actor `build` makes on `arbiter` (else on this thread), with a mailbox of no bound.
pub(crate) fn start_unbounded<A>(
    arbiter: Option<&ArbiterHandle>,
    build: impl FnOnce(&mut Context<A>) -> A + Send + 'static,
) -> Addr<A>
where
    A: Actor<Context = Context<A>>,
{
    let (sender, receiver) = channel::channel(NO_BOUND);
    let start = move || {
        let mut ctx = Context::with_receiver(receiver);
        let actor = build(&mut ctx);
        ctx.run(actor);
    };
    match arbiter {
        Some(arbiter) => {
            arbiter.spawn_fn(start);
        }
        None => start(),
    }
    Addr::new(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(usize);

    impl Actor for Counter {
        type Context = Context<Self>;
    }

    #[derive(Message)]
    #[rtype(result = "usize")]
    struct Add;

    impl Handler<Add> for Counter {
        type Result = usize;

        fn handle(&mut self, _: Add, _: &mut Context<Self>) -> usize {
            self.0 += 1;
            self.0
        }
    }

    #[actix::test]
    async fn one_address_queues_any_number_of_messages_before_the_actor_runs() {
        let addr = start_unbounded(None, |_| Counter(0));
        // Nothing has run the actor yet: with actix's default bound the 17th `try_send` is refused (`Full`).
        for _ in 0..100 {
            addr.try_send(Add).expect("queued without a bound");
        }
        assert_eq!(tokio::time::timeout(std::time::Duration::from_secs(10), addr.send(Add)).await, Ok(Ok(101)));
    }

    #[actix::test]
    async fn a_default_mailbox_refuses_the_same_burst() {
        // The premise of the test above: the same burst through one address of a default mailbox is refused.
        let addr = Counter(0).start();
        let refused = (0..100).map(|_| addr.try_send(Add)).filter(Result::is_err).count();
        assert!(refused > 0, "a default mailbox took 100 messages through one address");
    }
}
