// Untrusted text shown with every character seen: what a person approves must read as what runs. The web side of
// protocol/src/diagnostic/visible.rs, which the terminal clients use: same escapes, same limits, same words, so a
// command reads the same in `troupe approvals`, `watch`, the TUI and here.
//
// Nothing is removed. Each line of the text is its own line (split at "\n" only: a "\r" is shown, never taken as
// a line end), and every character a reader would not see for what it is (controls, bidi and zero-width format
// characters, spaces other than U+0020, private-use and unassigned code points, default-ignorables) is written as
// an escape: ⟨CR⟩, ⟨ESC⟩, ⟨TAB⟩ for the common controls, ⟨U+202E⟩ for the rest.

/** How much of a command an approval shows before it says what it left out (ShowLimits::APPROVAL). */
export const APPROVAL_LIMITS = Object.freeze({ maxLines: 24, maxBytes: 2048 });
/** No limit. */
export const WHOLE = Object.freeze({ maxLines: Infinity, maxBytes: Infinity });

const NAMED = new Map([
  ['\t', 'TAB'],
  ['\r', 'CR'],
  ['\x1b', 'ESC'],
  ['\0', 'NUL'],
  ['\x07', 'BEL'],
  ['\b', 'BS'],
  ['\v', 'VT'],
  ['\f', 'FF'],
  ['\x7f', 'DEL'],
]);

// One code point (the `u` flag): a control, a format character, a line or paragraph separator, a private-use,
// unassigned or lone surrogate code point, a default-ignorable outside those categories, or a space other than
// U+0020 (a no-break space joins what looks like two words).
const INVISIBLE = /^(?:[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cn}\p{Cs}\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\u{e0100}-\u{e01ef}]|(?! )\p{Zs})$/u;

/** The escape `c` (one code point) is shown as, or null when it is shown as itself. */
export function escapeOf(c) {
  const named = NAMED.get(c);
  if (named) return `⟨${named}⟩`;
  if (!INVISIBLE.test(c)) return null;
  return `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`;
}

/** UTF-8 bytes of one code point (a lone surrogate is sent as U+FFFD). */
function utf8Length(c) {
  const cp = c.codePointAt(0);
  if (cp < 0x80) return 1;
  if (cp < 0x800) return 2;
  if (cp < 0x10000) return 3;
  return 4;
}

function bodyLines(text) {
  return (text.endsWith('\n') ? text.slice(0, -1) : text).split('\n');
}

/**
 * `text` as lines with every invisible character escaped, cut at `limits` ({maxLines, maxBytes}; bytes of shown
 * text, escapes included). Returns {lines, leftOut: {bytes, lines} | null}: the original text's bytes not shown,
 * and the lines not shown at all (a line cut part way counts as shown).
 */
export function showVisibly(text, limits = APPROVAL_LIMITS) {
  const source = String(text ?? '');
  const all = bodyLines(source);
  const totalBytes = [...source].reduce((n, c) => n + utf8Length(c), 0);
  const lines = [];
  let budget = limits.maxBytes;
  let consumed = 0;
  for (const line of all) {
    if (lines.length === limits.maxLines || budget === 0) break;
    let out = '';
    let whole = true;
    for (const c of line) {
      const escaped = escapeOf(c);
      const size = escaped === null ? utf8Length(c) : new TextEncoder().encode(escaped).length;
      if (size > budget) {
        whole = false;
        break;
      }
      budget -= size;
      consumed += utf8Length(c);
      out += escaped ?? c;
    }
    lines.push(out);
    if (!whole) break;
    consumed = Math.min(consumed + 1, totalBytes);
  }
  if (lines.length === 0) lines.push('');
  const leftOut = consumed < totalBytes ? { bytes: totalBytes - consumed, lines: all.length - lines.length } : null;
  return { lines, leftOut };
}

/** "3,412 more bytes, 40 more lines". */
export function describeLeftOut({ bytes, lines }) {
  const more = (count, word) => `${thousands(count)} more ${word}${count === 1 ? '' : 's'}`;
  return lines === 0 ? more(bytes, 'byte') : `${more(bytes, 'byte')}, ${more(lines, 'line')}`;
}

/** One line: the first line of `text`, escaped, cut to `maxChars` (marked …), and "[+N lines]" when it goes on. */
export function visibleLine(text, maxChars = 100) {
  const [first, ...rest] = bodyLines(String(text ?? ''));
  const escaped = [...first].map((c) => escapeOf(c) ?? c).join('');
  const chars = [...escaped];
  let line = chars.slice(0, maxChars).join('');
  if (chars.length > maxChars) line += '…';
  if (rest.length === 0) return line;
  return `${line} [+${rest.length} ${rest.length === 1 ? 'line' : 'lines'}]`;
}

/** The whole `text`, every line kept and every invisible character escaped: for a `pre` or a pre-wrap `code`. */
export function visibleBlock(text) {
  return showVisibly(text, WHOLE).lines.join('\n');
}

function thousands(count) {
  return String(count).replace(/\B(?=(\d{3})+$)/g, ',');
}
