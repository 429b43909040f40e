// File edits as line diffs (jsdiff), rendered as DOM (never HTML strings).
import { diffLines } from 'diff';
import { h } from './dom.js';

/** The lines of an edit, each tagged `add`, `del` or `ctx`. */
export function diffRows(before, after) {
  const rows = [];
  for (const part of diffLines(before ?? '', after ?? '')) {
    const kind = part.added ? 'add' : part.removed ? 'del' : 'ctx';
    const lines = part.value.split('\n');
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
    for (const line of lines) rows.push({ kind, line });
  }
  return rows;
}

const SIGN = { add: '+', del: '-', ctx: ' ' };

/** A `diff` block: the file's path, then the changed lines. */
export function renderDiff({ path, before, after }) {
  const rows = diffRows(before, after);
  const added = rows.filter((row) => row.kind === 'add').length;
  const removed = rows.filter((row) => row.kind === 'del').length;
  return h(
    'figure',
    { class: 'diff', 'data-testid': 'diff' },
    h('figcaption', null, h('span', { class: 'diff-path' }, path), ' ', h('span', { class: 'diff-add' }, `+${added}`), ' ', h('span', { class: 'diff-del' }, `-${removed}`)),
    h(
      'pre',
      { class: 'diff-body' },
      rows.map((row) => h('span', { class: `diff-line diff-${row.kind}` }, `${SIGN[row.kind]} ${row.line}\n`)),
    ),
  );
}
