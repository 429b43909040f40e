// The transcript: one `entry` element per store entry, in seq order. Entries are keyed, so a streaming delta
// re-renders only its own entry, and a tool's output is appended to rather than redrawn (a long command's output
// stays cheap, and the stdin field keeps its focus and text while output arrives).
import { ansiConverter } from '../ansi.js';
import { renderContent, renderDiff, renderFileDiff } from '../diff.js';
import { clock, fill, h, shortId } from '../dom.js';
import { renderMarkdown } from '../markdown.js';
import { failureAdvice } from '../selection.js';
import { visibleBlock, visibleLine } from '../shown.js';
import { attachedFiles } from './attachments.js';

const RESULT_PREVIEW_CHARS = 20_000;

/**
 * `actions`: `stdin(toolCallId, data, eof)` → Promise, `open(sessionId)`, `who(answeredBy)` → words,
 * `attachment(path)` → Promise<{mime_type, data}> (an attached file's bytes).
 */
export function createTranscript(actions) {
  const root = h('div', { class: 'transcript', 'data-testid': 'transcript', role: 'log', 'aria-label': 'Transcript', 'aria-live': 'off', tabindex: '0' });
  const empty = h('p', { class: 'transcript-empty' }, 'No events yet. Write a prompt below to start a run.');
  let views = new Map();
  let shownFor = null;
  // Follow the end of the transcript unless the reader scrolled up.
  let stick = true;
  root.addEventListener('scroll', () => {
    stick = root.scrollHeight - root.scrollTop - root.clientHeight < 40;
  });

  /** `whoVersion`: bumped when `actions.who` would name someone differently (approval entries re-render). */
  function render(state, whoVersion = 0) {
    if (!state) {
      views = new Map();
      shownFor = null;
      fill(root, h('p', { class: 'transcript-empty' }, 'Pick a session, or create one.'));
      return;
    }
    if (shownFor !== state) {
      views = new Map();
      shownFor = state;
      stick = true;
      fill(root);
    }
    if (state.entries.length === 0) {
      if (!empty.isConnected) root.appendChild(empty);
    } else if (empty.isConnected) {
      empty.remove();
    }
    const running = new Set(state.activeRun ? state.runningTools : []);
    for (const entry of state.entries) {
      let view = views.get(entry.key);
      const live = entry.kind === 'tool' && running.has(entry.toolCallId);
      if (!view) {
        view = createEntryView(entry, actions, state);
        views.set(entry.key, view);
        root.appendChild(view.el);
      }
      const whoStale = entry.kind === 'approval' && entry.answeredBy && view.whoVersion !== whoVersion;
      if (view.version !== entry.version || view.live !== live || whoStale) {
        view.update(entry, live, state);
        view.version = entry.version;
        view.live = live;
        view.whoVersion = whoVersion;
      }
    }
    if (stick) root.scrollTop = root.scrollHeight;
  }

  return { el: root, render };
}

function shell(entry, label, extraClass = '') {
  const el = h('article', {
    class: `entry entry-${entry.kind} ${extraClass}`.trim(),
    'data-testid': 'entry',
    'data-seq': String(entry.seq),
    'data-kind': entry.kind,
  });
  if (label) el.setAttribute('aria-label', label);
  return el;
}

function meta(...parts) {
  return h('header', { class: 'entry-meta' }, parts.filter(Boolean));
}

function createEntryView(entry, actions, state) {
  switch (entry.kind) {
    case 'tool':
      return toolView(entry, actions);
    default: {
      const el = shell(entry);
      return {
        el,
        version: 0,
        live: false,
        update: (current) => {
          el.className = `entry entry-${current.kind}${current.streaming ? ' streaming' : ''}`;
          if (current.kind === 'steer') el.setAttribute('data-state', current.state);
          fill(el, ...simpleBody(current, actions, state));
        },
      };
    }
  }
}

function markdownBlock(text, extraClass) {
  const div = h('div', { class: `md ${extraClass ?? ''}`.trim() });
  div.innerHTML = renderMarkdown(text);
  return div;
}

function usageLine(usage) {
  if (!usage) return null;
  const tokens = `${formatCount(usage.input)} in · ${formatCount(usage.output)} out`;
  const cost = usage.costKnown ? ` · $${usage.cost.toFixed(usage.cost < 0.01 ? 4 : 2)}` : '';
  return h('span', { class: 'usage' }, `${tokens}${cost}`);
}

export function formatCount(n) {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1)}M`;
  if (n >= 10_000) return `${Math.round(n / 1000)}k`;
  if (n >= 1000) return `${(n / 1000).toFixed(1)}k`;
  return String(n);
}

function originLabel(origin) {
  if (!origin || origin === 'user') return null;
  if (origin === 'engine:goal') return 'goal';
  if (origin === 'engine:delegate') return 'delegated';
  return origin;
}

function modelErrorBlock(error, shown = '') {
  if (!error) return null;
  const facts = [
    ['kind', error.kind],
    ['stage', error.stage],
    ['HTTP', error.http_status],
    ['vendor code', error.vendor_code],
    ['request', error.request_id],
    ['retryable', error.retryable === undefined ? null : error.retryable ? 'yes' : 'no'],
  ].filter(([, value]) => value !== null && value !== undefined && value !== '');
  return h(
    'div',
    { class: 'model-error' },
    error.message && !shown.includes(error.message) ? h('p', null, error.message) : null,
    facts.length ? h('dl', { class: 'facts' }, facts.map(([name, value]) => [h('dt', null, name), h('dd', null, String(value))])) : null,
    error.response_body ? h('details', { open: true }, h('summary', null, 'Response body'), h('pre', { class: 'diagnostic' }, error.response_body)) : null,
  );
}

/** Only the vendor's response body, when the facts were shown with the failed attempt above. */
function diagnosticBody(error) {
  return error?.response_body ? h('details', null, h('summary', null, 'Response body'), h('pre', { class: 'diagnostic' }, error.response_body)) : null;
}

const RUN_END_WORDS = { completed: 'Run completed', failed: 'Run failed', cancelled: 'Run cancelled', interrupted: 'Run interrupted' };
const DECISION_WORDS = { approve_once: 'approved once', approve_tree: 'allowed for the whole tree', reject: 'rejected', cancel: 'cancelled' };
const STEER_WORDS = { admitted: 'queued', submitted: 'submitted', recalled: 'recalled', voided: 'dropped (the run ended)' };

function simpleBody(entry, actions) {
  switch (entry.kind) {
    case 'user':
      return [meta(h('span', { class: 'who' }, 'You'), originLabel(entry.origin) && h('span', { class: 'badge' }, originLabel(entry.origin)), h('time', null, clock(entry.timestamp))), h('div', { class: 'user-text' }, entry.text), attachedFiles(entry.attachments, actions.attachment)];
    case 'run-start':
      return [
        h('span', { class: 'marker', 'aria-hidden': 'true' }, '◆'),
        ' Run started · ',
        h('span', { class: 'agent' }, entry.agent ?? 'agent'),
        ' · ',
        h('code', null, entry.model ?? ''),
        entry.chain && entry.chain.length > 1 ? h('span', { class: 'dim' }, ` (fallbacks: ${entry.chain.slice(1).join(', ')})`) : null,
        originLabel(entry.origin) ? h('span', { class: 'badge' }, originLabel(entry.origin)) : null,
        h('time', null, clock(entry.timestamp)),
        entry.stickyFrom
          ? h('p', { class: 'model-switch', 'data-testid': 'sticky-fallback' }, `${entry.stickyFrom} was asked for: the run starts on ${entry.model}, the fallback an earlier run of agent ${entry.agent} in this session moved to (its runs stay there until one resets the fallback)`)
          : null,
      ];
    case 'assistant':
      return [
        entry.continuation ? null : meta(h('span', { class: 'who' }, 'Assistant'), entry.model ? h('code', { class: 'dim' }, entry.model) : null, entry.streaming ? h('span', { class: 'badge live' }, 'streaming') : null),
        entry.reasoning ? h('div', { class: 'reasoning-inline' }, h('span', { class: 'dim' }, 'Reasoning'), markdownBlock(entry.reasoning, 'dim')) : null,
        markdownBlock(entry.text),
      ];
    case 'reasoning':
      return [meta(h('span', { class: 'who' }, 'Reasoning')), markdownBlock(entry.text, 'dim')];
    case 'steer':
      return [
        meta(h('span', { class: 'who' }, 'Steer'), h('span', { class: `badge steer-${entry.state}` }, STEER_WORDS[entry.state] ?? entry.state)),
        h('div', { class: 'user-text' }, entry.text),
        attachedFiles(entry.attachments, actions.attachment),
      ];
    case 'run-end':
      return [
        h('div', { class: 'run-end-line' }, h('span', { class: 'marker', 'aria-hidden': 'true' }, '■'), ` ${RUN_END_WORDS[entry.status] ?? `Run ${entry.status}`}`, entry.reason ? h('span', { class: 'dim' }, ` — ${entry.reason}`) : null, usageLine(entry.usage), h('time', null, clock(entry.timestamp))),
        entry.error
          ? h('div', { class: 'error-body' }, h('p', { class: 'error-title' }, entry.error.message), adviceLine(entry.error.message), entry.error.resolvedModel ? h('p', { class: 'dim' }, `model: ${entry.error.resolvedModel}`) : null, entry.error.detailsShown ? diagnosticBody(entry.error.modelError) : modelErrorBlock(entry.error.modelError, entry.error.message))
          : null,
      ];
    case 'error':
      return [meta(h('span', { class: 'who' }, 'Error')), h('p', { class: 'error-title' }, entry.title), modelErrorBlock(entry.modelError, entry.title)];
    case 'approval': {
      const op = entry.operation ?? {};
      const answer = entry.decision ? DECISION_WORDS[entry.decision] ?? entry.decision : entry.status === 'pending' ? 'waiting for an answer' : entry.status;
      return [
        meta(h('span', { class: 'who' }, 'Approval'), h('span', { class: `badge approval-${entry.decision ?? entry.status}` }, answer), entry.answeredBy ? h('span', { class: 'dim', title: entry.answeredBy }, `by ${actions.who(entry.answeredBy)}`) : null),
        h('div', null, op.summary && !op.summary.includes(op.resource ?? '') ? [visibleLine(op.summary), ' '] : [`${visibleLine(op.tool, 40)} · ${op.action} `], h('code', { class: 'resource' }, visibleBlock(op.resource ?? ''))),
        entry.feedback ? h('p', { class: 'feedback' }, `Feedback: ${entry.feedback}`) : null,
        entry.reason ? h('p', { class: 'dim' }, entry.reason) : null,
      ];
    }
    case 'gap':
      return [h('span', { class: 'gap-text' }, entry.text)];
    default: {
      if (entry.delegate) {
        const d = entry.delegate;
        return [
          meta(h('span', { class: 'who' }, 'Delegated'), h('span', { class: 'agent' }, d.agent), h('span', { class: `badge status-${d.status}` }, d.status)),
          h('div', { class: 'user-text' }, d.task),
          d.summary ? h('details', null, h('summary', null, 'Summary'), markdownBlock(d.summary)) : null,
          h('button', { type: 'button', class: 'link', onclick: () => actions.open(d.childSessionId) }, `Open child session ${shortId(d.childSessionId)}`),
        ];
      }
      return [h('span', { class: 'other-text' }, entry.text), entry.json !== undefined ? h('pre', { class: 'json' }, JSON.stringify(entry.json, null, 2)) : null];
    }
  }
}

/** What to do about a model that cannot run, under the daemon's own message; null for other failures. */
function adviceLine(message) {
  const advice = failureAdvice(message);
  return advice ? h('p', { class: 'advice' }, h('strong', null, 'What to do: '), advice) : null;
}

function argumentsBlock(entry) {
  const args = entry.arguments;
  if (args && typeof args === 'object' && typeof args.command === 'string') {
    return h('pre', { class: 'command' }, h('span', { class: 'prompt', 'aria-hidden': 'true' }, '$ '), visibleBlock(args.command));
  }
  if (args === null || args === undefined) return entry.resource ? h('pre', { class: 'command' }, visibleBlock(entry.resource)) : null;
  if (entry.diff) {
    const { path } = entry.diff;
    const rest = { ...args };
    for (const key of ['path', 'file_path', 'old_string', 'new_string', 'content']) delete rest[key];
    return Object.keys(rest).length ? h('pre', { class: 'args' }, JSON.stringify({ path, ...rest }, null, 2)) : null;
  }
  const text = JSON.stringify(args, null, 2);
  return text.length > 400 ? h('details', { class: 'args' }, h('summary', null, 'Arguments'), h('pre', null, text)) : h('pre', { class: 'args' }, text);
}

/** A change as one of the three shapes a tool entry holds (see `toolView`). */
function changeView(diff) {
  if (!diff) return null;
  if (typeof diff.unified === 'string' || typeof diff.lines_added === 'number') return renderFileDiff(diff);
  if (typeof diff.content === 'string') return renderContent(diff);
  return renderDiff(diff);
}

function toolStatus(entry, live) {
  if (entry.result) return [entry.result.status, entry.result.status];
  if (live || (entry.started && !entry.ended)) return ['running', 'running'];
  if (!entry.started) return ['waiting', 'waiting'];
  return ['ended', 'ended'];
}

function toolView(entry, actions) {
  const el = shell(entry);
  const head = h('header', { class: 'entry-meta' });
  const argsSlot = h('div', { class: 'tool-args' });
  const diffSlot = h('div');
  const output = h('pre', { class: 'output', 'data-testid': 'tool-output', 'aria-label': 'Output', tabindex: '0' });
  // The output follows its tail, like a terminal, unless the reader scrolled up in it.
  let outputStick = true;
  output.addEventListener('scroll', () => {
    outputStick = output.scrollHeight - output.scrollTop - output.clientHeight < 24;
  });
  const stdinSlot = h('div');
  const resultSlot = h('div');
  el.append(head, argsSlot, diffSlot, output, stdinSlot, resultSlot);
  const converters = {};
  let renderedChunks = 0;
  let renderedTextLength = 0;
  let lastSpan = null;
  let argsFor;
  let diffFor;
  let stdinForm = null;

  function appendOutput(current) {
    // The last chunk may have grown since it was drawn: draw only its new text.
    const chunks = current.chunks;
    for (let i = Math.max(0, renderedChunks - 1); i < chunks.length; i += 1) {
      const chunk = chunks[i];
      if (chunk.gap) {
        if (i >= renderedChunks) output.appendChild(h('span', { class: 'output-gap', 'data-testid': 'output-gap', role: 'note' }, `\n⋯ ${chunk.text} ⋯\n`));
        lastSpan = null;
        renderedTextLength = 0;
        continue;
      }
      const from = i === renderedChunks - 1 ? renderedTextLength : 0;
      if (i >= renderedChunks) {
        lastSpan = null;
        renderedTextLength = 0;
      }
      const text = chunk.text.slice(from);
      if (text) {
        converters[chunk.stream] ??= ansiConverter();
        const span = h('span', { class: `stream stream-${chunk.stream}`, 'data-stream': chunk.stream, title: chunk.stream });
        span.innerHTML = converters[chunk.stream](text);
        output.appendChild(span);
        lastSpan = span;
      }
      renderedTextLength = chunk.text.length;
    }
    renderedChunks = chunks.length;
    output.classList.toggle('empty', chunks.length === 0);
    if (outputStick) output.scrollTop = output.scrollHeight;
  }

  function stdinControls(current) {
    const input = h('input', { type: 'text', class: 'stdin-input', 'data-testid': 'stdin-input', id: `stdin-${current.toolCallId}`, autocomplete: 'off', spellcheck: 'false', placeholder: 'Type a line for the command, Enter sends' });
    const status = h('span', { class: 'stdin-status dim', role: 'status', 'aria-live': 'polite' });
    const send = async (eof) => {
      const data = input.value;
      if (!eof && data === '') return;
      try {
        const accepted = await actions.stdin(current.toolCallId, eof ? (data ? `${data}\n` : '') : `${data}\n`, eof);
        if (accepted) {
          input.value = '';
          status.textContent = eof ? 'stdin closed' : 'sent';
        } else {
          status.textContent = 'the command is no longer running';
        }
      } catch (error) {
        status.textContent = error.message;
      }
    };
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.isComposing) {
        event.preventDefault();
        send(false);
      } else if (event.key === 'Escape') {
        input.value = '';
      }
    });
    return h(
      'div',
      { class: 'stdin' },
      h('label', { for: input.id, class: 'stdin-label' }, 'stdin'),
      input,
      h('button', { type: 'button', 'data-testid': 'stdin-send', onclick: () => send(false) }, 'Send'),
      h('button', { type: 'button', class: 'secondary', 'data-testid': 'stdin-eof', title: 'Send the line (if any) and close the command\'s stdin', onclick: () => send(true) }, 'Close stdin'),
      status,
    );
  }

  function update(current, live) {
    const [status, cls] = toolStatus(current, live);
    fill(
      head,
      h('span', { class: 'who tool-name' }, current.tool),
      current.action ? h('span', { class: 'dim' }, current.action) : null,
      current.resource && !(current.arguments && typeof current.arguments.command === 'string') ? h('code', { class: 'resource' }, visibleBlock(current.resource)) : null,
      h('span', { class: `badge status-${cls}` }, status),
      current.stdin.length ? h('span', { class: 'dim' }, `stdin: ${current.stdin.reduce((n, s) => n + s.bytes, 0)} bytes${current.stdinClosed ? ', closed' : ''}`) : null,
    );
    if (argsFor !== current.arguments) {
      argsFor = current.arguments;
      fill(argsSlot, argumentsBlock(current));
    }
    // The daemon's word on what changed comes first: the result's diff, then the one its approval showed; the
    // arguments alone cannot say what a write replaces.
    const shownDiff = current.resultDiff ?? current.fileDiff ?? current.diff;
    if (diffFor !== shownDiff) {
      diffFor = shownDiff;
      fill(diffSlot, changeView(shownDiff));
    }
    appendOutput(current);
    // Only a command reads stdin (a delegation or a file edit does not).
    const wantsStdin = live && !current.stdinClosed && typeof current.arguments?.command === 'string';
    if (wantsStdin && !stdinForm) {
      stdinForm = stdinControls(current);
      stdinSlot.appendChild(stdinForm);
    } else if (!wantsStdin && stdinForm) {
      stdinForm.remove();
      stdinForm = null;
    }
    const result = current.result;
    if (result) {
      // A diff the display holds is drawn above as a diff; the words before it stay.
      let text = current.resultDiff ? result.output ?? '' : result.display ?? result.output ?? '';
      const clipped = text.length > RESULT_PREVIEW_CHARS;
      if (clipped) text = `${text.slice(0, RESULT_PREVIEW_CHARS)}\n…`;
      // The result repeats what streamed above: folded away, whatever the status (a cancelled or failed command's
      // output is no more new than a finished one's). It is terminal output too, so colours render, never escapes.
      const streamed = current.chunks.length > 0;
      const body = h('pre', { class: `result result-${result.status}` });
      body.innerHTML = ansiConverter()(text);
      fill(
        resultSlot,
        text === '' ? null : streamed ? h('details', { class: 'result-details' }, h('summary', null, result.status === 'ok' ? 'Result' : `Result (${result.status})`), body) : body,
        result.output_ref ? h('p', { class: 'dim' }, `Full output: ${result.output_ref}`) : null,
      );
    }
  }

  return { el, version: 0, live: false, update };
}
