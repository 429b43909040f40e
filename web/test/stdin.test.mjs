// Typing into a running command from the page: `stdin-input` appears while the command runs, a line sent with
// Enter reaches its `read`, and its output streams back.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
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
    { text: 'Who are you?', tool_calls: [{ tool: 'shell', arguments: { command: 'echo ready; read -r name; echo "hello $name"' } }] },
    { text: 'Greeted.' },
  ],
};

test('stdin typed in the page reaches the running command', async () => {
  await withConsole({ name: 'stdin', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await openScriptedSession(daemon, open, sessionId);
    await send(page, 'say hello');
    const tool = await waitForEntry(page, 'tool', 'read -r name');
    const output = tool.getByTestId('tool-output');
    await waitUntil('the command to be ready', async () => ((await output.textContent()) ?? '').includes('ready'));
    const input = page.getByTestId('stdin-input');
    await input.first().waitFor({ state: 'visible' });
    await screenshot(page, 'stdin-waiting');
    await input.first().fill('world');
    await input.first().press('Enter');
    await waitUntil('the command to greet', async () => ((await output.textContent()) ?? '').includes('hello world'));
    await waitForEntry(page, 'assistant', 'Greeted.');
    await waitForRunEnd(page);
    await waitUntil('stdin-input to go with the command', async () => (await page.getByTestId('stdin-input').count()) === 0 || !(await page.getByTestId('stdin-input').first().isVisible()));
    await screenshot(page, 'stdin-done');
    assert.ok(true);
  });
});
