//! What a session knows about producer messages, rebuilt from its log: the messages waiting for a run
//! (pending), those a run took (claimed), and the receipts of recent sends by (owner, idempotency key).
//!
//! A producer (a plugin, a delegation, a goal) sends a message with a mode: `steer` enters an active run at its
//! next boundary, `queue` waits for the run to end; either wakes an idle session. The session actor decides when
//! a run claims messages; this book only follows the durable events, so a restart gives the same state: messages
//! claimed by a run that was in flight are still claimed here until the session releases them.
//!
//! Receipts and finished messages are remembered bounded, like the other idempotency records
//! ([`crate::recent`]): a retry comes soon after the original, and an older key is treated as new.

use std::collections::BTreeMap;

use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::producers::{ProducerMessageMode, ProducerOwner};

use crate::recent::RecentRecords;

/// The most messages a session holds for delivery (pending, or claimed and not yet consumed); a send beyond it is
/// refused (`producer_backlog_full`) with nothing written.
pub const MAX_HELD_MESSAGES: usize = 256;
/// The most bytes of bodies a session holds for delivery, under the same rule as [`MAX_HELD_MESSAGES`].
pub const MAX_HELD_BYTES: usize = 16 * 1024 * 1024;
/// What joins the bodies of the messages one run claims into its input.
pub const BODY_SEPARATOR: &str = "\n\n";

/// The oldest messages of `messages` (in the order given) whose bodies, joined by [`BODY_SEPARATOR`], fit in
/// `limit` bytes: a prefix, so delivery order holds, and never empty when `messages` is not (one body alone is
/// already bounded by the same limit when it is sent).
pub fn oldest_within<'a>(
    messages: impl IntoIterator<Item = &'a ProducerMessage>,
    limit: usize,
) -> Vec<&'a ProducerMessage> {
    let mut taken: Vec<&ProducerMessage> = Vec::new();
    let mut bytes = 0usize;
    for message in messages {
        let added = message.body.len() + if taken.is_empty() { 0 } else { BODY_SEPARATOR.len() };
        if !taken.is_empty() && bytes.saturating_add(added) > limit {
            break;
        }
        bytes = bytes.saturating_add(added);
        taken.push(message);
    }
    taken
}

/// A message accepted and not yet consumed or discarded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerMessage {
    pub message_id: String,
    pub owner: ProducerOwner,
    pub mode: ProducerMessageMode,
    pub idempotency_key: String,
    pub body: String,
    /// The `seq` of its `producer_message_accepted`: messages are delivered in this order.
    pub accepted_seq: u64,
    /// The run that claimed it, if one did.
    pub claimed_by: Option<String>,
}

/// What a send recorded under (owner, idempotency key), to answer a retry or refuse a different content.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProducerReceipt {
    pub message_id: String,
    /// The `seq` of the `producer_message_accepted` event.
    pub seq: u64,
    pub mode: ProducerMessageMode,
    pub body: String,
}

impl ProducerReceipt {
    /// Whether a send with this content is a retry of the recorded one.
    pub fn same_content(&self, mode: ProducerMessageMode, body: &str) -> bool {
        self.mode == mode && self.body == body
    }
}

/// How a message that is no longer pending or claimed ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FinishedHow {
    Consumed,
    Discarded,
}

/// A message that ended, remembered (bounded) so that a repeated discard is answered without an event.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FinishedMessage {
    pub owner: ProducerOwner,
    pub how: FinishedHow,
}

/// Where a message stands, for a discard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageStanding<'a> {
    Pending(&'a ProducerMessage),
    Claimed(&'a ProducerMessage),
    Finished(&'a FinishedMessage),
    /// Never accepted here, or finished too long ago to be remembered.
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProducerBook {
    /// Pending and claimed messages by `accepted_seq`, so iteration is delivery order.
    messages: BTreeMap<u64, ProducerMessage>,
    /// `message_id` → `accepted_seq`.
    by_id: std::collections::HashMap<String, u64>,
    /// The newest receipts by (owner, key).
    receipts: RecentRecords<ProducerReceipt>,
    /// The newest consumed or discarded messages by id.
    finished: RecentRecords<FinishedMessage>,
}

/// The key of a receipt: the owner (as its JSON, which is unambiguous) and the idempotency key.
fn receipt_key(owner: &ProducerOwner, key: &str) -> String {
    let owner = serde_json::to_string(owner).unwrap_or_default();
    format!("{owner}\u{0}{key}")
}

impl ProducerBook {
    /// The receipt of the send by `owner` under `key`, if it is remembered.
    pub fn receipt(&self, owner: &ProducerOwner, key: &str) -> Option<&ProducerReceipt> {
        self.receipts.get(&receipt_key(owner, key))
    }

    /// Messages no run has claimed, in acceptance order.
    pub fn pending(&self) -> impl Iterator<Item = &ProducerMessage> {
        self.messages.values().filter(|message| message.claimed_by.is_none())
    }

    /// Pending messages of one mode, in acceptance order.
    pub fn pending_of(&self, mode: ProducerMessageMode) -> impl Iterator<Item = &ProducerMessage> {
        self.pending().filter(move |message| message.mode == mode)
    }

    pub fn has_pending(&self) -> bool {
        self.pending().next().is_some()
    }

    /// Messages `run_id` claimed and has not consumed, in acceptance order.
    pub fn claimed_by<'a>(&'a self, run_id: &'a str) -> impl Iterator<Item = &'a ProducerMessage> + 'a {
        self.messages.values().filter(move |message| message.claimed_by.as_deref() == Some(run_id))
    }

    /// Every claimed message, whichever run claimed it.
    pub fn claimed(&self) -> impl Iterator<Item = &ProducerMessage> {
        self.messages.values().filter(|message| message.claimed_by.is_some())
    }

    pub fn standing(&self, message_id: &str) -> MessageStanding<'_> {
        if let Some(message) = self.by_id.get(message_id).and_then(|seq| self.messages.get(seq)) {
            return match message.claimed_by {
                Some(_) => MessageStanding::Claimed(message),
                None => MessageStanding::Pending(message),
            };
        }
        match self.finished.get(message_id) {
            Some(finished) => MessageStanding::Finished(finished),
            None => MessageStanding::Unknown,
        }
    }

    /// Messages pending or claimed (they stay in memory until delivered or discarded).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The bytes of the bodies of the messages pending or claimed.
    pub fn held_bytes(&self) -> usize {
        self.messages.values().map(|message| message.body.len()).sum()
    }

    fn message_mut(&mut self, message_id: &str) -> Option<&mut ProducerMessage> {
        let seq = self.by_id.get(message_id)?;
        self.messages.get_mut(seq)
    }

    fn finish(&mut self, message_id: &str, how: FinishedHow) {
        let Some(seq) = self.by_id.remove(message_id) else { return };
        if let Some(message) = self.messages.remove(&seq) {
            self.finished.insert(message_id, FinishedMessage { owner: message.owner, how });
        }
    }

    pub fn apply(&mut self, event: &StoredEvent) {
        match &event.payload {
            EventPayload::ProducerMessageAccepted { message_id, producer_owner, mode, idempotency_key, body } => {
                self.receipts.insert(
                    &receipt_key(producer_owner, idempotency_key),
                    ProducerReceipt { message_id: message_id.clone(), seq: event.seq, mode: *mode, body: body.clone() },
                );
                self.by_id.insert(message_id.clone(), event.seq);
                self.messages.insert(
                    event.seq,
                    ProducerMessage {
                        message_id: message_id.clone(),
                        owner: producer_owner.clone(),
                        mode: *mode,
                        idempotency_key: idempotency_key.clone(),
                        body: body.clone(),
                        accepted_seq: event.seq,
                        claimed_by: None,
                    },
                );
            }
            EventPayload::ProducerMessagesClaimed { message_ids } => {
                let Some(run_id) = event.run_id.as_deref() else { return };
                for message_id in message_ids {
                    if let Some(message) = self.message_mut(message_id) {
                        message.claimed_by = Some(run_id.to_owned());
                    }
                }
            }
            EventPayload::ProducerMessagesReleased { message_ids, .. } => {
                for message_id in message_ids {
                    if let Some(message) = self.message_mut(message_id) {
                        message.claimed_by = None;
                    }
                }
            }
            EventPayload::ProducerMessageConsumed { message_id } => self.finish(message_id, FinishedHow::Consumed),
            EventPayload::ProducerMessageDiscarded { message_id } => self.finish(message_id, FinishedHow::Discarded),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(name: &str) -> ProducerOwner {
        ProducerOwner::Plugin { plugin: name.into() }
    }

    fn event(seq: u64, run_id: Option<&str>, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: run_id.map(str::to_owned),
            seq,
            timestamp: "t".into(),
            origin: Some("engine:producer".into()),
            payload,
        }
    }

    fn accepted(seq: u64, id: &str, owner: &ProducerOwner, mode: ProducerMessageMode, key: &str) -> StoredEvent {
        event(
            seq,
            None,
            EventPayload::ProducerMessageAccepted {
                message_id: id.into(),
                producer_owner: owner.clone(),
                mode,
                idempotency_key: key.into(),
                body: format!("body of {id}"),
            },
        )
    }

    fn ids<'a>(messages: impl Iterator<Item = &'a ProducerMessage>) -> Vec<String> {
        messages.map(|message| message.message_id.clone()).collect()
    }

    #[test]
    fn messages_move_from_pending_to_claimed_to_consumed_in_acceptance_order() {
        let mut book = ProducerBook::default();
        book.apply(&accepted(2, "m1", &plugin("a"), ProducerMessageMode::Queue, "k1"));
        book.apply(&accepted(3, "m2", &plugin("a"), ProducerMessageMode::Steer, "k2"));
        book.apply(&accepted(4, "m3", &plugin("b"), ProducerMessageMode::Steer, "k1"));
        assert_eq!(ids(book.pending()), ["m1", "m2", "m3"]);
        assert_eq!(ids(book.pending_of(ProducerMessageMode::Steer)), ["m2", "m3"]);

        book.apply(&event(5, Some("r1"), EventPayload::ProducerMessagesClaimed { message_ids: vec!["m2".into()] }));
        assert_eq!(ids(book.pending()), ["m1", "m3"]);
        assert_eq!(ids(book.claimed_by("r1")), ["m2"]);
        assert!(matches!(book.standing("m2"), MessageStanding::Claimed(_)));

        book.apply(&event(6, Some("r1"), EventPayload::ProducerMessageConsumed { message_id: "m2".into() }));
        assert_eq!(ids(book.claimed_by("r1")), Vec::<String>::new());
        assert!(matches!(
            book.standing("m2"),
            MessageStanding::Finished(FinishedMessage { how: FinishedHow::Consumed, .. })
        ));
        assert_eq!(book.len(), 2);
    }

    #[test]
    fn released_messages_are_pending_again_and_discarded_ones_are_gone() {
        let mut book = ProducerBook::default();
        book.apply(&accepted(2, "m1", &plugin("a"), ProducerMessageMode::Steer, "k1"));
        book.apply(&accepted(3, "m2", &plugin("a"), ProducerMessageMode::Queue, "k2"));
        let claim = EventPayload::ProducerMessagesClaimed { message_ids: vec!["m1".into(), "m2".into()] };
        book.apply(&event(4, Some("r1"), claim));
        assert!(!book.has_pending());
        let release = EventPayload::ProducerMessagesReleased {
            message_ids: vec!["m1".into(), "m2".into()],
            reason: "interrupted".into(),
        };
        book.apply(&event(5, None, release));
        assert_eq!(ids(book.pending()), ["m1", "m2"]);

        book.apply(&event(6, None, EventPayload::ProducerMessageDiscarded { message_id: "m1".into() }));
        assert_eq!(ids(book.pending()), ["m2"]);
        match book.standing("m1") {
            MessageStanding::Finished(finished) => {
                assert_eq!(finished.how, FinishedHow::Discarded);
                assert_eq!(finished.owner, plugin("a"));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(book.standing("never"), MessageStanding::Unknown);
    }

    #[test]
    fn receipts_are_kept_by_owner_and_key_and_compare_content() {
        let mut book = ProducerBook::default();
        book.apply(&accepted(2, "m1", &plugin("a"), ProducerMessageMode::Queue, "k"));
        book.apply(&accepted(3, "m2", &plugin("b"), ProducerMessageMode::Queue, "k"));
        let receipt = book.receipt(&plugin("a"), "k").unwrap();
        assert_eq!((receipt.message_id.as_str(), receipt.seq), ("m1", 2));
        assert!(receipt.same_content(ProducerMessageMode::Queue, "body of m1"));
        assert!(!receipt.same_content(ProducerMessageMode::Steer, "body of m1"));
        assert!(!receipt.same_content(ProducerMessageMode::Queue, "other"));
        assert_eq!(book.receipt(&plugin("b"), "k").unwrap().message_id, "m2", "another owner's key is its own");
        let goal = ProducerOwner::Goal { goal_id: "k".into() };
        assert!(book.receipt(&goal, "k").is_none());
        // A consumed message's receipt stays, so a late retry is still answered with it.
        book.apply(&event(4, Some("r"), EventPayload::ProducerMessagesClaimed { message_ids: vec!["m1".into()] }));
        book.apply(&event(5, Some("r"), EventPayload::ProducerMessageConsumed { message_id: "m1".into() }));
        assert_eq!(book.receipt(&plugin("a"), "k").unwrap().message_id, "m1");
    }

    #[test]
    fn oldest_within_takes_a_prefix_that_fits_and_at_least_one() {
        let mut book = ProducerBook::default();
        for n in 0..4u64 {
            book.apply(&accepted(2 + n, &format!("m{n}"), &plugin("a"), ProducerMessageMode::Queue, &format!("k{n}")));
        }
        // Each body is "body of mN" (10 bytes); two with the separator are 22.
        assert_eq!(ids(oldest_within(book.pending(), 22).into_iter()), ["m0", "m1"]);
        assert_eq!(ids(oldest_within(book.pending(), 33).into_iter()), ["m0", "m1"]);
        assert_eq!(ids(oldest_within(book.pending(), 34).into_iter()), ["m0", "m1", "m2"]);
        assert_eq!(ids(oldest_within(book.pending(), 3).into_iter()), ["m0"], "always at least one");
        assert!(oldest_within(book.pending_of(ProducerMessageMode::Steer), 100).is_empty());
        assert_eq!(book.held_bytes(), 40);
    }

    #[test]
    fn receipts_and_finished_messages_are_bounded() {
        let mut book = ProducerBook::default();
        let total = crate::recent::MAX_RECENT_RECORDS as u64 + 5;
        for n in 0..total {
            let id = format!("m{n}");
            book.apply(&accepted(2 + 2 * n, &id, &plugin("a"), ProducerMessageMode::Queue, &format!("k{n}")));
            book.apply(&event(3 + 2 * n, None, EventPayload::ProducerMessageDiscarded { message_id: id }));
        }
        assert!(book.receipt(&plugin("a"), "k0").is_none(), "the oldest receipt is forgotten");
        assert!(book.receipt(&plugin("a"), &format!("k{}", total - 1)).is_some());
        assert_eq!(book.standing("m0"), MessageStanding::Unknown);
        assert!(book.is_empty());
    }
}
