import { test } from 'node:test';
import assert from 'node:assert/strict';
import { answeredByWords } from './who.js';

test('an approval answer names who in words', () => {
  const mine = new Set(['connection-4', 'connection-2']);
  const names = new Map([['connection-7', 'troupe cli']]);
  assert.equal(answeredByWords('client:connection-4', mine, names), 'you');
  assert.equal(answeredByWords('client:connection-2', mine, names), 'you');
  assert.equal(answeredByWords('client:connection-7', mine, names), 'troupe cli (another client)');
  assert.equal(answeredByWords('client:connection-9', mine, names), 'another client');
  assert.equal(answeredByWords('mode:yolo', mine, names), 'mode:yolo');
  assert.equal(answeredByWords(null, mine, names), null);
});
