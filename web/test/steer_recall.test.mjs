// Steering from the page while a run is active: a steer is admitted, recalled with `recall`, and a later one is
// submitted at the run's next boundary (the scripted command blocks until the test releases it).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  entry,
  openScriptedSession,
  screenshot,
  send,
  waitForEntry,
  waitForRunEnd,
  waitUntil,
  withConsole,
} from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'Working on it.', tool_calls: [{ tool: 'shell', arguments: { command: 'while [ ! -e release ]; do sleep 0.1; done; echo released' } }] },
    { text: 'I read your steer.' },
  ],
};

const stateOf = (page, text) => entry(page, 'steer', text).first().getAttribute('data-state', { timeout: 500 });

test('steer and recall from the page', async () => {
  await withConsole({ name: 'steer', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await openScriptedSession(daemon, open, sessionId);
    await send(page, 'start working');
    await waitForEntry(page, 'tool', 'release');
    await waitUntil('cancel to be enabled (the run is active)', () => page.getByTestId('cancel').isEnabled());

    await send(page, 'first steer, to be recalled');
    await waitUntil('the first steer admitted', async () => (await stateOf(page, 'first steer')) === 'admitted');
    await waitUntil('recall to be enabled', () => page.getByTestId('recall').isEnabled());
    await screenshot(page, 'steer-admitted');
    await page.getByTestId('recall').click();
    await waitUntil('the first steer recalled', async () => (await stateOf(page, 'first steer')) === 'recalled');
    await waitUntil('recall to be disabled with nothing left to recall', async () => !(await page.getByTestId('recall').isEnabled()));

    await send(page, 'second steer, to be submitted');
    await waitUntil('the second steer admitted', async () => (await stateOf(page, 'second steer')) === 'admitted');
    daemon.touch('release');
    await waitUntil('the second steer submitted at the boundary', async () => (await stateOf(page, 'second steer')) === 'submitted');
    await waitForEntry(page, 'assistant', 'I read your steer.');
    await waitForRunEnd(page);
    assert.equal(await stateOf(page, 'first steer'), 'recalled', 'a recalled steer stays recalled');
    assert.equal(await entry(page, 'steer', 'first steer').count(), 1, 'the recalled steer is shown once');
    await screenshot(page, 'steer-recalled-and-submitted');
  });
});
