// What the transcript renders besides plain text: reasoning, markdown (rendered, and sanitized: no script or
// event handler from a model's text reaches the page), a file edit as a diff, a failed request's error with its
// diagnostic body, and a delegated child session nested under its parent in the session list.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  chooseScriptedModel,
  cspViolations,
  openSession,
  screenshot,
  send,
  signIn,
  waitForEntry,
  waitForRunEnd,
  waitUntil,
  withConsole,
} from './harness.mjs';

const HOSTILE = 'Here is **bold** and `code`. <img src=x onerror="window.__owned=1"> <script>window.__owned=2</script> [link](javascript:window.__owned=3)';

const SCRIPT = {
  turns: [
    {
      reasoning: 'I should edit the notes.',
      text: HOSTILE,
      tool_calls: [{ tool: 'edit_file', arguments: { path: 'notes.txt', old_string: 'beta', new_string: 'gamma' } }],
    },
    { text: 'Edited.' },
    { error: { kind: 'invalid_request', http_status: 400, message: 'the vendor refused the request', retryable: false } },
  ],
  by_input: { 'count the files': { turns: [{ text: 'There are three files.' }] } },
};

test('reasoning, sanitized markdown, an edit as a diff and an error', async () => {
  await withConsole({ name: 'transcript', script: SCRIPT }, async ({ daemon, open }) => {
    writeFileSync(path.join(daemon.project, 'notes.txt'), 'alpha\nbeta\n');
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await open();
    await signIn(daemon, page);
    await openSession(page, sessionId);
    await chooseScriptedModel(page);
    await send(page, 'edit the notes');

    await waitForEntry(page, 'reasoning', 'I should edit the notes.');
    const assistant = await waitForEntry(page, 'assistant', 'bold');
    await waitUntil('the markdown to be rendered', async () => (await assistant.locator('strong', { hasText: 'bold' }).count()) === 1);
    assert.equal(await assistant.locator('code', { hasText: 'code' }).count(), 1);
    assert.equal(await page.locator('[data-testid="transcript"] script').count(), 0, 'no script element from model text');
    assert.equal(await page.locator('[data-testid="transcript"] [onerror]').count(), 0, 'no event handler from model text');
    assert.equal(await page.locator('[data-testid="transcript"] a[href^="javascript:"]').count(), 0, 'no javascript: link');
    // Raw HTML in model text is shown as text, never parsed: not even the sanitizer's inert parse sees the handler
    // (Chromium reports a CSP refusal for a handler it merely parses, which the strict check at the end catches).
    assert.match(await assistant.textContent(), /<img src=x onerror="window.__owned=1">/, 'the tag is shown as text');

    const tool = await waitForEntry(page, 'tool', 'notes.txt');
    const diff = tool.getByTestId('diff');
    await diff.first().waitFor({ state: 'visible' });
    const diffText = await diff.first().textContent();
    assert.match(diffText, /beta/, `the diff shows the removed line: ${diffText}`);
    assert.match(diffText, /gamma/, `the diff shows the added line: ${diffText}`);
    await waitForEntry(page, 'assistant', 'Edited.');
    await waitForRunEnd(page, 1);
    await screenshot(page, 'transcript-diff');

    await send(page, 'now fail');
    const error = await waitForEntry(page, 'error', 'the vendor refused the request');
    assert.match(await error.textContent(), /invalid_request|400/, 'the error shows its kind or HTTP status');
    await waitForRunEnd(page, 2);
    await screenshot(page, 'transcript-error');
    assert.equal(await page.evaluate(() => window.__owned), undefined, 'nothing from the model ran');
    assert.deepEqual(cspViolations(page), []);
  });
});

const DELEGATING = {
  turns: [
    { tool_calls: [{ tool: 'delegate', arguments: { agent: 'helper', task: 'count the files' } }] },
    { text: 'The parent is done.' },
  ],
  by_input: { 'count the files': { turns: [{ text: 'There are three files.' }] } },
};

test('a delegated child session is nested under its parent', async () => {
  await withConsole(
    { name: 'delegation', script: DELEGATING, config: '[agents.helper]\nmodels = ["local/scripted"]\n' },
    async ({ daemon, open }) => {
      const sessionId = await daemon.createSession({ mode: 'yolo' });
      const { page } = await open();
      await signIn(daemon, page);
      await openSession(page, sessionId);
      await chooseScriptedModel(page);
      await send(page, 'delegate it');
      await waitForEntry(page, 'assistant', 'The parent is done.');
      await waitForRunEnd(page, 1);
      const child = page.getByTestId('session-child');
      await child.first().waitFor({ state: 'visible' });
      const childId = await child.first().getAttribute('data-session-id');
      assert.ok(childId && childId !== sessionId, `the child row names the child session: ${childId}`);
      // Roots only at the top level: the child is not a session-item of its own.
      assert.equal(await page.locator(`[data-testid="session-item"][data-session-id="${childId}"]`).count(), 0);
      await child.first().click();
      await waitForEntry(page, 'assistant', 'There are three files.');
      await screenshot(page, 'delegated-child');
    },
  );
});
