import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shortDir } from './paths.js';

test('a long directory keeps its end, a short one stays whole', () => {
  assert.equal(shortDir('/tmp/dd-home/code/myproject'), '…/code/myproject');
  assert.equal(shortDir('/srv/app'), '/srv/app');
  assert.equal(shortDir('/'), '/');
  assert.equal(shortDir(''), '');
  assert.equal(shortDir('/a/b/c/', 1), '…/c');
});
