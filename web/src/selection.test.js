import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pickOf, samePick, selectionLabel, snapshotDefault } from './selection.js';
import { applyEvents, createSession } from './store.js';

const meta = { session_id: 's1', creation_selection: { agent: 'coder', model: { model: 'local/echo', variant: null }, preset: null } };

test('a session shows its creation selection until a run says otherwise', () => {
  const state = createSession(meta);
  assert.deepEqual(pickOf(state.lastSelection), { agent: 'coder', model: 'local/echo' });
  applyEvents(state, [{ seq: 1, run_id: 'r1', payload: { type: 'run_started', input: 'hi', selection: { agent: 'reviewer', model: { model: 'local/scripted' } } } }]);
  assert.deepEqual(pickOf(state.lastSelection), { agent: 'reviewer', model: 'local/scripted' });
});

test('no selection, a snapshot default, labels and equality', () => {
  assert.equal(pickOf(null), null);
  assert.equal(pickOf({ agent: '' }), null);
  assert.equal(snapshotDefault(null), null);
  assert.deepEqual(snapshotDefault({ agents: [{ agent: 'coder', models: [{ model: 'local/echo' }] }] }), { agent: 'coder', model: 'local/echo' });
  assert.equal(selectionLabel({ agent: 'coder', model: 'local/echo' }), 'coder · local/echo');
  assert.equal(selectionLabel(null), '');
  assert.ok(samePick({ agent: 'a', model: 'm' }, { agent: 'a', model: 'm' }));
  assert.ok(!samePick({ agent: 'a', model: 'm' }, { agent: 'a', model: 'n' }));
});
