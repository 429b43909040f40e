//! Ports: how an actor reaches the actors above it in the tree without naming their types.
//!
//! The engine's actors form a tree: the supervisor starts sessions, a session starts its runs, the supervisor's
//! books start a tree's approval actor and a goal's actor. A parent holds its children's `Addr`s; a child holds
//! a [`Port`] of its parent instead: a shared struct of one `Recipient` per message it may send up, built from
//! any actor that handles them. So the modules of the actors import each other only downwards (the tidy test
//! checks it), and a test can drive a run against a fake session actor, or a cluster put a remote session behind
//! the same port.
//!
//! Each file holds one actor's port and the messages it carries, which name no actor:
//! - `session`: what runs, goal and approval actors send a session ([`SessionPort`]);
//! - `supervisor`: what sessions, runs, goal and approval actors send the supervisor ([`SupervisorPort`]);
//! - `approval`: what runs and the engine send a tree's approval actor ([`ApprovalPort`]), and the lease that
//!   keeps the actor in use.
//!
//! A message only the engine sends (it sits above every actor) stays beside its handler.

pub mod approval;
pub mod session;
pub mod supervisor;

use std::sync::Arc;

use actix::dev::RecipientRequest;
use actix::prelude::*;

pub use approval::{ApprovalLease, ApprovalPort};
pub use session::SessionPort;
pub use supervisor::SupervisorPort;

/// A port: the recipients `R` of one actor, shared. Two ports are equal when they are clones of one port (the
/// supervisor hands out clones of the one it built for a session actor, which tells incarnations apart).
pub struct Port<R>(Arc<R>);

impl<R> Clone for Port<R> {
    fn clone(&self) -> Self {
        Port(self.0.clone())
    }
}

impl<R> PartialEq for Port<R> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<R> Eq for Port<R> {}

/// Recipients that carry the message `M`: where its recipient sits.
pub trait Carries<M: Message + Send>
where
    M::Result: Send,
{
    fn recipient(&self) -> &Recipient<M>;
}

impl<R> Port<R> {
    fn from_recipients(recipients: R) -> Self {
        Port(Arc::new(recipients))
    }

    /// Sends `message` and waits for the reply, as `Addr::send` does.
    pub fn send<M>(&self, message: M) -> RecipientRequest<M>
    where
        R: Carries<M>,
        M: Message + Send + 'static,
        M::Result: Send,
    {
        self.0.recipient().send(message)
    }

    /// Sends `message` without waiting for a reply, as `Addr::do_send` does.
    pub fn do_send<M>(&self, message: M)
    where
        R: Carries<M>,
        M: Message + Send + 'static,
        M::Result: Send,
    {
        self.0.recipient().do_send(message)
    }
}

/// Declares the recipients of a port: a struct with one `Recipient` per message, `Port::new(&addr)` for any actor
/// that handles them all, and `Carries` for each message.
macro_rules! recipients {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $first:ident: $first_message:ty,
            $($field:ident: $message:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $first: actix::Recipient<$first_message>,
            $($field: actix::Recipient<$message>,)*
        }

        impl $crate::ports::Port<$name> {
            /// The port of `addr`'s actor.
            pub fn new<A>(addr: &actix::Addr<A>) -> Self
            where
                A: actix::Actor<Context = actix::Context<A>>
                    + actix::Handler<$first_message>
                    $(+ actix::Handler<$message>)*,
            {
                $crate::ports::Port::from_recipients($name {
                    $first: addr.clone().recipient(),
                    $($field: addr.clone().recipient(),)*
                })
            }
        }

        impl $crate::ports::Carries<$first_message> for $name {
            fn recipient(&self) -> &actix::Recipient<$first_message> {
                &self.$first
            }
        }

        $(
            impl $crate::ports::Carries<$message> for $name {
                fn recipient(&self) -> &actix::Recipient<$message> {
                    &self.$field
                }
            }
        )*
    };
}

pub(crate) use recipients;
