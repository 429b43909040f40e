// Unit tests of the reduction (node --test; not part of the bundle).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyEvents, applyOutputNotice, canRecall, createSession, editDiff, stdinTarget } from './store.js';

const SID = 'session-1';
const meta = (extra = {}) => ({ session_id: SID, title: null, creation_selection: { agent: 'default', model: { model: 'local/echo', variant: null } }, skipped_events: [], ...extra });
let seq = 0;
const ev = (payload, run_id = 'run-1') => ({ session_id: SID, run_id, seq: ++seq, timestamp: '2026-03-01T10:00:00Z', origin: 'user', payload });
const b64 = (text) => Buffer.from(text).toString('base64');

function run(state, events) {
  applyEvents(state, events);
  return state.entries.map((e) => `${e.kind}:${e.seq}`);
}

test('a run: one entry per event that shows, unique seqs in order, text streamed into one entry', () => {
  seq = 0;
  const state = createSession(meta());
  run(state, [
    ev({ type: 'session_created', origin: { type: 'root' }, cwd: '/p', selection: {} }, null),
    ev({ type: 'run_started', client_run_id: 'c', selection: { agent: 'default', model: { model: 'local/echo' } }, input: 'hi', fallback_index: 0 }),
    ev({ type: 'model_attempt_started', attempt_id: 'a1', model: 'local/echo', fallback_index: 0, retry_ordinal: 0 }),
    ev({ type: 'text_delta', attempt_id: 'a1', text: 'Hel' }),
    ev({ type: 'text_delta', attempt_id: 'a1', text: 'lo' }),
    ev({ type: 'model_turn_committed', attempt_id: 'a1', model: 'local/echo', fallback_index: 0, text: 'Hello', tool_calls: [] }),
    ev({ type: 'model_usage_recorded', attempt_id: 'a1', model: 'local/echo', agent: 'default', input_tokens: 10, output_tokens: 2 }),
    ev({ type: 'run_completed', final_text: 'Hello' }),
  ]);
  const kinds = state.entries.map((e) => e.kind);
  assert.deepEqual(kinds, ['user', 'run-start', 'assistant', 'run-end']);
  const seqs = state.entries.map((e) => e.seq);
  assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b));
  assert.equal(state.entries[2].text, 'Hello');
  assert.equal(state.entries[2].streaming, false);
  assert.equal(state.entries[3].usage.input, 10);
  assert.equal(state.activeRun, null);
});

test('events at or below the cursor are not applied twice', () => {
  seq = 0;
  const state = createSession(meta());
  const events = [ev({ type: 'run_started', selection: {}, input: 'x', fallback_index: 0 }), ev({ type: 'user_input_admitted', input_id: 'i1', input: 'steer' })];
  applyEvents(state, events);
  applyEvents(state, events);
  assert.equal(state.entries.length, 2);
  assert.ok(canRecall(state));
});

test('steers: admitted, then recalled or submitted', () => {
  seq = 0;
  const state = createSession(meta());
  applyEvents(state, [
    ev({ type: 'run_started', selection: {}, input: 'x', fallback_index: 0 }),
    ev({ type: 'user_input_admitted', input_id: 'i1', input: 'one' }),
    ev({ type: 'user_input_recalled', input_id: 'i1', input: 'one' }),
    ev({ type: 'user_input_admitted', input_id: 'i2', input: 'two' }),
    ev({ type: 'user_input_submitted', input_id: 'i2', input: 'two' }),
  ]);
  const steers = state.entries.filter((e) => e.kind === 'steer').map((e) => `${e.text}:${e.state}`);
  assert.deepEqual(steers, ['one:recalled', 'two:submitted']);
  assert.equal(canRecall(state), false);
});

test('tool output: live and durable bytes overlap and show once; a hole is a gap', () => {
  seq = 0;
  const state = createSession(meta());
  applyEvents(state, [
    ev({ type: 'run_started', selection: {}, input: 'x', fallback_index: 0 }),
    ev({ type: 'tool_call_started', tool_call_id: 't1', tool: 'shell', arguments: { command: 'ls' }, action: 'execute', resource: 'ls' }),
  ]);
  assert.equal(stdinTarget(state), 't1');
  applyOutputNotice(state, 'events.tool_output_delta', { session_id: SID, tool_call_id: 't1', stream: 'stdout', byte_offset: 0, data: b64('abc') });
  applyEvents(state, [ev({ type: 'tool_call_progress', tool_call_id: 't1', stream: 'stdout', offset: 0, text: 'abcdef' })]);
  applyOutputNotice(state, 'events.tool_output_delta', { session_id: SID, tool_call_id: 't1', stream: 'stderr', byte_offset: 0, data: b64('err') });
  applyOutputNotice(state, 'events.tool_output_gap', { session_id: SID, tool_call_id: 't1', stream: 'stdout', next_offset: 10 });
  applyOutputNotice(state, 'events.tool_output_delta', { session_id: SID, tool_call_id: 't1', stream: 'stdout', byte_offset: 10, data: b64('Z') });
  const tool = state.entries.find((e) => e.kind === 'tool');
  assert.deepEqual(tool.chunks.map((c) => (c.gap ? `gap(${c.stream})` : `${c.stream}:${c.text}`)), ['stdout:abcdef', 'stderr:err', 'gap(stdout)', 'stdout:Z']);
  // A UTF-8 character split across two deltas is decoded whole.
  const euro = Buffer.from('€');
  applyOutputNotice(state, 'events.tool_output_delta', { session_id: SID, tool_call_id: 't1', stream: 'stdout', byte_offset: 11, data: euro.subarray(0, 1).toString('base64') });
  applyOutputNotice(state, 'events.tool_output_delta', { session_id: SID, tool_call_id: 't1', stream: 'stdout', byte_offset: 12, data: euro.subarray(1).toString('base64') });
  assert.equal(tool.chunks.at(-1).text, 'Z€');
});

test('approvals: asked, then answered; the call gets its entry when it starts', () => {
  seq = 0;
  const state = createSession(meta());
  const approval = { approval_id: 'ap1', tool_call_id: 't1', session_id: SID, revision: 1, status: 'pending', operation: { tool: 'shell', action: 'execute', resource: 'ls', summary: 'run `ls`' } };
  applyEvents(state, [ev({ type: 'run_started', selection: {}, input: 'x', fallback_index: 0 }), ev({ type: 'approval_requested', approval })]);
  assert.ok(state.approvals.has('ap1'));
  applyEvents(state, [
    ev({ type: 'approval_user_decision_recorded', approval_id: 'ap1', revision: 2, decision: 'reject', answered_by: 'user', client_response_id: 'r', feedback: 'no' }),
    ev({ type: 'approval_finalized', approval_id: 'ap1', revision: 3, status: 'rejected' }),
    ev({ type: 'tool_call_terminated', tool_call_id: 't1', result: { status: 'denied', output: 'rejected: no' } }),
  ]);
  assert.equal(state.approvals.size, 0);
  const kinds = state.entries.map((e) => e.kind);
  assert.deepEqual(kinds, ['user', 'approval', 'tool']);
  assert.equal(state.entries[1].decision, 'reject');
  assert.equal(state.entries[2].approvalId, 'ap1');
});

test('a failed run ends with a run-end entry carrying the error and its diagnostic body', () => {
  seq = 0;
  const state = createSession(meta());
  applyEvents(state, [
    ev({ type: 'run_started', selection: {}, input: 'x', fallback_index: 0 }),
    ev({ type: 'run_failed', error: 'model refused', model_error: { kind: 'auth', message: 'bad key', retryable: false, stage: 'request', response_body: '{"error":"bad key"}' } }),
  ]);
  const end = state.entries.at(-1);
  assert.equal(end.kind, 'run-end');
  assert.equal(end.status, 'failed');
  assert.equal(end.error.modelError.response_body, '{"error":"bad key"}');
});

test('skipped log lines become gap entries in seq order', () => {
  seq = 0;
  const state = createSession(meta({ skipped_events: [{ seq: 2, line: null, reason: 'invalid JSON' }] }));
  applyEvents(state, [ev({ type: 'session_created' }, null)]);
  seq = 2;
  applyEvents(state, [ev({ type: 'run_started', selection: {}, input: 'x', fallback_index: 0 })]);
  assert.deepEqual(state.entries.map((e) => `${e.kind}:${e.seq}`), ['gap:2', 'user:3']);
});

test('edit diffs from edit_file and write_file arguments', () => {
  assert.deepEqual(editDiff('edit_file', { path: 'a', old_string: 'x', new_string: 'y' }), { path: 'a', before: 'x', after: 'y' });
  // What the file held is not in write_file's arguments: no before, so no made-up counts.
  assert.deepEqual(editDiff('write_file', { path: 'a', content: 'y' }), { path: 'a', content: 'y' });
  assert.equal(editDiff('shell', { command: 'ls' }), null);
});

test("a write's entry shows the approval's diff, then the result's, counted by the daemon", () => {
  seq = 0;
  const state = createSession(meta());
  const unified = '--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,2 +1 @@\n-one\n-two\n+three\n';
  const operation = { tool: 'write_file', action: 'write', resource: '/w/a.txt', summary: 'write', diff: { path: '/w/a.txt', kind: 'modified', lines_added: 1, lines_removed: 2, bytes_before: 8, bytes_after: 6, unified } };
  run(state, [
    ev({ type: 'approval_requested', approval: { approval_id: 'ap1', tool_call_id: 'c1', operation } }),
    ev({ type: 'tool_call_started', tool_call_id: 'c1', tool: 'write_file', arguments: { path: 'a.txt', content: 'three\n' }, action: 'write', resource: '/w/a.txt' }),
  ]);
  const entry = state.byKey.get('tool-c1');
  assert.equal(entry.fileDiff.lines_removed, 2);
  assert.deepEqual(entry.diff, { path: 'a.txt', content: 'three\n' });
  run(state, [ev({ type: 'tool_call_terminated', tool_call_id: 'c1', result: { status: 'success', output: 'wrote 6 bytes to a.txt (-2 +1)', display: `wrote 6 bytes to a.txt (-2 +1)\n${unified}` } })]);
  assert.deepEqual([entry.resultDiff.lines_added, entry.resultDiff.lines_removed], [1, 2]);
});

test('a run on a sticky fallback names the model it was asked for on its header; a fallback is an entry of its own', () => {
  seq = 0;
  const state = createSession(meta());
  run(state, [
    ev({ type: 'run_started', client_run_id: 'c', selection: { agent: 'chain', model: { model: 'local/echo', variant: null } }, requested_model: { model: 'openai/gpt-4o', variant: null }, input: 'hi', fallback_index: 1, model_chain: [{ model: 'local/echo' }, { model: 'local/scripted' }] }),
    ev({ type: 'model_attempt_started', attempt_id: 'a1', model: 'local/echo', fallback_index: 1, retry_ordinal: 0 }),
    ev({ type: 'model_fallback', from: 'local/echo', to: 'local/scripted', from_fallback_index: 1, to_fallback_index: 2, attempts_on_from: 1, error: { kind: 'auth', message: 'no' } }),
  ]);
  const start = state.entries.find((e) => e.kind === 'run-start');
  assert.equal(start.stickyFrom, 'openai/gpt-4o');
  assert.equal(start.model, 'local/echo');
  assert.equal(state.lastSelection.model.model, 'openai/gpt-4o', 'the session keeps asking for its model');
  const fallback = state.entries.find((e) => e.kind === 'error');
  assert.match(fallback.title, /local\/echo failed; falling back to local\/scripted/);
  // The model asked for: nothing to say.
  const plain = createSession(meta());
  applyEvents(plain, [ev({ type: 'run_started', client_run_id: 'd', selection: { agent: 'chain', model: { model: 'local/echo', variant: null } }, requested_model: { model: 'local/echo', variant: null }, input: 'x', fallback_index: 0 })]);
  assert.equal(plain.activeRun.stickyFrom, null);
});

test('an input and a steer keep the files they attached', () => {
  const state = createSession(meta());
  const file = { path: 'artifacts/ab.png', mime_type: 'image/png', name: 'a.png', size: 3 };
  applyEvents(state, [
    ev({ type: 'run_started', selection: {}, input: 'look', fallback_index: 0, attachments: [file] }),
    ev({ type: 'user_input_admitted', input_id: 'i1', input: 'and this', attachments: [file] }),
    ev({ type: 'user_input_submitted', input_id: 'i2', input: 'plain' }),
  ]);
  const [user, steer, plain] = state.entries;
  assert.deepEqual(user.attachments, [file]);
  assert.deepEqual(steer.attachments, [file]);
  assert.deepEqual(plain.attachments, []);
});
