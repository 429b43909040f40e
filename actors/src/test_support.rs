//! What the actors' unit tests share: fake actors that fail loudly on a message they must not get, and the first
//! event of a new session.

use troupe_protocol::types::common::{ModelSelection, RunSelection, SessionOrigin};
use troupe_protocol::types::events::{EventPayload, StoredEvent};

/// Implements `Handler<M>` on a fake actor for each listed message by panicking with the message's name: the
/// messages the code under test must not send it.
macro_rules! unexpected_messages {
    ($actor:ty { $($message:ty => $result:ty,)+ }) => {
        $(
            impl actix::Handler<$message> for $actor {
                type Result = $result;

                fn handle(&mut self, _: $message, _: &mut actix::Context<Self>) -> Self::Result {
                    panic!(concat!("unexpected ", stringify!($message), " to ", stringify!($actor)));
                }
            }
        )+
    };
}

pub(crate) use unexpected_messages;

/// The `session_created` of a root session `session_id` (agent `default` on `local/echo`, cwd `/tmp`).
pub fn session_created(session_id: &str) -> StoredEvent {
    let selection = RunSelection {
        agent: "default".into(),
        model: ModelSelection { model: "local/echo".into(), variant: None },
        preset: None,
    };
    StoredEvent {
        session_id: session_id.into(),
        run_id: None,
        seq: 1,
        timestamp: "2026-12-02T00:00:00Z".into(),
        origin: Some("user".into()),
        payload: EventPayload::SessionCreated { origin: SessionOrigin::Root, cwd: "/tmp".into(), selection },
    }
}
