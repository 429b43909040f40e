//! `PresenceActor`: who follows which session, for `session.presence` and `session.presence_changed` (a troupe
//! extension).
//!
//! It owns, per session, the connections subscribed to its events (with when they subscribed) and the
//! connections watching that list (their notifiers). The engine tells it about each successful
//! `events.subscribe` ([`Subscribed`]) and each closed connection ([`ConnectionClosed`]); a connection's
//! presence and watches end with it at once. A subscription can also end without its connection closing (the
//! subscriber fell behind and was sent a gap, or the session was deleted): the protocol layer's table of a
//! connection's subscriptions is the truth about that, and a sweep every [`SWEEP_EVERY`] reads it through each
//! [`ConnectionHandle`], so such a departure is reported within that time.
//!
//! # A cluster
//!
//! With a [`PresenceShare`] (a cluster node), this node's list of each session is published whenever it changes,
//! and every other node's lists arrive as [`RemotePresenceChanged`]: a session's presence is this node's connections
//! (oldest first) followed by each other node's, by node name, and its watchers hear of a change on any node.
//! Connection ids then name their node (`connection-<n>@<node>`), so that they are unique in the cluster.
//!
//! # Hibernation
//!
//! This actor is separate from the session actors on purpose: watching a session's presence does not load it
//! and does not keep it awake. A session hibernates only with no subscriber, when its presence list is empty
//! anyway, and the next `events.subscribe` (which loads it) is reported here like any other. So a console that
//! watches many idle sessions costs a map entry per watch, never a loaded session.
//!
//! # Bounded memory
//!
//! A connection watches at most [`MAX_WATCHED_SESSIONS`] sessions at once (more is refused with
//! `too_many_presence_watches`); entries of closed connections go at once, and a session's entry goes when it
//! has neither subscriber nor watcher.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use troupe_protocol::notification::SessionPresenceChanged;
use troupe_protocol::server::{ConnectionHandle, ConnectionNotifier};
use troupe_protocol::types::presence::{PresenceClient, SessionPresenceChangedParams};
use troupe_runtime::clock::now_rfc3339;
use troupe_runtime::presence_share::{PresenceShare, RemotePresence};

use crate::error::EngineError;

/// How many sessions one connection may watch at once.
pub const MAX_WATCHED_SESSIONS: usize = 64;

/// How often subscriptions that ended without their connection closing are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// A connection's `events.subscribe` of `session_id` succeeded. Subscribing again keeps the first `since`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribed {
    pub session_id: String,
    pub connection: ConnectionHandle,
}

/// A connection closed: it leaves every presence list and its watches end.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ConnectionClosed {
    pub connection_id: u64,
}

/// `session.presence`: starts (or renews) the connection's watch of a session and returns the current list.
/// The session is known to exist (the engine checked).
#[derive(Message)]
#[rtype(result = "Result<PresenceList, EngineError>")]
pub struct WatchPresence {
    pub session_id: String,
    /// The connection's channel for this session's `session.presence_changed`; opened after the reply.
    pub notifier: ConnectionNotifier,
}

/// `session.presence_unsubscribe`: ends the watch. Replies whether there was one.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct UnwatchPresence {
    pub session_id: String,
    pub connection_id: u64,
}

/// What `session.presence` answers: the list, and the caller's own id in it.
#[derive(Debug)]
pub struct PresenceList {
    pub clients: Vec<PresenceClient>,
    pub you: String,
}

/// Another node's list of one session changed (a cluster only).
#[derive(Message)]
#[rtype(result = "()")]
pub struct RemotePresenceChanged(pub RemotePresence);

/// A connection in a session's presence list.
struct Present {
    connection: ConnectionHandle,
    /// When it subscribed, RFC 3339.
    since: String,
}

impl Present {
    fn client(&self, node: Option<&str>) -> PresenceClient {
        let info = self.connection.client_info();
        PresenceClient {
            connection_id: connection_label(self.connection.connection_id(), node),
            name: info.as_ref().map(|info| info.name.clone()),
            version: info.as_ref().and_then(|info| info.version.clone()),
            since: self.since.clone(),
        }
    }
}

/// A connection's id in presence lists: `connection-<n>`, and `connection-<n>@<node>` in a cluster.
pub(crate) fn connection_label(connection_id: u64, node: Option<&str>) -> String {
    match node {
        Some(node) => format!("connection-{connection_id}@{node}"),
        None => format!("connection-{connection_id}"),
    }
}

/// One session's presence list and its watchers.
#[derive(Default)]
struct SessionPresence {
    /// By connection id, so the list is in connection order and each connection is in it once.
    present: BTreeMap<u64, Present>,
    /// By connection id.
    watchers: HashMap<u64, ConnectionNotifier>,
}

impl SessionPresence {
    fn clients(&self, node: Option<&str>) -> Vec<PresenceClient> {
        self.present.values().map(|present| present.client(node)).collect()
    }

    fn is_empty(&self) -> bool {
        self.present.is_empty() && self.watchers.is_empty()
    }

    /// Drops the subscriptions that ended; whether any did.
    fn prune(&mut self, session_id: &str) -> bool {
        let before = self.present.len();
        self.present.retain(|_, present| present.connection.is_subscribed(session_id));
        self.present.len() != before
    }
}

#[derive(Default)]
pub struct PresenceActor {
    sessions: HashMap<String, SessionPresence>,
    /// The sessions each connection watches, for the per-connection bound and for cleaning up when it closes.
    watched: HashMap<u64, HashSet<String>>,
    /// In a cluster: where this node's lists go and other nodes' come from.
    share: Option<Arc<dyn PresenceShare>>,
    /// Other nodes' non-empty lists: by session, then by node.
    remote: HashMap<String, BTreeMap<String, Vec<PresenceClient>>>,
}

impl PresenceActor {
    /// A presence actor of a cluster node: it shares its lists through `share`.
    pub fn shared(share: Arc<dyn PresenceShare>) -> PresenceActor {
        PresenceActor { share: Some(share), ..PresenceActor::default() }
    }

    fn node(&self) -> Option<&str> {
        self.share.as_deref().map(PresenceShare::node)
    }

    /// The session's whole list: this node's connections, then each other node's by node name.
    fn clients(&self, session_id: &str) -> Vec<PresenceClient> {
        let mut clients = self.sessions.get(session_id).map(|session| session.clients(self.node())).unwrap_or_default();
        if let Some(nodes) = self.remote.get(session_id) {
            clients.extend(nodes.values().flatten().cloned());
        }
        clients
    }

    /// This node's list of the session changed: other nodes hear of it, and its watchers.
    fn local_change(&mut self, session_id: &str) {
        if let Some(share) = &self.share {
            let node = share.node();
            let local = self.sessions.get(session_id).map(|session| session.clients(Some(node))).unwrap_or_default();
            share.publish(session_id, local);
        }
        self.announce(session_id);
    }

    /// Sends the session's new list to its watchers; forgets the watchers whose connection is gone.
    fn announce(&mut self, session_id: &str) {
        let clients = self.clients(session_id);
        let Some(session) = self.sessions.get_mut(session_id) else {
            return;
        };
        if !session.watchers.is_empty() {
            let params = SessionPresenceChangedParams { session_id: session_id.to_owned(), clients };
            let mut gone = Vec::new();
            session.watchers.retain(|connection_id, notifier| {
                let open = notifier.notify::<SessionPresenceChanged>(&params).is_ok();
                if !open {
                    gone.push(*connection_id);
                }
                open
            });
            for connection_id in gone {
                self.forget_watch(connection_id, session_id);
            }
        }
        self.drop_if_empty(session_id);
    }

    fn forget_watch(&mut self, connection_id: u64, session_id: &str) {
        if let Some(sessions) = self.watched.get_mut(&connection_id) {
            sessions.remove(session_id);
            if sessions.is_empty() {
                self.watched.remove(&connection_id);
            }
        }
    }

    fn drop_if_empty(&mut self, session_id: &str) {
        if self.sessions.get(session_id).is_some_and(SessionPresence::is_empty) {
            self.sessions.remove(session_id);
        }
    }

    /// Finds the subscriptions that ended without their connection closing, and announces the changes.
    fn sweep(&mut self) {
        let mut changed = Vec::new();
        for (session_id, session) in &mut self.sessions {
            if session.prune(session_id) {
                changed.push(session_id.clone());
            }
        }
        for session_id in changed {
            self.local_change(&session_id);
        }
    }
}

impl Actor for PresenceActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(SWEEP_EVERY, |actor, _| actor.sweep());
        if let Some(share) = &self.share {
            let actor = ctx.address();
            share.watch(Box::new(move |change| actor.do_send(RemotePresenceChanged(change))));
        }
    }
}

impl Handler<RemotePresenceChanged> for PresenceActor {
    type Result = ();

    fn handle(&mut self, RemotePresenceChanged(change): RemotePresenceChanged, _: &mut Context<Self>) {
        if self.node() == Some(change.node.as_str()) {
            return;
        }
        let nodes = self.remote.entry(change.session_id.clone()).or_default();
        let changed = if change.clients.is_empty() {
            nodes.remove(&change.node).is_some()
        } else {
            nodes.insert(change.node, change.clients.clone()).as_ref() != Some(&change.clients)
        };
        if nodes.is_empty() {
            self.remote.remove(&change.session_id);
        }
        if changed {
            self.announce(&change.session_id);
        }
    }
}

impl Handler<Subscribed> for PresenceActor {
    type Result = ();

    fn handle(&mut self, message: Subscribed, _: &mut Context<Self>) {
        // A connection that closed meanwhile has already been told to leave (its `ConnectionClosed` is handled
        // after its close, which comes first): adding it now would leave it listed for good.
        if message.connection.is_closed() {
            return;
        }
        let session = self.sessions.entry(message.session_id.clone()).or_default();
        let connection_id = message.connection.connection_id();
        if session.present.contains_key(&connection_id) {
            return;
        }
        session.present.insert(connection_id, Present { connection: message.connection, since: now_rfc3339() });
        self.local_change(&message.session_id);
    }
}

impl Handler<ConnectionClosed> for PresenceActor {
    type Result = ();

    fn handle(&mut self, message: ConnectionClosed, _: &mut Context<Self>) {
        let connection_id = message.connection_id;
        for session_id in self.watched.remove(&connection_id).unwrap_or_default() {
            if let Some(session) = self.sessions.get_mut(&session_id) {
                session.watchers.remove(&connection_id);
            }
            self.drop_if_empty(&session_id);
        }
        let left: Vec<String> = self
            .sessions
            .iter_mut()
            .filter_map(|(session_id, session)| session.present.remove(&connection_id).map(|_| session_id.clone()))
            .collect();
        for session_id in left {
            self.local_change(&session_id);
        }
    }
}

impl Handler<WatchPresence> for PresenceActor {
    type Result = Result<PresenceList, EngineError>;

    fn handle(&mut self, message: WatchPresence, _: &mut Context<Self>) -> Self::Result {
        let connection_id = message.notifier.connection_id();
        let watched = self.watched.entry(connection_id).or_default();
        if !watched.contains(&message.session_id) && watched.len() >= MAX_WATCHED_SESSIONS {
            return Err(EngineError::TooManyPresenceWatches { limit: MAX_WATCHED_SESSIONS });
        }
        watched.insert(message.session_id.clone());
        // The list returned must be exact now, not as of the last sweep; the other watchers hear of what changed
        // (before this one is added: its reply carries the same list).
        let pruned =
            self.sessions.get_mut(&message.session_id).is_some_and(|session| session.prune(&message.session_id));
        if pruned {
            self.local_change(&message.session_id);
        }
        let clients = self.clients(&message.session_id);
        // A renewed watch replaces the earlier notifier.
        self.sessions.entry(message.session_id).or_default().watchers.insert(connection_id, message.notifier);
        Ok(PresenceList { clients, you: connection_label(connection_id, self.node()) })
    }
}

impl Handler<UnwatchPresence> for PresenceActor {
    type Result = bool;

    fn handle(&mut self, message: UnwatchPresence, _: &mut Context<Self>) -> bool {
        let removed = self
            .sessions
            .get_mut(&message.session_id)
            .is_some_and(|session| session.watchers.remove(&message.connection_id).is_some());
        self.forget_watch(message.connection_id, &message.session_id);
        self.drop_if_empty(&message.session_id);
        removed
    }
}
