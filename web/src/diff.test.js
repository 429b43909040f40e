// The daemon's diffs as the console reads them: a unified diff's rows and a result's display.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { displayDiff, unifiedRows } from './diff.js';

test('a unified diff reads as rows without its file headers', () => {
  const rows = unifiedRows('--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,2 +1 @@\n-one\n-two\n+three\n keep\n');
  assert.deepEqual(rows, [
    { kind: 'hunk', line: '@@ -1,2 +1 @@' },
    { kind: 'del', line: 'one' },
    { kind: 'del', line: 'two' },
    { kind: 'add', line: 'three' },
    { kind: 'ctx', line: 'keep' },
  ]);
});

test("an overwrite's display counts what it replaced: a 2-line file by one line is -2 +1", () => {
  const display = 'wrote 6 bytes to a.txt (-2 +1)\n--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,2 +1 @@\n-one\n-two\n+three\n';
  const diff = displayDiff(display);
  assert.equal(diff.path, '/w/a.txt');
  assert.equal(diff.lines_added, 1);
  assert.equal(diff.lines_removed, 2);
  assert.ok(diff.unified.startsWith('--- a/w/a.txt\n'));
});

test('a new file and a display with no diff', () => {
  const created = displayDiff('wrote 4 bytes to n.txt (new file, +1)\n--- /dev/null\n+++ b/w/n.txt\n@@ -0,0 +1 @@\n+new\n');
  assert.deepEqual([created.path, created.lines_added, created.lines_removed], ['/w/n.txt', 1, 0]);
  assert.equal(displayDiff('wrote 4 bytes to /elsewhere/n.txt (+1 -0)'), null);
  assert.equal(displayDiff(undefined), null);
  assert.equal(displayDiff('--- not a diff'), null);
});

test("a removal's diff names the file from its old side", () => {
  const removed = displayDiff('removed\n--- a/w/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n');
  assert.deepEqual([removed.path, removed.lines_added, removed.lines_removed], ['/w/gone.txt', 0, 1]);
});
