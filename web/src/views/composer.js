// The composer: the prompt with its attached files, and send / recall / cancel.
// Send starts a run when none is active and steers the active one; Ctrl/Cmd+Enter sends. Images and PDFs are
// attached with the attach button, by pasting, or by dropping them on the composer (`attachments.js`).
import { h } from '../dom.js';
import { ACCEPTED_TYPES, createPendingAttachments } from './attachments.js';
import { createPathCompletion } from './path_complete.js';

/**
 * `actions`: `send(text, attachments)` → Promise, `recall()` → Promise<text|null>, `cancel()` → Promise,
 * `listFiles(dir)` and `readFile(path)` (the session folder, for `@path`).
 */
export function createComposer(actions) {
  const prompt = h('textarea', { id: 'prompt-input', 'data-testid': 'prompt-input', rows: '3', placeholder: 'Ask, or steer the running agent…  (Ctrl+Enter sends; @ completes a path; paste or drop images and PDFs)', spellcheck: 'true' });
  const files = createPendingAttachments((text) => showError(text));
  const picker = h('input', { type: 'file', multiple: true, accept: ACCEPTED_TYPES.join(','), class: 'visually-hidden', 'data-testid': 'attach-input', tabindex: '-1', 'aria-hidden': 'true', 'aria-label': 'Files to attach' });
  const completion = createPathCompletion(prompt, {
    listFiles: actions.listFiles,
    readFile: actions.readFile,
    attach: (attachment) => files.addEncoded(attachment),
    onError: (text) => showError(text),
  });
  const attach = h('button', { type: 'button', class: 'secondary', 'data-testid': 'attach', title: 'Attach images or PDFs' }, 'Attach');
  const send = h('button', { type: 'submit', class: 'primary', 'data-testid': 'send' }, 'Send');
  const recall = h('button', { type: 'button', class: 'secondary', 'data-testid': 'recall', disabled: true, title: 'Take back the newest queued steer' }, 'Recall');
  const cancel = h('button', { type: 'button', class: 'danger', 'data-testid': 'cancel', disabled: true, title: 'Stop the run and its commands' }, 'Cancel');
  const status = h('p', { class: 'composer-status', role: 'status', 'aria-live': 'polite' });
  const form = h(
    'form',
    { class: 'composer', 'aria-label': 'Prompt' },
    h('label', { for: 'prompt-input', class: 'visually-hidden' }, 'Prompt'),
    files.el,
    completion.el,
    prompt,
    picker,
    h('div', { class: 'composer-actions' }, status, attach, recall, cancel, send),
  );
  attach.addEventListener('click', () => picker.click());
  picker.addEventListener('change', async () => {
    await files.add([...picker.files]);
    picker.value = '';
  });
  prompt.addEventListener('paste', (event) => {
    const pasted = [...(event.clipboardData?.files ?? [])];
    if (pasted.length === 0) return;
    // Pasted files are attached; pasted text goes into the prompt as usual.
    event.preventDefault();
    files.add(pasted);
  });
  form.addEventListener('dragover', (event) => {
    if (![...(event.dataTransfer?.types ?? [])].includes('Files')) return;
    event.preventDefault();
    form.classList.add('dropping');
  });
  form.addEventListener('dragleave', () => form.classList.remove('dropping'));
  form.addEventListener('drop', (event) => {
    form.classList.remove('dropping');
    const dropped = [...(event.dataTransfer?.files ?? [])];
    if (dropped.length === 0) return;
    event.preventDefault();
    files.add(dropped);
  });
  let view = { active: false, canRecall: false, open: false };
  let busy = false;
  // A failed act's message stays up for a while instead of being replaced by the next status line.
  let errorText = '';
  let errorTimer = null;
  function showError(text) {
    errorText = text;
    status.textContent = text;
    clearTimeout(errorTimer);
    errorTimer = setTimeout(() => {
      errorText = '';
      status.textContent = view.statusText ?? '';
    }, 8000);
  }

  async function submit() {
    const text = prompt.value;
    if (!text.trim() || busy || !view.open) return;
    busy = true;
    send.disabled = true;
    try {
      await actions.send(text, files.take());
      prompt.value = '';
      files.clear();
      errorText = '';
    } catch (error) {
      showError(error.message);
    } finally {
      busy = false;
      send.disabled = !view.open;
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    submit();
  });
  prompt.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      submit();
    }
  });
  recall.addEventListener('click', async () => {
    try {
      const text = await actions.recall();
      if (text !== null && text !== undefined) {
        // The recalled text comes back into the prompt, to edit and send again.
        prompt.value = prompt.value ? `${text}\n${prompt.value}` : text;
        prompt.focus();
      } else {
        showError('Nothing to recall.');
      }
    } catch (error) {
      showError(error.message);
    }
  });
  cancel.addEventListener('click', async () => {
    try {
      await actions.cancel();
    } catch (error) {
      showError(error.message);
    }
  });

  /**
   * `v`: {open, active, canRecall, statusText}.
   */
  function render(v) {
    view = v;
    send.disabled = busy || !v.open;
    send.textContent = v.active ? 'Steer' : 'Send';
    recall.disabled = !v.canRecall;
    cancel.disabled = !v.active;
    prompt.disabled = !v.open;
    attach.disabled = !v.open;
    const line = errorText || v.statusText || '';
    if (status.textContent !== line) status.textContent = line;
  }

  return { el: form, render, focus: () => prompt.focus() };
}
