// Cancelling from the page: the run's blocked command is killed, the run ends as cancelled in the transcript,
// and the cancel button is disabled again.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  chooseScriptedModel,
  entry,
  openSession,
  screenshot,
  signIn,
  waitForEntry,
  waitForRunEnd,
  waitUntil,
  withConsole,
} from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'This will take a while.', tool_calls: [{ tool: 'shell', arguments: { command: 'echo waiting; while true; do sleep 0.1; done' } }] },
    { text: 'unreachable' },
  ],
};

test('cancel stops the active run', async () => {
  await withConsole({ name: 'cancel', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await open();
    await signIn(daemon, page);
    await openSession(page, sessionId);
    assert.equal(await page.getByTestId('cancel').isEnabled(), false, 'cancel is disabled while no run is active');
    await chooseScriptedModel(page);
    // Ctrl+Enter sends, as the send button does.
    await page.getByTestId('prompt-input').fill('wait forever');
    await page.getByTestId('prompt-input').press('Control+Enter');
    const tool = await waitForEntry(page, 'tool', 'while true');
    await waitUntil('the command to print', async () => ((await tool.getByTestId('tool-output').textContent()) ?? '').includes('waiting'));
    await waitUntil('cancel to be enabled', () => page.getByTestId('cancel').isEnabled());
    await page.getByTestId('cancel').click();
    await waitForRunEnd(page);
    const end = await entry(page, 'run-end').first().textContent();
    assert.match(end, /cancel/i, `the run-end entry says it was cancelled: ${end}`);
    await waitUntil('cancel to be disabled', async () => !(await page.getByTestId('cancel').isEnabled()));
    assert.equal(await entry(page, 'assistant', 'unreachable').count(), 0);
    const { stdout } = await daemon.cli(['runs', sessionId]);
    assert.match(stdout, /cancel/i, `the daemon recorded the run as cancelled: ${stdout}`);
    await screenshot(page, 'cancelled');
  });
});
