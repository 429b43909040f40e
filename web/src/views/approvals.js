// Pending approvals of the open tree, one card each. A card goes away when any client answers (the resolution
// event, or the next approval.list), in every open browser.
//
// What a card shows is what runs: the summary and the aria-label are one line with controls shown and further lines
// marked (visibleLine), and the resource (the whole command) is shown line by line with every control and invisible
// character as an escape (showVisibly), cut at APPROVAL_LIMITS with a "Show whole command" toggle.
import { renderFileDiff } from '../diff.js';
import { fill, h, shortId } from '../dom.js';
import { APPROVAL_LIMITS, WHOLE, describeLeftOut, showVisibly, visibleLine } from '../shown.js';

/** How long a new approval card ignores clicks. */
const ARMING_MS = 600;

const RISK = {
  execute: 'Runs a command or program on this machine.',
  write: 'Changes or creates files.',
  read: 'Reads files or data.',
  network: 'Reaches the network.',
  delete: 'Deletes files.',
};

/** What a tree grant of `op` allows: the one resource the approval names, in words for its action. */
export function grantScope(op) {
  if (op.action === 'execute') return op.tool === 'shell' || !op.tool ? 'this command' : 'this call';
  if (op.action === 'network') return 'this host';
  if (op.action === 'read' || op.action === 'write' || op.action === 'delete') return 'this file';
  return 'this operation';
}

/**
 * The resource as a `pre` of its shown lines; when the limits cut it, a line saying how much is left and a button
 * that shows it whole.
 */
function resourceView(resource) {
  const code = h('pre', { class: 'resource', 'data-testid': 'approval-command' });
  const notice = h('p', { class: 'dim command-cut', 'data-testid': 'approval-command-cut' });
  const show = (limits) => {
    const shown = showVisibly(resource, limits);
    fill(code, shown.lines.join('\n'));
    if (!shown.leftOut) return notice.remove();
    fill(
      notice,
      `… ${describeLeftOut(shown.leftOut)} `,
      h('button', { type: 'button', class: 'link', 'data-testid': 'show-whole-command', onclick: () => show(WHOLE) }, 'Show whole command'),
    );
  };
  const view = h('div', null, code, notice);
  show(APPROVAL_LIMITS);
  return view;
}

/** `actions.respond(record, decision, feedback)` → Promise; `actions.focusPrompt()`. */
export function createApprovals(actions) {
  const el = h('section', { class: 'approvals', 'aria-label': 'Pending approvals', 'aria-live': 'polite' });
  /** Card elements by approval id, in the order shown. */
  const cards = new Map();
  /** When each card's buttons wake up (a promise), by approval id. */
  const armedAt = new Map();

  /**
   * After an answer, keyboard focus goes on to the next card's first enabled button once it arms (a click or a
   * key press meant for the answered card must not land on it), or to the prompt when no card is left. Focus that
   * the user moved elsewhere meanwhile stays where it is.
   */
  async function focusNext(answeredId, answered) {
    const ours = () => !document.activeElement || document.activeElement === document.body || answered.contains(document.activeElement) || !document.activeElement.isConnected;
    if (!ours()) return;
    const nextId = [...cards.keys()].find((id) => id !== answeredId);
    if (!nextId) {
      actions.focusPrompt();
      return;
    }
    await armedAt.get(nextId);
    const next = cards.get(nextId);
    if (!next?.isConnected || !ours()) return;
    const button = [...next.querySelectorAll('.approval-actions button')].find((b) => !b.disabled);
    if (button) button.focus();
    else actions.focusPrompt();
  }

  function card(record, sessionId) {
    const op = record.operation ?? {};
    const c = record.constraints ?? {};
    const feedbackId = `feedback-${record.approval_id}`;
    const feedback = h('input', { type: 'text', id: feedbackId, 'data-testid': 'reject-feedback', placeholder: 'Why not? (the model sees this)', autocomplete: 'off' });
    const status = h('p', { class: 'form-status', role: 'status' });
    const buttons = [];
    const answer = async (decision) => {
      for (const button of buttons) button.disabled = true;
      status.textContent = 'Sending…';
      try {
        await actions.respond(record, decision, decision === 'reject' ? feedback.value.trim() : '');
        status.textContent = '';
        focusNext(record.approval_id, view);
      } catch (error) {
        status.textContent = error.message;
        for (const button of buttons) button.disabled = button.dataset.allowed !== 'true';
      }
    };
    // A new card's buttons wake up after ARMING_MS: the click meant for the card just answered (a double click, a
    // second tap) must not land on the next one, which appears in the same place before anyone could read it.
    const button = (testid, label, decision, allowed, cls) => {
      const b = h('button', { type: 'button', class: cls, 'data-testid': testid, 'data-allowed': String(allowed), disabled: true, onclick: () => answer(decision) }, label);
      buttons.push(b);
      return b;
    };
    let armed = false;
    armedAt.set(
      record.approval_id,
      new Promise((resolve) => {
        setTimeout(() => {
          armed = true;
          view.classList.remove('arming');
          for (const b of buttons) b.disabled = b.dataset.allowed !== 'true';
          resolve();
        }, ARMING_MS);
      }),
    );
    feedback.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && armed) {
        event.preventDefault();
        answer('reject');
      }
    });
    const view = h(
      'article',
      { class: 'approval-card arming', 'data-testid': 'approval-card', 'data-approval-id': record.approval_id, 'aria-label': `Approval: ${visibleLine(op.summary ?? op.tool)}` },
      h('h3', null, `${visibleLine(op.tool, 40)} wants to ${op.action}`, op.summary && !op.summary.includes(op.resource ?? '') ? h('span', { class: 'dim', 'data-testid': 'approval-summary' }, ` — ${visibleLine(op.summary)}`) : null),
      h(
        'dl',
        { class: 'facts' },
        h('dt', null, 'Operation'),
        h('dd', null, `${visibleLine(op.tool, 40)} · ${op.action}`),
        h('dt', null, 'Resource'),
        h('dd', null, resourceView(op.resource ?? '')),
        h('dt', null, 'Risk'),
        h('dd', null, RISK[op.action] ?? `Action "${op.action}" needs your approval.`),
        record.session_id !== sessionId ? [h('dt', null, 'Session'), h('dd', null, `delegated ${shortId(record.session_id)}`)] : null,
        c.expires_at ? [h('dt', null, 'Expires'), h('dd', null, new Date(c.expires_at).toLocaleString())] : null,
      ),
      op.diff ? renderFileDiff(op.diff) : null,
      h(
        'div',
        { class: 'approval-actions' },
        button('approve-once', 'Approve once', 'approve_once', c.allow_once !== false, 'primary'),
        // A tree grant allows this one operation (this command, this file) from then on in every session of the
        // tree, not every command: the button says so where it is read.
        button('approve-tree', ['Allow for the tree', h('small', { class: 'button-hint' }, `${grantScope(op)}, in every session of this tree`)], 'approve_tree', c.allow_tree_grant !== false, 'tree-grant'),
        h('span', { class: 'reject-group' }, h('label', { for: feedbackId, class: 'visually-hidden' }, 'Feedback with the rejection'), feedback, button('reject', 'Reject', 'reject', true, 'danger')),
      ),
      status,
    );
    return view;
  }

  /** `approvals`: pending records, oldest first. */
  function render(approvals, sessionId) {
    const ids = new Set(approvals.map((a) => a.approval_id));
    for (const [id, view] of cards) {
      if (!ids.has(id)) {
        view.remove();
        cards.delete(id);
        armedAt.delete(id);
      }
    }
    for (const record of approvals) {
      if (!cards.has(record.approval_id)) {
        const view = card(record, sessionId);
        cards.set(record.approval_id, view);
        el.appendChild(view);
      }
    }
    el.hidden = approvals.length === 0;
  }

  function clear() {
    cards.clear();
    armedAt.clear();
    fill(el);
    el.hidden = true;
  }

  return { el, render, clear };
}
