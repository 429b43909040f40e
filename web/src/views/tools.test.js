import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buttonWords, troubled } from './tools.js';
import { forceCanHelp } from './changes.js';

test('the Tools button says when MCP servers are not working', () => {
  assert.equal(buttonWords(undefined), 'Tools');
  assert.equal(buttonWords([{ name: 'a', state: 'ready' }, { name: 'b', state: 'disabled' }]), 'Tools');
  assert.equal(buttonWords([{ name: 'a', state: 'failed' }, { name: 'b', state: 'restarting' }, { name: 'c', state: 'failed' }]), 'Tools · 2 failed, 1 restarting');
  assert.deepEqual(troubled([{ name: 'a', state: 'failed' }, { name: 'b', state: 'starting' }]).map((s) => s.name), ['a']);
});

test('"Undo anyway" is offered only when force could change something', () => {
  assert.equal(forceCanHelp([{ path: '/a', reason: 'changed_since' }]), true);
  assert.equal(forceCanHelp([{ path: '/a', reason: 'refused' }, { path: '/b', reason: 'not_recorded' }]), true);
  assert.equal(forceCanHelp([{ path: '/a', reason: 'refused' }]), false);
  assert.equal(forceCanHelp(undefined), false);
});
