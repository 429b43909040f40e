// The session list (root sessions, most recent first, filtered by cwd) with the open tree's delegated children
// nested under their parent, and the "new session" form.
import { age, fill, h, shortId } from '../dom.js';
import { shortDir } from '../paths.js';

/** How often the rows' "… ago" times are brought up to date. */
const AGE_TICK_MS = 5_000;

/** `actions`: `open(sessionId)`, `create(cwd)` → Promise, `filter(text)`. */
export function createSessionList(actions) {
  const cwdInput = h('input', { type: 'text', id: 'new-session-cwd', 'data-testid': 'new-session-cwd', placeholder: 'blank: the daemon’s directory', 'aria-describedby': 'new-session-cwd-hint', autocomplete: 'off', spellcheck: 'false' });
  const createStatus = h('p', { class: 'form-status', role: 'status', 'aria-live': 'polite' });
  const createButton = h('button', { type: 'submit', 'data-testid': 'new-session' }, 'New session');
  const createForm = h(
    'form',
    { class: 'new-session', 'aria-label': 'New session' },
    h('label', { for: 'new-session-cwd' }, 'Working directory'),
    cwdInput,
    createButton,
    h('p', { class: 'form-hint dim', id: 'new-session-cwd-hint' }, 'Left blank, the session works in the directory the daemon was started in.'),
    createStatus,
  );
  let creating = false;
  /** A refusal ("no such directory") is about what was typed: it goes once the field changes or a session opens. */
  function clearCreateError() {
    if (!creating) createStatus.textContent = '';
  }
  cwdInput.addEventListener('input', clearCreateError);
  createForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    createButton.disabled = true;
    creating = true;
    createStatus.textContent = 'Creating…';
    try {
      await actions.create(cwdInput.value.trim() || null);
      cwdInput.value = '';
      createStatus.textContent = '';
    } catch (error) {
      createStatus.textContent = error.message;
    } finally {
      creating = false;
      createButton.disabled = false;
    }
  });

  const filterInput = h('input', { type: 'search', id: 'cwd-filter', 'data-testid': 'cwd-filter', placeholder: 'Filter by directory', autocomplete: 'off', spellcheck: 'false' });
  filterInput.addEventListener('input', () => actions.filter(filterInput.value));
  filterInput.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && filterInput.value) {
      filterInput.value = '';
      actions.filter('');
    }
  });
  const list = h('ul', { class: 'session-list', 'data-testid': 'session-list', 'aria-label': 'Sessions' });
  const note = h('p', { class: 'list-note dim' });

  const el = h(
    'nav',
    { class: 'sessions', 'aria-label': 'Sessions' },
    createForm,
    h('div', { class: 'filter' }, h('label', { for: 'cwd-filter' }, 'Filter'), filterInput),
    list,
    note,
  );

  function row(meta, testid, selectedId, depth, awaiting) {
    const title = meta.title || 'Untitled session';
    const selected = meta.session_id === selectedId;
    const status = awaiting.includes(meta.session_id) ? 'awaiting approval' : meta.status;
    return h(
      'button',
      {
        type: 'button',
        class: `session-row${selected ? ' selected' : ''}`,
        'data-testid': testid,
        'data-session-id': meta.session_id,
        'aria-current': selected ? 'true' : false,
        title: meta.session_id,
        onclick: () => actions.open(meta.session_id),
      },
      h('span', { class: 'row-title' }, depth > 0 ? h('span', { class: 'dim', 'aria-hidden': 'true' }, '↳ ') : null, title),
      h('span', { class: 'row-meta' }, h('span', { class: `dot status-${status.replace(' ', '-')}`, 'aria-hidden': 'true' }), h('span', { class: 'visually-hidden' }, 'status '), status, ' · ', h('span', { class: 'row-age', 'data-time': meta.last_activity_at }, age(meta.last_activity_at)), depth === 0 ? [' · ', h('span', { class: 'row-dir', title: meta.cwd }, shortDir(meta.cwd))] : ` · ${meta.creation_selection?.agent ?? ''} ${shortId(meta.session_id)}`),
    );
  }

  function children(node, selectedId, depth, awaiting) {
    if (!node?.children?.length) return null;
    return h(
      'ul',
      { class: 'session-children', 'aria-label': 'Delegated sessions' },
      node.children.map((child) => h('li', null, row(child.session, 'session-child', selectedId, depth, awaiting), children(child, selectedId, depth + 1, awaiting))),
    );
  }

  let shownKey = null;

  /**
   * `sessions`: root metas in the daemon's order; `tree`: the open tree (session.tree's), or null; `awaiting`: ids
   * of sessions shown as awaiting an approval (the open one and its root, while its tree has one pending).
   */
  function render({ sessions, filter, selectedId, tree, loaded, awaiting = [] }) {
    const needle = filter.trim().toLowerCase();
    const shown = needle ? sessions.filter((s) => (s.cwd ?? '').toLowerCase().includes(needle)) : sessions;
    // Redrawn only when something shown changed (the list is polled), keeping keyboard focus on its row.
    const key = JSON.stringify([shown, selectedId, tree, loaded, awaiting]);
    if (key === shownKey) return;
    shownKey = key;
    const focused = list.contains(document.activeElement) ? document.activeElement.getAttribute('data-session-id') : null;
    fill(
      list,
      shown.map((meta) => h('li', null, row(meta, 'session-item', selectedId, 0, awaiting), tree && tree.session.session_id === meta.session_id ? children(tree, selectedId, 1, awaiting) : null)),
    );
    if (focused) list.querySelector(`[data-session-id="${CSS.escape(focused)}"]`)?.focus();
    note.textContent = !loaded ? 'Loading sessions…' : shown.length === 0 ? (needle ? 'No session in a matching directory.' : 'No sessions yet.') : '';
  }

  // The "… ago" times tick on their own, every AGE_TICK_MS: only the texts that changed are rewritten (the rows,
  // and the keyboard focus on them, stay).
  setInterval(() => {
    if (document.hidden) return;
    const now = Date.now();
    for (const span of list.querySelectorAll('.row-age')) {
      const text = age(span.dataset.time, now);
      if (span.textContent !== text) span.textContent = text;
    }
  }, AGE_TICK_MS);

  /** Focus into the list: the open session's row, else the first row, else the new-session field. */
  function focusList() {
    const row = list.querySelector('.session-row.selected') ?? list.querySelector('.session-row');
    (row ?? cwdInput).focus();
  }

  return { el, render, focusList, clearCreateError, focusFilter: () => filterInput.focus() };
}
