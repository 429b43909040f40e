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

import { refusalAdvice, unusable } from './views/pickers.js';
import { failureAdvice } from './selection.js';

const snapshot = (generation, openaiConnected = false) => ({
  providers: [
    { provider_id: 'local', name: 'Local', kind: 'local', connected: true, auth_state: 'not_required', generation },
    { provider_id: 'openai', name: 'OpenAI', kind: 'openai', connected: openaiConnected, auth_state: openaiConnected ? 'configured' : 'missing', generation: 0 },
  ],
  models: [
    { model: 'local/echo', name: 'Echo', provider_id: 'local' },
    { model: 'local/scripted', name: 'Scripted', provider_id: 'local' },
    { model: 'openai/gpt-4o', name: 'GPT-4o', provider_id: 'openai' },
  ],
});
const providersOf = (s) => new Map(s.providers.map((p) => [p.provider_id, p]));

test('a model is unusable as the daemon judges it: provider not connected, or local/scripted without a script', () => {
  const none = snapshot(0);
  const [echo, scripted, gpt] = none.models;
  assert.equal(unusable(echo, providersOf(none)), null);
  assert.equal(unusable(scripted, providersOf(none)), 'no script connected');
  assert.equal(unusable(gpt, providersOf(none)), 'OpenAI not connected');
  const both = snapshot(1, true);
  assert.equal(unusable(scripted, providersOf(both)), null);
  assert.equal(unusable(gpt, providersOf(both)), null);
  assert.equal(unusable({ model: 'x/y', provider_id: 'x' }, providersOf(both)), 'provider x unknown');
  // A snapshot that says it per model is taken at its word.
  assert.equal(unusable({ ...echo, usable: false, reason: 'quota' }, providersOf(both)), 'quota');
});

test('a refused model says what to do in the console', () => {
  assert.equal(refusalAdvice('local/echo', snapshot(0)), null);
  assert.match(refusalAdvice('local/scripted', snapshot(0)), /Model menu.*troupe connect local --script/);
  assert.match(refusalAdvice('openai/gpt-4o', snapshot(0)), /OpenAI is not connected.*troupe connect openai/);
  assert.equal(refusalAdvice('local/scripted', null), null);
  assert.match(failureAdvice('every model failed; local/scripted has no script: connect the `local` provider with setup_values.script set'), /Model menu/);
  assert.match(failureAdvice('the provider `openai` is not connected; connect it with provider.connect'), /troupe connect openai/);
  assert.equal(failureAdvice('rate limited'), null);
});
