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

/**
 * The rows of a unified diff (`--- a/…`, `+++ b/…`, `@@ … @@` hunks), each tagged `add`, `del`, `ctx` or `hunk`;
 * the file headers are left out (the caption names the file).
 */
export function unifiedRows(unified) {
  const rows = [];
  const lines = (unified ?? '').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  for (const line of lines) {
    if (line.startsWith('--- ') || line.startsWith('+++ ')) continue;
    if (line.startsWith('@@')) rows.push({ kind: 'hunk', line });
    else if (line.startsWith('+')) rows.push({ kind: 'add', line: line.slice(1) });
    else if (line.startsWith('-')) rows.push({ kind: 'del', line: line.slice(1) });
    else if (line.startsWith('\\')) rows.push({ kind: 'hunk', line });
    else rows.push({ kind: 'ctx', line: line.startsWith(' ') ? line.slice(1) : line });
  }
  return rows;
}

/**
 * The diff a write's or an edit's result shows (`display`: the result's words, then the unified diff), as the daemon
 * counted it; null when the display holds no diff.
 */
export function displayDiff(display) {
  if (typeof display !== 'string') return null;
  let start = 0;
  if (!display.startsWith('--- ')) {
    const at = display.indexOf('\n--- ');
    if (at < 0) return null;
    start = at + 1;
  }
  const unified = display.slice(start);
  const header = unified.split('\n', 2);
  if (!header[1]?.startsWith('+++ ')) return null;
  // The daemon names absolute paths git's way, `b/` then the path without its leading slash.
  // A removal's new side is /dev/null: its old side names it.
  const named = header[1] === '+++ /dev/null' ? header[0].slice(4).replace(/^a\//, 'b/') : header[1].slice(4);
  const path = named.startsWith('b/') ? `/${named.slice(2)}` : named;
  const rows = unifiedRows(unified);
  return {
    path,
    unified,
    lines_added: rows.filter((row) => row.kind === 'add').length,
    lines_removed: rows.filter((row) => row.kind === 'del').length,
  };
}

const FILE_SIGN = { add: '+', del: '-', ctx: ' ', hunk: '' };

/**
 * A change as the daemon describes it (`FileDiff`: an approval's `operation.diff`, or a result's diff): the path and
 * the daemon's counts, then the unified diff, or why there is none (a binary file, a file too large to read).
 */
export function renderFileDiff(diff) {
  const rows = unifiedRows(diff.unified);
  const notes = [];
  if (diff.binary) notes.push(`binary file, ${diff.bytes_before ?? 0} → ${diff.bytes_after ?? 0} bytes`);
  if (diff.truncated) notes.push('the diff is cut; the counts are whole');
  if (diff.note) notes.push(diff.note);
  return h(
    'figure',
    { class: 'diff', 'data-testid': 'diff' },
    h(
      'figcaption',
      null,
      h('span', { class: 'diff-path' }, diff.path),
      diff.kind === 'created' ? h('span', { class: 'dim' }, ' new file') : diff.kind === 'deleted' ? h('span', { class: 'dim' }, ' deleted') : null,
      ' ',
      h('span', { class: 'diff-add', 'data-testid': 'diff-added' }, `+${diff.lines_added ?? 0}`),
      ' ',
      h('span', { class: 'diff-del', 'data-testid': 'diff-removed' }, `-${diff.lines_removed ?? 0}`),
    ),
    rows.length
      ? h('pre', { class: 'diff-body' }, rows.map((row) => h('span', { class: `diff-line diff-${row.kind}` }, `${FILE_SIGN[row.kind]}${row.kind === 'hunk' ? '' : ' '}${row.line}\n`)))
      : null,
    notes.length ? h('p', { class: 'dim diff-note' }, notes.join('; ')) : null,
  );
}

/** The content a `write_file` call asks to write, before the daemon said what it replaces: no counts, no signs. */
export function renderContent({ path, content }) {
  const lines = content.split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  return h(
    'figure',
    { class: 'diff', 'data-testid': 'diff' },
    h('figcaption', null, h('span', { class: 'diff-path' }, path), h('span', { class: 'dim' }, ` content to write, ${lines.length} line${lines.length === 1 ? '' : 's'}`)),
    h('pre', { class: 'diff-body' }, lines.map((line) => h('span', { class: 'diff-line diff-ctx' }, `${line}\n`))),
  );
}
