//! [`ServerContext`]: what one request may do besides answering (open notification channels, schedule a
//! notification after its reply, reserve reply budget), and the reply group that releases all of it once the
//! request's reply frame is queued.

use std::sync::Arc;

use bytestring::ByteString;
use parking_lot::Mutex;

use super::budget::{Holder, Reservation, Reserved};
use super::channel::GatedChannel;
use super::connection::ConnectionShared;
use super::handle::ConnectionHandle;
use super::outbound::SideKey;
use super::sink::{ConnectionNotifier, EventSink, OutputSink, OutputSinkRefused};
use crate::error::RpcError;
use crate::jsonrpc::{Notification, encode_notification};
use crate::types::runtime::ClientInfo;

/// What the requests of one frame (a single request or a whole batch) opened or reserved, released after the
/// frame's reply.
#[derive(Default)]
pub(super) struct ReplyGroup {
    after_reply: Mutex<Vec<ByteString>>,
    channels: Mutex<Vec<Arc<GatedChannel>>>,
    reservations: Mutex<Vec<Reservation>>,
    /// The group as one holder of the reply budget: a member of a batch never waits for bytes its siblings hold.
    holder: Arc<Holder>,
    /// Who sent the frame, when another node forwarded it (see [`ServerContext::forwarded_caller`]).
    pub(super) caller: Option<Arc<str>>,
}

impl ReplyGroup {
    /// The group of a frame; `caller` names who another node forwarded it for.
    pub(super) fn sent_by(caller: Option<Arc<str>>) -> ReplyGroup {
        let mut group = ReplyGroup::default();
        group.caller = caller;
        group
    }

    /// The reply frame is queued: the bytes reserved to build it go back to the budget.
    pub(super) fn reply_queued(&self) {
        let reservations = std::mem::take(&mut *self.reservations.lock());
        drop(reservations);
    }

    /// Queues the notifications scheduled after the reply, then opens the channels the requests created.
    pub(super) async fn release(&self, shared: &ConnectionShared) {
        let frames = std::mem::take(&mut *self.after_reply.lock());
        for frame in frames {
            if shared.queue.push(frame).await.is_err() {
                return;
            }
        }
        let channels = std::mem::take(&mut *self.channels.lock());
        for channel in channels {
            channel.open();
        }
    }
}

impl Drop for ReplyGroup {
    /// A group dropped before its release (the connection closed while its reply waited) closes the channels it
    /// opened, so that what they held back is freed and their sinks report closed.
    fn drop(&mut self) {
        for channel in self.channels.get_mut().drain(..) {
            channel.close();
        }
    }
}

/// The context of one request: which connection it came from, and the channels it may open.
pub struct ServerContext {
    pub(super) shared: Arc<ConnectionShared>,
    pub(super) group: Arc<ReplyGroup>,
}

impl ServerContext {
    pub fn connection_id(&self) -> u64 {
        self.shared.id
    }

    /// The name the forwarding node gave the connection this request came on, when another node forwarded it
    /// (`ForwardedRequest::caller`); `None` for a client's own request.
    pub fn forwarded_caller(&self) -> Option<&str> {
        self.group.caller.as_deref()
    }

    /// A handle on this request's connection that outlives the request (see [`ConnectionHandle`]).
    pub fn connection(&self) -> ConnectionHandle {
        ConnectionHandle { shared: self.shared.clone() }
    }

    /// What this connection's client proved when it connected.
    pub fn authority(&self) -> super::connection::Authority {
        self.shared.authority.get().copied().unwrap_or(super::connection::Authority::Token)
    }

    /// The `client_info` of this connection's handshake, if it gave one.
    pub fn client_info(&self) -> Option<Arc<ClientInfo>> {
        self.shared.client_info.lock().clone()
    }

    /// Queues a notification right after this request's reply.
    pub fn notify_after_reply<N: Notification>(&self, params: &N::Params) {
        match encode_notification::<N>(params) {
            Ok(frame) => self.group.after_reply.lock().push(frame),
            Err(error) => {
                tracing::error!(notification = N::NAME, %error, "failed to encode a notification")
            }
        }
    }

    /// Waits until `min(bytes, reply_budget_bytes)` of the connection's reply budget is free and takes it for
    /// this request; it is given back once the reply frame of this request (or of its batch) is queued. Call it
    /// before building a large reply, with the reply's expected size: a client that pipelines many such requests
    /// without reading gets a few replies built at a time, the rest waiting cheaply.
    ///
    /// A request whose frame already holds part of the budget (an earlier reservation, a sibling in its batch)
    /// does not wait: the bytes it would wait for are only freed by its own reply. Such a request is refused
    /// (-32003, [`RpcError::reply_budget_exceeded`]) when the frame's requests together would hold more than the
    /// budget, so a batch of many large requests costs at most one budget. On a closed connection it fails at
    /// once, reserving nothing: the caller should not build a reply nobody will read.
    pub fn reserve_reply_bytes(
        &self,
        bytes: usize,
    ) -> impl Future<Output = Result<(), RpcError>> + Send + 'static + use<> {
        let shared = self.shared.clone();
        let group = self.group.clone();
        async move {
            let budget = shared.budget.clone();
            match budget.reserve(bytes, &group.holder, || false).await {
                Reserved::Granted(reservation) => {
                    group.reservations.lock().push(reservation);
                    Ok(())
                }
                Reserved::OverBudget => Err(RpcError::reply_budget_exceeded(shared.limits.reply_budget_bytes)),
                Reserved::Closed => Err(RpcError::internal("the connection closed before the reply was built")),
            }
        }
    }

    /// A channel for connection-wide notifications (`runtime.changed`), open once this request has replied. Each of
    /// its notifications must carry a complete state that supersedes the ones before it: when the client does not
    /// read, only the newest waits for room.
    pub fn connection_notifier(&self) -> ConnectionNotifier {
        let channel = GatedChannel::new(self.shared.clone(), None);
        self.group.channels.lock().push(channel.clone());
        ConnectionNotifier { channel }
    }

    /// A channel for one named tool-output subscription (`tool_output.subscribe`), open once this request has
    /// replied. It replaces this connection's subscription of the same name, which reports closed from now on.
    /// Refused when the connection already has `max_live` subscriptions that have not ended.
    pub fn output_sink(&self, subscription_id: &str, max_live: usize) -> Result<OutputSink, OutputSinkRefused> {
        let channel = GatedChannel::new_output(self.shared.clone());
        let replaced = {
            let mut outputs = self.shared.output_subscriptions.lock();
            if self.shared.is_closed() {
                return Err(OutputSinkRefused::Closed);
            }
            // Ended subscriptions keep no slot: a client naming each subscription anew must not grow the map.
            outputs.retain(|_, channel| channel.is_live());
            let live = outputs.len() - usize::from(outputs.contains_key(subscription_id));
            if live >= max_live {
                return Err(OutputSinkRefused::TooMany { limit: max_live });
            }
            outputs.insert(subscription_id.to_owned(), channel.clone())
        };
        if let Some(replaced) = replaced {
            replaced.close();
        }
        self.group.channels.lock().push(channel.clone());
        Ok(OutputSink { channel })
    }

    /// Ends this connection's named tool-output subscription `subscription_id`: nothing more is sent for it.
    /// Returns whether it was still live (not ended, not already closed).
    pub fn end_output_sink(&self, subscription_id: &str) -> bool {
        let removed = self.shared.output_subscriptions.lock().remove(subscription_id);
        removed.is_some_and(|channel| {
            let live = channel.is_live();
            channel.close();
            live
        })
    }

    /// A channel for one session's `events.subscription` notifications, open once this request has replied. It
    /// replaces this connection's previous subscription to the same session, which reports closed from now on.
    pub fn event_sink(&self, session_id: &str) -> EventSink {
        let session_id: Arc<str> = Arc::from(session_id);
        let channel = GatedChannel::new(self.shared.clone(), Some(session_id.clone()));
        let replaced = {
            let mut subscriptions = self.shared.subscriptions.lock();
            if self.shared.is_closed() {
                // Too late to register: the connection already let go of its subscriptions.
                Some(channel.clone())
            } else {
                // A gap of the subscription being replaced that is still waiting to be written belongs to it, not to
                // this one: the client is told where to resume by this subscription's reply instead.
                self.shared.queue.remove_side(&SideKey::Gap(session_id.clone()));
                subscriptions.insert(session_id, channel.clone())
            }
        };
        if let Some(replaced) = replaced {
            replaced.close();
        }
        self.group.channels.lock().push(channel.clone());
        EventSink { channel }
    }
}
