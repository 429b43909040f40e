// The same cases as protocol/src/diagnostic/visible.rs's tests: the console and the terminal clients show a
// command the same way.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { describeLeftOut, showVisibly, visibleLine, WHOLE } from './shown.js';

const whole = (text) => showVisibly(text, WHOLE);

test('each line is its own line and a carriage return is seen', () => {
  assert.deepEqual(whole('ls\nrm -rf ~\r\necho done'), { lines: ['ls', 'rm -rf ~⟨CR⟩', 'echo done'], leftOut: null });
  assert.deepEqual(whole('ls\n').lines, ['ls']);
  assert.deepEqual(whole('ls\n\n').lines, ['ls', '']);
  assert.deepEqual(whole('').lines, ['']);
});

test('bidi controls, zero-width characters and other invisibles are shown as code points', () => {
  assert.deepEqual(whole('echo \u202egnp.exe\u202c \u2066x\u2069 a\u200bb\u200dc\ufeff').lines, ['echo ⟨U+202E⟩gnp.exe⟨U+202C⟩ ⟨U+2066⟩x⟨U+2069⟩ a⟨U+200B⟩b⟨U+200D⟩c⟨U+FEFF⟩']);
  assert.deepEqual(whole('a\u2028b\u2029c').lines, ['a⟨U+2028⟩b⟨U+2029⟩c']);
  assert.deepEqual(whole('rm\u00a0-rf x\u3164\ufe0f').lines, ['rm⟨U+00A0⟩-rf x⟨U+3164⟩⟨U+FE0F⟩']);
  assert.deepEqual(whole('\u{e0041}\ue000').lines, ['⟨U+E0041⟩⟨U+E000⟩']);
});

test('escape sequences and other controls are shown and nothing is removed', () => {
  assert.deepEqual(whole('\x1b[2J\x1b]0;title\x07\tx\b\0\x7f\x9b31m\v\f\x01').lines, ['⟨ESC⟩[2J⟨ESC⟩]0;title⟨BEL⟩⟨TAB⟩x⟨BS⟩⟨NUL⟩⟨DEL⟩⟨U+009B⟩31m⟨VT⟩⟨FF⟩⟨U+0001⟩']);
  const plain = 'ls -la ~/é 漢字 😀 ⟨already⟩';
  assert.deepEqual(whole(plain), { lines: [plain], leftOut: null });
});

test('long text is cut at the limits and says what is left out', () => {
  const script = Array.from({ length: 100 }, (_, i) => `echo line ${i + 1}\n`).join('');
  const shown = showVisibly(script, { maxLines: 3, maxBytes: 10000 });
  assert.deepEqual(shown.lines, ['echo line 1', 'echo line 2', 'echo line 3']);
  assert.deepEqual(shown.leftOut, { bytes: script.length - 'echo line 1\necho line 2\necho line 3\n'.length, lines: 97 });
  const line = `${'é'.repeat(10)}\u202e${'x'.repeat(5000)}`;
  assert.deepEqual(showVisibly(line, { maxLines: 10, maxBytes: 32 }), { lines: [`${'é'.repeat(10)}⟨U+202E⟩`], leftOut: { bytes: 5000, lines: 0 } });
  assert.deepEqual(showVisibly(line, { maxLines: 10, maxBytes: 31 }), { lines: ['é'.repeat(10)], leftOut: { bytes: 5003, lines: 0 } });
  assert.equal(showVisibly('ab\ncd\n', { maxLines: 2, maxBytes: 4 }).leftOut, null);
  assert.deepEqual(showVisibly('ab\ncd\nef', { maxLines: 2, maxBytes: 100 }).leftOut, { bytes: 2, lines: 1 });
  assert.equal(describeLeftOut({ bytes: 3412, lines: 40 }), '3,412 more bytes, 40 more lines');
  assert.equal(describeLeftOut({ bytes: 2, lines: 1 }), '2 more bytes, 1 more line');
  assert.equal(describeLeftOut({ bytes: 5000, lines: 0 }), '5,000 more bytes');
});

test('one line for a heading marks further lines and shows controls', () => {
  assert.equal(visibleLine('run ls\nrm -rf ~', 80), 'run ls [+1 line]');
  assert.equal(visibleLine('a\r\nb\nc\n', 80), 'a⟨CR⟩ [+2 lines]');
  assert.equal(visibleLine('abcdef', 3), 'abc…');
  assert.equal(visibleLine('\u202etxt', 80), '⟨U+202E⟩txt');
});
