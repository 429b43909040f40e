import { test } from 'node:test';
import assert from 'node:assert/strict';
import { matching, pathQuery } from './path_complete.js';

test('the @word before the caret is a folder and a prefix', () => {
  assert.deepEqual(pathQuery('see @do', 7), { start: 4, dir: '', prefix: 'do' });
  assert.deepEqual(pathQuery('@docs/ar', 8), { start: 0, dir: 'docs', prefix: 'ar' });
  assert.deepEqual(pathQuery('@a/b/', 5), { start: 0, dir: 'a/b', prefix: '' });
  assert.equal(pathQuery('mail me@host', 12), null, 'an @ inside a word is not a path');
  assert.equal(pathQuery('@docs and more', 14), null, 'only the word at the caret');
});

test('offers match the prefix, folders marked, dot files only when asked', () => {
  const entries = [{ name: '.git', kind: 'dir' }, { name: 'Docs', kind: 'dir' }, { name: 'docs.md', kind: 'file' }, { name: 'src', kind: 'dir' }];
  assert.deepEqual(matching(entries, 'do'), [{ name: 'Docs', dir: true }, { name: 'docs.md', dir: false }]);
  assert.deepEqual(matching(entries, '.'), [{ name: '.git', dir: true }]);
  assert.equal(matching(entries, '').length, 3);
});
