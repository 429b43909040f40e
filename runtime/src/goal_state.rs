//! The projection of a root session's goal from its log: [`GoalBook`].
//!
//! A goal is an objective with an ordered checklist that drives automatic runs (see `docs/runtime-semantics.md`).
//! Its whole state is derived from three durable events (`goal_activated`, `goal_checklist_revised`,
//! `goal_lifecycle_changed`), so a restart rebuilds exactly the [`GoalState`] clients saw. The book also counts
//! the automatic runs started since the checklist last changed, which is what bounds a model that never makes
//! progress; being projected, that count survives restarts too.
//!
//! The transitions the engine may append are decided here as pure functions ([`GoalBook::checklist_update`],
//! [`GoalBook::lifecycle`]), so the session actor only validates identity and appends.

use troupe_protocol::types::common::RunSelection;
use troupe_protocol::types::events::{EventPayload, StoredEvent};
use troupe_protocol::types::goal::{GoalItem, GoalLifecycleAction, GoalState, GoalStatus};
use troupe_protocol::types::origin::Origin;

/// The reason recorded when a checklist with every item finished completes its goal.
pub const COMPLETION_REASON: &str = "every checklist item is finished";

/// The most items a `goal_update` checklist may hold.
pub const MAX_CHECKLIST_ITEMS: usize = 100;
/// The most bytes (UTF-8) one checklist item's description may hold.
pub const MAX_ITEM_DESCRIPTION_BYTES: usize = 1024;
/// The most bytes the descriptions of a whole checklist may hold together.
pub const MAX_CHECKLIST_BYTES: usize = 64 * 1024;

/// Checks a model's checklist against [`MAX_CHECKLIST_ITEMS`], [`MAX_ITEM_DESCRIPTION_BYTES`] and
/// [`MAX_CHECKLIST_BYTES`]; the error says which bound it exceeds, for the model to read.
pub fn check_checklist(items: &[GoalItem]) -> Result<(), String> {
    if items.len() > MAX_CHECKLIST_ITEMS {
        return Err(format!(
            "the checklist has {} items; at most {MAX_CHECKLIST_ITEMS} are accepted: group related steps into one item",
            items.len()
        ));
    }
    if let Some((index, item)) =
        items.iter().enumerate().find(|(_, item)| item.description.len() > MAX_ITEM_DESCRIPTION_BYTES)
    {
        return Err(format!(
            "item {} has a description of {} bytes; at most {MAX_ITEM_DESCRIPTION_BYTES} are accepted: keep each \
             item a short step",
            index + 1,
            item.description.len()
        ));
    }
    let total: usize = items.iter().map(|item| item.description.len()).sum();
    if total > MAX_CHECKLIST_BYTES {
        return Err(format!(
            "the checklist's descriptions are {total} bytes together; at most {MAX_CHECKLIST_BYTES} are accepted"
        ));
    }
    Ok(())
}

/// A root session's current goal and the count of automatic runs without checklist progress.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GoalBook {
    current: Option<GoalState>,
    /// Automatic runs (`run_started` with origin `engine:goal` ([`Origin::GOAL`])) started since the goal was activated or
    /// resumed, or its checklist last changed.
    runs_without_progress: u32,
}

/// Why a lifecycle request cannot be applied to the current goal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LifecycleRefusal {
    /// The action does not apply to the goal's status (pause a paused goal, resume an active one).
    WrongStatus { status: GoalStatus },
    /// The goal is completed or cancelled.
    Terminal { status: GoalStatus },
    /// A selection was given with pause or cancel.
    SelectionNotAllowed,
}

impl GoalBook {
    /// The current goal (the latest activated one, in whatever status), if any.
    pub fn current(&self) -> Option<&GoalState> {
        self.current.as_ref()
    }

    /// The current goal when it is active or paused (not terminal).
    pub fn open(&self) -> Option<&GoalState> {
        self.current.as_ref().filter(|goal| !is_terminal(goal.status))
    }

    /// The current goal when it is active.
    pub fn active(&self) -> Option<&GoalState> {
        self.current.as_ref().filter(|goal| goal.status == GoalStatus::Active)
    }

    /// Automatic runs since the checklist last changed (or the goal was activated or resumed).
    pub fn runs_without_progress(&self) -> u32 {
        self.runs_without_progress
    }

    /// Applies one event of the log.
    pub fn apply(&mut self, event: &StoredEvent) {
        match &event.payload {
            EventPayload::GoalActivated { goal_id, objective, revision, selection } => {
                self.current = Some(GoalState {
                    goal_id: goal_id.clone(),
                    objective: objective.clone(),
                    status: GoalStatus::Active,
                    items: Vec::new(),
                    revision: *revision,
                    selection: selection.clone(),
                    blocked: None,
                });
                self.runs_without_progress = 0;
            }
            EventPayload::GoalChecklistRevised { goal_id, revision, items } => {
                if let Some(goal) = self.current.as_mut().filter(|goal| goal.goal_id == *goal_id) {
                    if goal.items != *items {
                        self.runs_without_progress = 0;
                    }
                    goal.items.clone_from(items);
                    goal.revision = *revision;
                }
            }
            EventPayload::GoalLifecycleChanged { goal_id, revision, status, selection, .. } => {
                if let Some(goal) = self.current.as_mut().filter(|goal| goal.goal_id == *goal_id) {
                    if *status == GoalStatus::Active {
                        self.runs_without_progress = 0;
                    }
                    goal.status = *status;
                    goal.revision = *revision;
                    if selection.is_some() {
                        goal.selection.clone_from(selection);
                    }
                }
            }
            EventPayload::RunStarted { .. } if event.origin_of() == Some(Origin::GOAL) && self.active().is_some() => {
                self.runs_without_progress = self.runs_without_progress.saturating_add(1);
            }
            _ => {}
        }
    }

    /// The events a model's `goal_update {items}` appends to the current goal: the revised checklist, then the
    /// completion when the list is non-empty and every item is finished. `None` when there is no open goal.
    pub fn checklist_update(&self, items: Vec<GoalItem>) -> Option<Vec<EventPayload>> {
        let goal = self.open()?;
        let completes = completes(&items);
        let mut events = vec![EventPayload::GoalChecklistRevised {
            goal_id: goal.goal_id.clone(),
            revision: goal.revision + 1,
            items,
        }];
        if completes {
            events.push(completion(&goal.goal_id, goal.revision + 2));
        }
        Some(events)
    }

    /// The event a user's lifecycle action appends to `goal` (identity and revision are checked by the caller).
    pub fn lifecycle(
        goal: &GoalState,
        action: GoalLifecycleAction,
        selection: Option<RunSelection>,
    ) -> Result<EventPayload, LifecycleRefusal> {
        if is_terminal(goal.status) {
            return Err(LifecycleRefusal::Terminal { status: goal.status });
        }
        if selection.is_some() && action != GoalLifecycleAction::Resume {
            return Err(LifecycleRefusal::SelectionNotAllowed);
        }
        let status = match (action, goal.status) {
            (GoalLifecycleAction::Pause, GoalStatus::Active) => GoalStatus::Paused,
            (GoalLifecycleAction::Resume, GoalStatus::Paused) => GoalStatus::Active,
            (GoalLifecycleAction::Cancel, _) => GoalStatus::Cancelled,
            (_, status) => return Err(LifecycleRefusal::WrongStatus { status }),
        };
        Ok(EventPayload::GoalLifecycleChanged {
            goal_id: goal.goal_id.clone(),
            revision: goal.revision + 1,
            status,
            reason: None,
            selection,
        })
    }

    /// The completion a load must append: the open goal's committed checklist is non-empty and all finished, but
    /// the daemon stopped before the completion that follows it was written.
    pub fn missing_completion(&self) -> Option<EventPayload> {
        let goal = self.open()?;
        completes(&goal.items).then(|| completion(&goal.goal_id, goal.revision + 1))
    }

    /// The pause the engine appends instead of another automatic run once `max_idle_runs` runs in a row made no
    /// checklist progress.
    pub fn idle_pause(&self, max_idle_runs: u32) -> Option<EventPayload> {
        let goal = self.active()?;
        (self.runs_without_progress >= max_idle_runs).then(|| EventPayload::GoalLifecycleChanged {
            goal_id: goal.goal_id.clone(),
            revision: goal.revision + 1,
            status: GoalStatus::Paused,
            reason: Some(format!(
                "{} automatic runs in a row made no checklist progress (`[goals] max_idle_runs` = {max_idle_runs}); \
                 resume the goal to try again",
                self.runs_without_progress
            )),
            selection: None,
        })
    }
}

/// Completed and cancelled goals never change again.
pub fn is_terminal(status: GoalStatus) -> bool {
    matches!(status, GoalStatus::Completed | GoalStatus::Cancelled)
}

/// Whether a checklist completes its goal: non-empty, every item finished.
fn completes(items: &[GoalItem]) -> bool {
    !items.is_empty() && items.iter().all(|item| item.finished)
}

fn completion(goal_id: &str, revision: u64) -> EventPayload {
    EventPayload::GoalLifecycleChanged {
        goal_id: goal_id.to_owned(),
        revision,
        status: GoalStatus::Completed,
        reason: Some(COMPLETION_REASON.to_owned()),
        selection: None,
    }
}

/// The input of an automatic run: the objective and what is still open, and how to report progress.
pub fn reminder(goal: &GoalState) -> String {
    let mut text = format!(
        "[goal {} revision {}] Keep working toward this objective:\n{}\n",
        goal.goal_id, goal.revision, goal.objective
    );
    let open: Vec<&GoalItem> = goal.items.iter().filter(|item| !item.finished).collect();
    if goal.items.is_empty() {
        text.push_str(
            "\nThe checklist is empty. Call `goal_update` with the ordered list of items that reach the objective.",
        );
    } else {
        text.push_str(&format!("\nOpen items ({} of {}):\n", open.len(), goal.items.len()));
        for item in open {
            text.push_str(&format!("- {}\n", item.description));
        }
        text.push_str(
            "\nCall `goal_update` with the whole checklist, marking what you finished; the goal completes when every \
             item is finished.",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::types::common::ModelSelection;

    #[test]
    fn checklists_are_bounded_in_items_description_and_total_bytes() {
        let item = |bytes: usize| GoalItem { description: "d".repeat(bytes), finished: false };
        assert!(check_checklist(&[]).is_ok());
        assert!(check_checklist(&vec![item(10); MAX_CHECKLIST_ITEMS]).is_ok());
        let many = check_checklist(&vec![item(10); MAX_CHECKLIST_ITEMS + 1]).unwrap_err();
        assert!(many.contains("101 items"), "{many}");
        assert!(check_checklist(&[item(MAX_ITEM_DESCRIPTION_BYTES)]).is_ok());
        let long = check_checklist(&[item(1), item(MAX_ITEM_DESCRIPTION_BYTES + 1)]).unwrap_err();
        assert!(long.contains("item 2"), "{long}");
        assert!(check_checklist(&vec![item(1024); 64]).is_ok());
        let total = check_checklist(&vec![item(1024); 65]).unwrap_err();
        assert!(total.contains("together"), "{total}");
    }

    fn event(seq: u64, origin: Option<&str>, payload: EventPayload) -> StoredEvent {
        StoredEvent {
            session_id: "s".into(),
            run_id: None,
            seq,
            timestamp: "2026-01-01T00:00:00Z".into(),
            origin: origin.map(str::to_owned),
            payload,
        }
    }

    fn item(description: &str, finished: bool) -> GoalItem {
        GoalItem { description: description.into(), finished }
    }

    fn activated() -> StoredEvent {
        event(
            2,
            Some("user"),
            EventPayload::GoalActivated { goal_id: "g".into(), objective: "ship".into(), revision: 1, selection: None },
        )
    }

    fn goal_run(seq: u64) -> StoredEvent {
        let selection = RunSelection {
            agent: "default".into(),
            model: ModelSelection { model: "local/echo".into(), variant: None },
            preset: None,
        };
        event(
            seq,
            Some(Origin::GOAL.word().as_ref()),
            EventPayload::RunStarted {
                client_run_id: format!("c{seq}"),
                selection,
                input: "go".into(),
                fallback_index: 0,
                model_chain: Vec::new(),
                reset_fallback: false,
                skill: None,
                requested_model: None,
                attachments: Vec::new(),
            },
        )
    }

    fn apply_all(book: &mut GoalBook, payloads: Vec<EventPayload>, mut seq: u64) -> u64 {
        for payload in payloads {
            book.apply(&event(seq, Some(Origin::GOAL.word().as_ref()), payload));
            seq += 1;
        }
        seq
    }

    #[test]
    fn an_all_finished_checklist_appends_the_list_then_the_completion() {
        let mut book = GoalBook::default();
        book.apply(&activated());
        let partial = book.checklist_update(vec![item("a", true), item("b", false)]).unwrap();
        assert_eq!(partial.len(), 1);
        let seq = apply_all(&mut book, partial, 3);
        assert_eq!(book.current().unwrap().revision, 2);
        assert_eq!(book.current().unwrap().status, GoalStatus::Active);

        let done = book.checklist_update(vec![item("a", true), item("b", true)]).unwrap();
        assert_eq!(done.len(), 2);
        apply_all(&mut book, done, seq);
        let goal = book.current().unwrap();
        assert_eq!((goal.revision, goal.status), (4, GoalStatus::Completed));
        assert!(book.checklist_update(vec![item("c", false)]).is_none(), "a terminal goal takes no update");
    }

    #[test]
    fn an_empty_checklist_keeps_the_lifecycle() {
        let mut book = GoalBook::default();
        book.apply(&activated());
        let events = book.checklist_update(Vec::new()).unwrap();
        assert_eq!(events.len(), 1);
        apply_all(&mut book, events, 3);
        assert_eq!(book.current().unwrap().status, GoalStatus::Active);
        assert_eq!(book.missing_completion(), None);
        assert_eq!(GoalBook::default().checklist_update(Vec::new()), None);
    }

    #[test]
    fn a_committed_all_finished_list_without_its_completion_is_repaired() {
        let mut book = GoalBook::default();
        book.apply(&activated());
        book.apply(&event(
            3,
            None,
            EventPayload::GoalChecklistRevised { goal_id: "g".into(), revision: 2, items: vec![item("a", true)] },
        ));
        let repair = book.missing_completion().unwrap();
        assert_eq!(repair, completion("g", 3));
        book.apply(&event(4, None, repair));
        assert_eq!(book.current().unwrap().status, GoalStatus::Completed);
        assert_eq!(book.missing_completion(), None);
    }

    #[test]
    fn lifecycle_transitions_and_refusals() {
        let mut book = GoalBook::default();
        book.apply(&activated());
        let goal = book.current().unwrap().clone();
        assert_eq!(
            GoalBook::lifecycle(&goal, GoalLifecycleAction::Resume, None),
            Err(LifecycleRefusal::WrongStatus { status: GoalStatus::Active })
        );
        assert_eq!(
            GoalBook::lifecycle(&goal, GoalLifecycleAction::Pause, Some(goal_run_selection())),
            Err(LifecycleRefusal::SelectionNotAllowed)
        );
        let pause = GoalBook::lifecycle(&goal, GoalLifecycleAction::Pause, None).unwrap();
        book.apply(&event(3, Some("user"), pause));
        let paused = book.current().unwrap().clone();
        assert_eq!((paused.status, paused.revision), (GoalStatus::Paused, 2));
        let resume = GoalBook::lifecycle(&paused, GoalLifecycleAction::Resume, Some(goal_run_selection())).unwrap();
        book.apply(&event(4, Some("user"), resume));
        let resumed = book.current().unwrap().clone();
        assert_eq!(resumed.selection, Some(goal_run_selection()));
        let cancel = GoalBook::lifecycle(&resumed, GoalLifecycleAction::Cancel, None).unwrap();
        book.apply(&event(5, Some("user"), cancel));
        let cancelled = book.current().unwrap().clone();
        assert_eq!(
            GoalBook::lifecycle(&cancelled, GoalLifecycleAction::Resume, None),
            Err(LifecycleRefusal::Terminal { status: GoalStatus::Cancelled })
        );
        assert!(book.open().is_none() && book.active().is_none());
    }

    fn goal_run_selection() -> RunSelection {
        match goal_run(1).payload {
            EventPayload::RunStarted { selection, .. } => selection,
            _ => unreachable!(),
        }
    }

    #[test]
    fn automatic_runs_without_progress_are_counted_and_bounded() {
        let mut book = GoalBook::default();
        book.apply(&activated());
        book.apply(&goal_run(3));
        book.apply(&goal_run(4));
        assert_eq!(book.runs_without_progress(), 2);
        assert_eq!(book.idle_pause(3), None);
        // A user's run does not count.
        let mut user_run = goal_run(5);
        user_run.origin = Some("user".into());
        book.apply(&user_run);
        book.apply(&goal_run(6));
        let pause = book.idle_pause(3).unwrap();
        assert!(matches!(
            &pause,
            EventPayload::GoalLifecycleChanged { status: GoalStatus::Paused, reason: Some(_), .. }
        ));
        // Progress resets the count; an unchanged list is not progress.
        let same = book.checklist_update(Vec::new()).unwrap();
        let seq = apply_all(&mut book, same, 7);
        assert_eq!(book.runs_without_progress(), 3);
        let progress = book.checklist_update(vec![item("a", false)]).unwrap();
        apply_all(&mut book, progress, seq);
        assert_eq!(book.runs_without_progress(), 0);
    }

    #[test]
    fn the_reminder_names_the_objective_and_open_items() {
        let mut goal = GoalState {
            goal_id: "g".into(),
            objective: "ship it".into(),
            status: GoalStatus::Active,
            items: vec![item("tests", true), item("docs", false)],
            revision: 3,
            selection: None,
            blocked: None,
        };
        let text = reminder(&goal);
        assert!(text.contains("ship it") && text.contains("- docs") && !text.contains("- tests"), "{text}");
        goal.items.clear();
        assert!(reminder(&goal).contains("checklist is empty"));
    }
}
