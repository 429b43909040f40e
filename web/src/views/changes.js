// The open session's changes (troupe's `session.diff` and `session.undo`): each run that changed files, newest
// first, with the files it changed as unified diffs (what `write_file` and `edit_file` recorded, and in a git
// repository what its shell commands changed), and "Undo this run". An undo the daemon refuses because files
// changed since the run (`undo_conflict`) lists them and offers "Undo anyway" (`force`), which restores the changed
// ones and leaves the unrecorded ones; a `refused` path is never overridden, so with only those it is not offered.
import { renderFileDiff } from '../diff.js';
import { fill, h, shortId } from '../dom.js';

/** How many runs are shown at first, and how many more each "Show older runs" adds (one `session.diff` each). */
export const RUNS_PER_PAGE = 10;

/** An undone file's `action` in words (UndoAction). */
const ACTIONS = {
  restored: 'restored',
  removed: 'removed (the run created it)',
  unchanged: 'unchanged (it was as before the run already)',
  left: 'left as it is (its content before the run was not recorded)',
};

/** Why `session.undo` refused a file (UndoConflictReason). */
const REASONS = {
  changed_since: 'changed since the run',
  not_recorded: 'its content before the run was not recorded',
  refused: 'the path cannot be used now (outside the folder, a symbolic link, denied or unreadable)',
};

/** `+A -R` over a run's files. */
function totals(files) {
  let added = 0;
  let removed = 0;
  for (const file of files) {
    added += file.lines_added ?? 0;
    removed += file.lines_removed ?? 0;
  }
  return { added, removed };
}

/** Whether a forced undo could do anything for these refusals (`force` never overrides `refused`). */
export function forceCanHelp(conflicts) {
  return (conflicts ?? []).some((file) => file.reason !== 'refused');
}

/** `actions.call(method, params)` → Promise (the connection's call); `actions.close()` goes back to the transcript. */
export function createChanges(actions) {
  const heading = h('h2', { tabindex: '-1', id: 'changes-heading' }, 'Changes');
  const refreshButton = h('button', { type: 'button', class: 'secondary small', 'data-testid': 'changes-refresh', onclick: () => load() }, 'Refresh');
  const closeButton = h('button', { type: 'button', class: 'secondary small', 'data-testid': 'changes-close', onclick: () => actions.close() }, 'Back to transcript');
  const status = h('p', { class: 'dim changes-status', role: 'status', 'aria-live': 'polite', 'data-testid': 'changes-status' });
  const list = h('ol', { class: 'change-runs', 'aria-labelledby': 'changes-heading' });
  const more = h('button', { type: 'button', class: 'secondary small', 'data-testid': 'changes-more', hidden: true, onclick: () => showMore() });
  const el = h('section', { class: 'changes', id: 'changes-view', 'data-testid': 'changes', 'aria-labelledby': 'changes-heading', hidden: true }, h('div', { class: 'changes-head' }, heading, refreshButton, closeButton), status, list, more);

  let sessionId = null;
  /** The runs of `session.diff`, newest first. */
  let runs = [];
  /** Each shown run's `session.diff` answer, by run id. */
  const details = new Map();
  /** What the last undo of a run said (its answer or its refusal), by run id: kept across reloads. */
  const outcomes = new Map();
  let shown = RUNS_PER_PAGE;
  /** Bumped by each load; an older one that answers late changes nothing. */
  let loading = 0;
  /** Something changed while the view was closed: it loads again when opened. */
  let stale = true;
  el.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      event.stopPropagation();
      actions.close();
    }
  });

  async function load({ focusRun } = {}) {
    if (!sessionId) return;
    const token = ++loading;
    const forSession = sessionId;
    stale = false;
    fill(status, 'Loading…');
    try {
      const all = await actions.call('session.diff', { session_id: forSession });
      if (token !== loading) return;
      runs = [...(all.runs ?? [])].reverse();
      details.clear();
      const wanted = runs.slice(0, shown);
      const answers = await Promise.all(wanted.map((run) => (run.run_id === all.run_id ? all : actions.call('session.diff', { session_id: forSession, run_id: run.run_id }))));
      if (token !== loading) return;
      wanted.forEach((run, index) => details.set(run.run_id, answers[index]));
      draw();
      fill(status, runs.length ? '' : 'No run of this session changed files yet.');
      if (focusRun) list.querySelector(`[data-run-id="${focusRun}"] [data-testid="undo-outcome"]`)?.focus();
    } catch (error) {
      if (token !== loading) return;
      fill(status, `Could not read the changes: ${error.message}`);
    }
  }

  function showMore() {
    shown += RUNS_PER_PAGE;
    load();
  }

  async function undo(runId, force) {
    const article = list.querySelector(`[data-run-id="${runId}"]`);
    for (const button of article?.querySelectorAll('button') ?? []) button.disabled = true;
    const outcome = article?.querySelector('[data-testid="undo-outcome"]');
    if (outcome) fill(outcome, force ? 'Undoing anyway…' : 'Undoing…');
    try {
      const result = await actions.call('session.undo', { session_id: sessionId, run_id: runId, ...(force ? { force: true } : {}) });
      outcomes.set(runId, { done: result });
    } catch (error) {
      if (error.typed === 'undo_conflict') outcomes.set(runId, { conflicts: error.data?.files ?? [], message: error.message });
      else outcomes.set(runId, { failed: error.message });
    }
    await load({ focusRun: runId });
  }

  function outcomeView(runId) {
    const outcome = outcomes.get(runId);
    const box = h('div', { class: 'undo-outcome', 'data-testid': 'undo-outcome', tabindex: '-1', role: 'status' });
    if (!outcome) return box;
    if (outcome.done) {
      box.classList.add('done');
      return fill(
        box,
        h('p', null, `Undone: ${outcome.done.files.length} file${outcome.done.files.length === 1 ? '' : 's'} put back as before the run.`),
        h('ul', { class: 'undo-files' }, outcome.done.files.map((file) => h('li', { 'data-testid': 'undone-file' }, h('code', null, file.path), ` ${ACTIONS[file.action] ?? file.action}`))),
      );
    }
    if (outcome.conflicts) {
      box.classList.add('conflict');
      return fill(
        box,
        h('p', null, 'Not undone: nothing was changed. These files are not as the run left them:'),
        h('ul', { class: 'undo-files' }, outcome.conflicts.map((file) => h('li', { 'data-testid': 'conflict-file' }, h('code', null, file.path), ` ${REASONS[file.reason] ?? file.reason}`))),
        forceCanHelp(outcome.conflicts)
          ? h(
              'p',
              null,
              h('button', { type: 'button', class: 'danger small', 'data-testid': 'undo-force', onclick: () => undo(runId, true) }, 'Undo anyway'),
              h('span', { class: 'dim' }, ' restores the changed files (their later changes are lost) and leaves the unrecorded ones'),
            )
          : null,
      );
    }
    box.classList.add('conflict');
    return fill(box, h('p', null, `Not undone: ${outcome.failed}`));
  }

  function runView(run) {
    const answer = details.get(run.run_id);
    const files = answer?.files ?? [];
    const shell = answer?.shell ?? null;
    const { added, removed } = totals([...files, ...(shell?.files ?? [])]);
    const undone = answer?.undone ?? run.undone;
    const title = `Run ${shortId(run.run_id)}`;
    const headingId = `change-run-${run.run_id}`;
    return h(
      'li',
      null,
      h(
        'article',
        { class: 'change-run', 'data-testid': 'change-run', 'data-run-id': run.run_id, 'aria-labelledby': headingId },
        h(
          'h3',
          { id: headingId, title: run.run_id },
          title,
          ' ',
          h('span', { class: 'diff-add' }, `+${added}`),
          ' ',
          h('span', { class: 'diff-del' }, `-${removed}`),
          h('span', { class: 'dim' }, ` · ${files.length} file${files.length === 1 ? '' : 's'}${shell ? ' and shell changes' : ''}`),
          undone ? h('span', { class: 'badge', 'data-testid': 'run-undone' }, 'undone') : null,
        ),
        files.map((file) => renderFileDiff(file)),
        shell ? shellView(shell) : null,
        files.length && !undone
          ? h('div', { class: 'change-actions' }, h('button', { type: 'button', class: 'secondary', 'data-testid': 'undo-run', 'aria-label': `Undo ${title}`, onclick: () => undo(run.run_id, false) }, 'Undo this run'))
          : null,
        !files.length && shell ? h('p', { class: 'dim' }, 'Undo cannot take back what shell commands changed.') : null,
        outcomeView(run.run_id),
      ),
    );
  }

  function shellView(shell) {
    return h(
      'div',
      { class: 'shell-changes', 'data-testid': 'shell-changes' },
      h('p', { class: 'dim' }, 'What its shell commands changed in the git repository ', h('code', null, shell.repository), ':'),
      (shell.files ?? []).map((file) => renderFileDiff(file)),
      shell.more_files ? h('p', { class: 'dim' }, `… and ${shell.more_files} more file${shell.more_files === 1 ? '' : 's'}`) : null,
      shell.left_out?.length ? h('p', { class: 'dim' }, `Not compared (over 1 MiB): ${shell.left_out.join(', ')}`) : null,
      shell.note ? h('p', { class: 'dim' }, shell.note) : null,
    );
  }

  function draw() {
    fill(list, runs.slice(0, shown).map(runView));
    const older = runs.length - Math.min(shown, runs.length);
    more.hidden = older <= 0;
    fill(more, `Show older runs (${older} more)`);
  }

  /** Shows the view for `id` (a session id), loading it when it is another session's or something changed. */
  function open(id) {
    if (id !== sessionId) {
      sessionId = id;
      runs = [];
      details.clear();
      outcomes.clear();
      shown = RUNS_PER_PAGE;
      fill(list);
      stale = true;
    }
    el.hidden = false;
    if (stale) load();
    heading.focus();
  }

  function hide() {
    el.hidden = true;
  }

  /** The session's files may have changed (a run ended, an undo from another client): reload, now or when shown. */
  function changed() {
    if (el.hidden) stale = true;
    else load();
  }

  return { el, open, hide, changed, isOpen: () => !el.hidden };
}
