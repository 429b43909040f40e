//! The session's metadata: `session.get` when the engine asks the actor, renames (idempotent by
//! `client_rename_id`), and publishing the metadata of every durable batch for `session.get` and the supervisor's
//! index.

use actix::prelude::*;
use troupe_protocol::types::common::SessionMeta;
use troupe_protocol::types::events::EventPayload;
use troupe_protocol::types::origin::Origin;
use troupe_protocol::types::session::TitleChange;
use troupe_runtime::session_state::{SessionState, normalize_title};

use super::SessionActor;
use super::durable::Durable;
use crate::error::EngineError;
use crate::ports::supervisor::SessionMetaChanged;

/// How long the supervisor's index may go without a live session's progress (`last_event_seq`,
/// `last_activity_at`) when nothing else changed: what the cluster's directory may lag by.
pub(super) const PROGRESS_REPORT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `b` differs from `a` only in the session's progress. Every field is named, so a new field of
/// `SessionMeta` must be placed on one side or the other.
fn differs_only_in_progress(a: &SessionMeta, b: &SessionMeta) -> bool {
    let SessionMeta {
        session_id,
        origin,
        cwd,
        title,
        title_updated_seq,
        creation_selection,
        status,
        last_event_seq: _,
        created_at,
        last_activity_at: _,
        skipped_events,
        archived,
        node,
        may_be_stale,
    } = a;
    *session_id == b.session_id
        && *origin == b.origin
        && *cwd == b.cwd
        && *title == b.title
        && *title_updated_seq == b.title_updated_seq
        && *creation_selection == b.creation_selection
        && *status == b.status
        && *created_at == b.created_at
        && *skipped_events == b.skipped_events
        && *archived == b.archived
        && *node == b.node
        && *may_be_stale == b.may_be_stale
}

/// The session's metadata.
#[derive(Message)]
#[rtype(result = "Result<SessionMeta, EngineError>")]
pub struct GetMeta;

/// Sets, clears or resets the title; idempotent by `client_rename_id`. Replies once the event is accepted, with the
/// session's metadata after it, which holds once the event is durable ([`Durable::into_parts`]).
#[derive(Message)]
#[rtype(result = "Result<Durable<SessionMeta>, EngineError>")]
pub struct Rename {
    pub client_rename_id: String,
    pub change: TitleChange,
}

impl SessionActor {
    /// Publishes the metadata for `session.get` and tells the supervisor's index: at once when anything but the
    /// session's progress changed (its title, status, archive mark…), else within [`PROGRESS_REPORT_EVERY`].
    ///
    /// A batch that only moves `last_event_seq` and `last_activity_at` (most of a run's batches) is not worth a
    /// message to the supervisor's thread each: it was about a seventh of a tool turn's CPU and context switches
    /// (docs/performance.md, "Issue 28: the supervisor told of progress and usage less often"). The supervisor
    /// serves a live session's progress from this publication meanwhile (`served_meta`), so `session.list` and
    /// `session.tree` stay exact on this node; the cluster's directory may be that much behind. The pending report
    /// sends this publication, whatever the state holds by then ([`send_meta_report`](Self::send_meta_report)).
    pub(super) fn report_meta(&mut self, ctx: &mut Context<Self>) {
        let Some(state) = &self.state else { return };
        let meta = state.meta();
        if self.meta_reported.as_ref().is_some_and(|reported| differs_only_in_progress(reported, &meta)) {
            self.published.publish(meta);
            if self.meta_report_due.is_none() {
                let due = ctx.run_later(PROGRESS_REPORT_EVERY, |actor, _| {
                    actor.meta_report_due = None;
                    actor.send_meta_report();
                });
                self.meta_report_due = Some(due);
            }
            return;
        }
        if let Some(due) = self.meta_report_due.take() {
            ctx.cancel_future(due);
        }
        self.published.publish(meta.clone());
        self.meta_reported = Some(meta.clone());
        self.supervisor.do_send(SessionMetaChanged { meta });
    }

    /// Tells the supervisor the metadata last published (a pending progress report, or the last one at stop).
    ///
    /// What was published at the newest durable batch, not the state now: a stopping actor may hold events whose
    /// write failed (a poisoned log) or no state at all (retired for a deletion), and neither may reach the index.
    pub(super) fn send_meta_report(&mut self) {
        if let Some(meta) = self.published.meta() {
            self.meta_reported = Some(meta.clone());
            self.supervisor.do_send(SessionMetaChanged { meta });
        }
    }

    /// Sends the supervisor what it was not told yet, the actor being about to stop (its timers will not run, and
    /// the supervisor takes nothing more from its publications): a pending progress report, and the spent usage
    /// left and not taken (`usage`).
    pub(super) fn flush_reports(&mut self) {
        if self.meta_report_due.take().is_some() {
            self.send_meta_report();
        }
        self.flush_usage_report();
    }

    /// Publishes the metadata to `published` and the spent usage to `usage` (the engine's views of this live
    /// session) from now on.
    pub fn publishing_to(
        mut self,
        published: crate::published_meta::PublishedMeta,
        usage: crate::published_usage::PublishedUsage,
    ) -> Self {
        self.published = published;
        self.published_usage = usage;
        self
    }

    /// Accepts a rename, or recognizes its redelivery; returns the `seq` whose durability answers it.
    pub(super) fn accept_rename(&mut self, ctx: &mut Context<Self>, message: Rename) -> Result<u64, EngineError> {
        self.ready_state()?;
        let change = match message.change {
            TitleChange::Set { title } => TitleChange::Set {
                title: normalize_title(&title).map_err(|reason| EngineError::InvalidTitle {
                    session_id: self.session_id.clone(),
                    client_rename_id: message.client_rename_id.clone(),
                    reason,
                })?,
            },
            other => other,
        };
        let recorded = self.state.as_ref().and_then(|state| state.recorded_rename(&message.client_rename_id));
        if let Some(recorded) = recorded {
            if recorded.change != change {
                return Err(EngineError::RenameIdempotencyConflict {
                    session_id: self.session_id.clone(),
                    client_rename_id: message.client_rename_id,
                });
            }
            // A redelivery: answered like the original, once the original is durable.
            return Ok(recorded.seq);
        }
        let title = match &change {
            TitleChange::Set { title } => Some(title.clone()),
            TitleChange::Clear | TitleChange::Reset => None,
        };
        if change != TitleChange::Reset {
            // A client's title wins over an automatic one still being asked for.
            self.cancel_title_job();
        }
        let payload = EventPayload::SessionTitleCommitted {
            title,
            change: (&change).into(),
            client_rename_id: message.client_rename_id,
        };
        self.append(ctx, None, Some(Origin::User), payload)
    }
}

impl Handler<GetMeta> for SessionActor {
    type Result = Result<SessionMeta, EngineError>;

    fn handle(&mut self, _: GetMeta, _: &mut Context<Self>) -> Self::Result {
        Ok(self.ready_state()?.meta())
    }
}

impl Handler<Rename> for SessionActor {
    type Result = Result<Durable<SessionMeta>, EngineError>;

    fn handle(&mut self, message: Rename, ctx: &mut Context<Self>) -> Self::Result {
        let seq = self.accept_rename(ctx, message)?;
        let meta = self.state.as_ref().map(SessionState::meta).ok_or(EngineError::ShuttingDown)?;
        Ok(Durable::new(self.when_durable(seq), meta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::published_meta::sample_meta;

    #[test]
    fn only_a_change_of_progress_alone_may_wait_for_the_next_report() {
        let reported = sample_meta("s", "one");
        let mut progressed = reported.clone();
        progressed.last_event_seq += 3;
        progressed.last_activity_at = "2026-01-01T00:02:00.000Z".to_owned();
        assert!(differs_only_in_progress(&reported, &progressed));
        assert!(differs_only_in_progress(&reported, &reported));

        let mut renamed = progressed.clone();
        renamed.title = Some("two".to_owned());
        assert!(!differs_only_in_progress(&reported, &renamed), "a title is reported at once");
        let mut running = progressed.clone();
        running.status = troupe_protocol::types::common::SessionStatus::Running;
        assert!(!differs_only_in_progress(&reported, &running), "a status is reported at once");
        let mut archived = progressed;
        archived.archived = true;
        assert!(!differs_only_in_progress(&reported, &archived), "an archive mark is reported at once");
    }
}
