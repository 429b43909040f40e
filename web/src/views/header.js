// The open session's header: title (rename in place), status, cwd, the tree's permission mode, who else is
// attached (presence), the goal if the session has one, and the session's token usage.
import { fill, h, shortId } from '../dom.js';
import { samePick, selectionLabel } from '../selection.js';
import { formatCount } from './transcript.js';

/** The protocol's permission modes (PermissionMode), with what each means. */
export const MODES = [
  ['auto_approve', 'auto approve (classifier asks for risky operations)'],
  ['auto_approve_n', 'auto approve, reject escalations'],
  ['auto_approve_y', 'auto approve, approve escalations'],
  ['ask', 'ask for everything'],
  ['yolo', 'yolo (approve all asks)'],
];

/** `actions`: `rename(title)` → Promise, `setMode(mode)` → Promise, `openParent(id)`, `toggleChanges()`. */
export function createHeader(actions) {
  const title = h('h1', { class: 'session-title', 'data-testid': 'session-title', tabindex: '-1' });
  const renameButton = h('button', { type: 'button', class: 'secondary small', 'data-testid': 'rename-button' }, 'Rename');
  const renameInput = h('input', { type: 'text', id: 'rename-input', 'data-testid': 'rename-input', maxlength: '512', autocomplete: 'off' });
  const renameForm = h('form', { class: 'rename', hidden: true }, h('label', { for: 'rename-input', class: 'visually-hidden' }, 'New title'), renameInput, h('button', { type: 'submit', class: 'small' }, 'Save'), h('button', { type: 'button', class: 'secondary small', onclick: () => closeRename() }, 'Cancel'));
  // On a phone the session's details (its facts in full, the permission mode, who is here) fold behind this
  // button, so the transcript keeps most of the screen; wider screens show them always and never show it.
  const moreButton = h('button', { type: 'button', class: 'secondary small header-more', 'data-testid': 'header-more', 'aria-expanded': 'false', 'aria-controls': 'session-details' }, 'Details');
  // The session's file changes (views/changes.js) in place of the transcript, and back.
  const changesButton = h('button', { type: 'button', class: 'secondary small', 'data-testid': 'changes-toggle', 'aria-pressed': 'false', 'aria-controls': 'changes-view', onclick: () => actions.toggleChanges() }, 'Changes');
  const titleRow = h('div', { class: 'title-row' }, title, renameButton, renameForm, changesButton, moreButton);
  const facts = h('p', { class: 'session-facts dim' });
  const modeSelect = h('select', { id: 'mode-select', 'data-testid': 'mode-select' }, MODES.map(([value, label]) => h('option', { value }, label)));
  const modeStatus = h('span', { class: 'form-status', role: 'status', 'aria-live': 'polite' });
  const modeBox = h('div', { class: 'mode' }, h('label', { for: 'mode-select' }, 'Permission mode'), modeSelect, modeStatus);
  const presenceList = h('ul', { class: 'presence', 'data-testid': 'presence', 'aria-label': 'Attached clients' });
  const presenceBox = h('div', { class: 'presence-box', hidden: true }, h('span', { class: 'dim' }, 'Here: '), presenceList);
  const goalBox = h('div', { class: 'goal', hidden: true });
  const details = h('div', { class: 'header-row', id: 'session-details' }, modeBox, presenceBox);
  const el = h('section', { class: 'session-header', 'aria-label': 'Session' }, titleRow, facts, details, goalBox);
  moreButton.addEventListener('click', () => {
    const expanded = el.classList.toggle('expanded');
    moreButton.setAttribute('aria-expanded', String(expanded));
    moreButton.textContent = expanded ? 'Less' : 'Details';
  });
  let current = null;

  function openRename() {
    renameInput.value = current?.title ?? '';
    renameForm.hidden = false;
    renameButton.hidden = true;
    title.hidden = true;
    renameInput.focus();
    renameInput.select();
  }

  function closeRename() {
    renameForm.hidden = true;
    renameButton.hidden = false;
    title.hidden = false;
    renameButton.focus();
  }

  renameButton.addEventListener('click', openRename);
  renameInput.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      event.preventDefault();
      closeRename();
    }
  });
  renameForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = renameInput.value.trim();
    renameInput.disabled = true;
    try {
      await actions.rename(text);
      closeRename();
    } catch (error) {
      modeStatus.textContent = `Rename failed: ${error.message}`;
    } finally {
      renameInput.disabled = false;
    }
  });
  modeSelect.addEventListener('change', async () => {
    const mode = modeSelect.value;
    modeStatus.textContent = 'Saving…';
    try {
      await actions.setMode(mode);
      modeStatus.textContent = '';
    } catch (error) {
      modeStatus.textContent = error.message;
    }
  });

  /**
   * `view`: {state (store), meta, mode, awaiting (the open tree has a pending approval), presence (null: not offered), goal, selection (the session's own agent and
   * model: its last run's, else its creation selection), picked (the user's pick for this session, or null),
   * changesOpen (the Changes view is shown)}.
   */
  let shownKey = null;

  function render(view) {
    current = { title: view.state?.title ?? view.meta?.title ?? null };
    el.hidden = !view.meta;
    if (!view.meta) return;
    changesButton.setAttribute('aria-pressed', String(Boolean(view.changesOpen)));
    const key = JSON.stringify([view.meta, current.title, Boolean(view.state?.activeRun), view.state?.lastRunStatus, view.state?.usage, view.mode, view.presence, view.goal, view.selection, view.picked, view.awaiting]);
    if (key === shownKey) return;
    shownKey = key;
    document.title = `${current.title || 'Untitled session'} · troupe`;
    const meta = view.meta;
    fill(title, current.title || 'Untitled session');
    const status = view.awaiting ? 'awaiting approval' : view.state?.activeRun ? 'running' : view.state?.lastRunStatus ?? meta.status;
    const usage = view.state?.usage;
    const origin = meta.origin?.type === 'delegated' ? meta.origin : null;
    const next = view.picked && !samePick(view.picked, view.selection) ? view.picked : null;
    fill(
      facts,
      h('span', { class: `dot status-${status.replace(' ', '-')}`, 'aria-hidden': 'true' }),
      ` ${status} · `,
      h('code', null, meta.cwd || '?'),
      ' · ',
      h('span', { class: 'session-selection', title: 'The agent and model of this session (its last run, else how it was created)' }, selectionLabel(view.selection) || 'no agent'),
      next ? h('span', { class: 'next-selection', title: 'Picked in the Agent and Model pickers above, for this session only' }, ` → next run: ${selectionLabel(next)}`) : null,
      ' · ',
      h('span', { title: meta.session_id }, shortId(meta.session_id)),
      usage && (usage.input || usage.output) ? ` · ${formatCount(usage.input)} in / ${formatCount(usage.output)} out tokens${usage.costKnown ? ` · $${usage.cost.toFixed(2)}` : ''}` : null,
      origin ? [' · ', h('button', { type: 'button', class: 'link', onclick: () => actions.openParent(origin.parent_session_id) }, `delegated from ${shortId(origin.parent_session_id)}`)] : null,
    );
    if (view.mode && document.activeElement !== modeSelect) modeSelect.value = view.mode;
    modeSelect.disabled = !view.mode;
    presenceBox.hidden = view.presence === null;
    if (view.presence) {
      fill(
        presenceList,
        view.presence.map((client) =>
          h('li', { class: 'presence-client', 'data-testid': 'presence-client', title: `connection ${client.connection_id} since ${client.since}` }, client.name || 'client', client.version ? h('span', { class: 'dim' }, ` ${client.version}`) : null, client.you ? h('span', { class: 'dim' }, ' (you)') : null),
        ),
      );
    }
    const goal = view.goal;
    goalBox.hidden = !goal;
    if (goal) {
      const done = goal.items.filter((item) => item.finished).length;
      fill(
        goalBox,
        h('details', null, h('summary', null, h('span', { class: 'who' }, 'Goal'), ' ', h('span', { class: `badge goal-${goal.status}` }, goal.status), ` ${goal.objective} `, goal.items.length ? h('span', { class: 'dim' }, `(${done}/${goal.items.length})`) : null, goal.blocked ? h('span', { class: 'badge goal-blocked', 'data-testid': 'goal-blocked', title: goal.blocked.detail }, 'waiting') : null), goal.blocked ? h('p', { class: 'goal-blocked-detail' }, `Automatic runs wait: ${goal.blocked.detail}`) : null, h('ul', { class: 'checklist' }, goal.items.map((item) => h('li', { class: item.finished ? 'done' : '' }, h('span', { 'aria-hidden': 'true' }, item.finished ? '☑ ' : '☐ '), h('span', { class: 'visually-hidden' }, item.finished ? 'done: ' : 'open: '), item.description)))),
      );
    }
  }

  return { el, render, focusTitle: () => title.focus(), focusChanges: () => changesButton.focus() };
}
