//! The session's jobs that are not runs and keep it awake: the manual compaction in progress (`compaction.rs`; the
//! session is busy while it runs), the undo in progress (`undo.rs`; busy too) and the automatic title job in flight
//! (`title.rs`; one at a time, cancelled when a client names the session).

use tokio_util::sync::CancellationToken;

use super::compaction::ActiveCompaction;

#[derive(Default)]
pub(super) struct Jobs {
    compaction: Option<ActiveCompaction>,
    /// The id of the undo in progress.
    undo: Option<String>,
    title: Option<CancellationToken>,
}

impl Jobs {
    /// Whether a job is in flight: the session must not hibernate.
    pub(super) fn keep_awake(&self) -> bool {
        self.compaction.is_some() || self.undo.is_some() || self.title.is_some()
    }

    /// The id of the job that keeps the session busy as a run would (a manual compaction or an undo), if any.
    pub(super) fn busy(&self) -> Option<&str> {
        self.compaction.as_ref().map(|active| active.compaction_id.as_str()).or(self.undo.as_deref())
    }

    pub(super) fn undo(&self) -> Option<&str> {
        self.undo.as_deref()
    }

    pub(super) fn begin_undo(&mut self, undo_id: String) {
        self.undo = Some(undo_id);
    }

    pub(super) fn end_undo(&mut self) {
        self.undo = None;
    }

    /// The manual compaction in progress, if any.
    pub(super) fn compaction(&self) -> Option<&ActiveCompaction> {
        self.compaction.as_ref()
    }

    pub(super) fn begin_compaction(&mut self, active: ActiveCompaction) {
        self.compaction = Some(active);
    }

    pub(super) fn end_compaction(&mut self) {
        self.compaction = None;
    }

    /// Cancels the manual compaction `id`: whether it was still running, or `None` when no compaction of that id
    /// is in progress.
    pub(super) fn cancel_compaction(&self, id: &str) -> Option<bool> {
        let active = self.compaction.as_ref().filter(|active| active.compaction_id == id)?;
        let was_running = !active.cancel.is_cancelled();
        active.cancel.cancel();
        Some(was_running)
    }

    pub(super) fn title_running(&self) -> bool {
        self.title.is_some()
    }

    /// Notes a title job starting; it stops when the returned token is cancelled.
    pub(super) fn begin_title(&mut self) -> CancellationToken {
        let cancel = CancellationToken::new();
        self.title = Some(cancel.clone());
        cancel
    }

    pub(super) fn end_title(&mut self) {
        self.title = None;
    }

    /// Cancels the title job in flight, if any; it stays in flight until it ends.
    pub(super) fn cancel_title(&self) {
        if let Some(cancel) = &self.title {
            cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compaction(id: &str) -> ActiveCompaction {
        ActiveCompaction { compaction_id: id.to_owned(), cancel: CancellationToken::new() }
    }

    #[test]
    fn a_compaction_is_cancelled_by_its_own_id_only_and_once() {
        let mut jobs = Jobs::default();
        assert_eq!(jobs.cancel_compaction("c-1"), None);
        jobs.begin_compaction(compaction("c-1"));
        assert_eq!(jobs.cancel_compaction("c-2"), None);
        assert_eq!(jobs.cancel_compaction("c-1"), Some(true));
        assert_eq!(jobs.cancel_compaction("c-1"), Some(false), "cancelled already, still in progress until it ends");
        assert!(jobs.compaction().is_some_and(|active| active.cancel.is_cancelled()));
        jobs.end_compaction();
        assert_eq!(jobs.cancel_compaction("c-1"), None);
    }

    #[test]
    fn either_job_keeps_the_session_awake_until_it_ends() {
        let mut jobs = Jobs::default();
        assert!(!jobs.keep_awake());
        jobs.begin_compaction(compaction("c-1"));
        assert!(jobs.keep_awake());
        jobs.end_compaction();
        let title = jobs.begin_title();
        assert!(jobs.keep_awake() && jobs.title_running());
        jobs.cancel_title();
        assert!(title.is_cancelled());
        assert!(jobs.keep_awake(), "a cancelled title job runs until it ends");
        jobs.end_title();
        assert!(!jobs.keep_awake() && !jobs.title_running());
    }

    #[test]
    fn an_undo_keeps_the_session_busy_and_awake_until_it_ends() {
        let mut jobs = Jobs::default();
        assert_eq!(jobs.busy(), None);
        jobs.begin_undo("u-1".into());
        assert_eq!((jobs.busy(), jobs.keep_awake()), (Some("u-1"), true));
        jobs.end_undo();
        assert_eq!((jobs.busy(), jobs.keep_awake()), (None, false));
    }
}
