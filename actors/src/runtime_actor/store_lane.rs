//! The actor's store lane: how one change of the provider connections is stored and adopted.
//!
//! A change never blocks the actor's thread. Building a client (the local provider reads its script) and saving
//! (two `fsync`s) run on blocking threads, listing a provider's models is a network call, and meanwhile the actor
//! keeps answering snapshot requests. Changes are still applied one at a time, in arrival order, through the lane:
//! once the changes before it are done, a change decides on the latest durable state (a redelivery finds the first
//! answer there), its new contents are saved, and only once they are durable does the actor adopt them, install or
//! remove the client and tell every connection. A failed save changes nothing.
//!
//! In a cluster a change is first stored in the cluster's share (its answer under the client id, then the provider's
//! state), and only then saved here: a request another node answered already gets that answer, and one the share
//! cannot store is refused with nothing stored anywhere.

use troupe_runtime::provider_share::{ShareUnavailable, ShareWrite, SharedProvider, Stored};
use troupe_runtime::provider_store::ProviderStoreContents;

use super::*;

/// What a change decided on the latest durable state.
pub(super) enum Staged<R> {
    /// Nothing to save: reply with this (a redelivery of a recorded answer).
    Answer(R),
    /// Save these contents; once they are durable, `adopt` applies the change to the actor and builds the reply.
    /// In a cluster, `shared` is stored in the share first.
    Save { contents: ProviderStoreContents, adopt: Box<dyn FnOnce(&mut RuntimeActor) -> R>, shared: Box<ShareStep<R>> },
}

/// The reply built from an answer recorded under the client id: a replay, or a conflict.
pub(super) type Replay<R> = Box<dyn FnOnce(&RuntimeActor, &RecordedAnswer) -> Result<R, EngineError>>;

/// What a change stores in the cluster's share, and how it replies if the share had an answer for its client id.
pub(super) struct ShareStep<R> {
    write: ShareWrite,
    replay: Replay<R>,
}

/// How the storing of a change ended.
enum Saved<R> {
    /// Another node answered the client id first: nothing was stored.
    Answered(RecordedAnswer, Replay<R>),
    /// The share could not store the change: nothing was stored.
    Unshared { provider_id: String, error: ShareUnavailable },
    /// Saved here (or not: the error), after the share stored it at `revision` in a cluster.
    Local {
        saved: Result<(ProviderStoreContents, Result<(), troupe_runtime::error::RuntimeError>), tokio::task::JoinError>,
        revision: Option<(String, u64)>,
    },
}

/// How a change ends after its turn in the lane.
enum Finish<R> {
    Reply(Result<R, EngineError>),
    Adopt(Box<dyn FnOnce(&mut RuntimeActor) -> R>),
}

pub(super) type Reply<R> = ResponseActFuture<RuntimeActor, Result<R, EngineError>>;

impl RuntimeActor {
    /// Applies one change of `providers.json` in its turn (see the module docs). `what` names the change in the
    /// error of a failed save.
    pub(super) fn change_store<R: 'static>(
        &self,
        what: &'static str,
        stage: impl FnOnce(&mut RuntimeActor) -> Result<Staged<R>, EngineError> + 'static,
    ) -> Reply<R> {
        let lane = self.store_lane.clone();
        let turn = async move { lane.lock_owned().await };
        Box::pin(turn.into_actor(self).then(move |turn, actor, _| {
            let (save, shared, finish) = match stage(actor) {
                Ok(Staged::Save { contents, adopt, shared }) => (
                    Some(actor.store.staged(contents)),
                    actor.share.clone().map(|share| (share, shared)),
                    Finish::Adopt(adopt),
                ),
                Ok(Staged::Answer(reply)) => (None, None, Finish::Reply(Ok(reply))),
                Err(error) => (None, None, Finish::Reply(Err(error))),
            };
            let saving = async move {
                let pending = save?;
                let mut revision = None;
                if let Some((share, step)) = shared {
                    let ShareStep { write, replay } = *step;
                    let provider_id = write.provider_id.clone();
                    match share.store(write).await {
                        Ok(Stored::Stored { revision: stored }) => revision = Some((provider_id, stored)),
                        Ok(Stored::AlreadyAnswered(recorded)) => return Some(Saved::Answered(recorded, replay)),
                        Err(error) => return Some(Saved::Unshared { provider_id, error }),
                    }
                }
                let saved = tokio::task::spawn_blocking(move || {
                    let saved = pending.save();
                    (pending.contents, saved)
                })
                .await;
                Some(Saved::Local { saved, revision })
            };
            saving.into_actor(actor).map(move |saved, actor, _| {
                // The next change takes its turn once this one is adopted (or abandoned).
                let _turn = turn;
                let adopt = match finish {
                    Finish::Reply(reply) => return reply,
                    Finish::Adopt(adopt) => adopt,
                };
                // A change the share stored but this node could not save reaches this node again through the
                // share's follow, which saves it then.
                let failure = match saved {
                    Some(Saved::Local { saved: Ok((contents, Ok(()))), revision }) => {
                        actor.store.contents = contents;
                        if let Some((provider_id, revision)) = revision {
                            actor.shared_revisions.insert(provider_id, revision);
                        }
                        return Ok(adopt(actor));
                    }
                    Some(Saved::Answered(recorded, replay)) => return replay(actor, &recorded),
                    Some(Saved::Unshared { provider_id, error }) => {
                        return Err(EngineError::ProviderShareUnavailable { provider_id, detail: error.detail });
                    }
                    Some(Saved::Local { saved: Ok((_, Err(error))), .. }) => error.to_string(),
                    Some(Saved::Local { saved: Err(join_error), .. }) => {
                        format!("the save did not finish: {join_error}")
                    }
                    None => "nothing was saved".to_owned(),
                };
                Err(EngineError::Internal { detail: format!("{what} was not saved: {failure}") })
            })
        }))
    }
}

/// The share's part of a change staged in `contents`: the answer just recorded under `key`, and the provider's
/// state there.
pub(super) fn share_step<R>(
    contents: &ProviderStoreContents,
    provider_id: &str,
    key: &str,
    answer: RecordedAnswer,
    replay: Replay<R>,
) -> ShareStep<R> {
    let write = ShareWrite {
        client_key: key.to_owned(),
        answer,
        provider_id: provider_id.to_owned(),
        state: SharedProvider {
            generation: contents.generations.get(provider_id).copied().unwrap_or(0),
            connection: contents.connections.get(provider_id).cloned(),
        },
    };
    ShareStep { write, replay }
}
