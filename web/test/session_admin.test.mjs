// Managing sessions from the page: a new session in a chosen directory, the cwd filter, rename, and the tree's
// permission mode (checked by what it does: after switching to `ask`, a command waits for approval).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chooseScriptedModel, screenshot, send, signIn, waitUntil, withConsole } from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'Checking.', tool_calls: [{ tool: 'shell', arguments: { command: 'echo mode-check' } }] },
    { text: 'Checked.' },
  ],
};

const MODES = ['ask', 'auto_approve', 'auto_approve_n', 'auto_approve_y', 'yolo'];

test('new session, cwd filter, rename and permission mode from the page', async () => {
  await withConsole({ name: 'session-admin', script: SCRIPT }, async ({ daemon, open }) => {
    const elsewhere = path.join(daemon.project, 'elsewhere');
    mkdirSync(elsewhere);
    const other = (await daemon.cli(['create', '--model', 'local/echo', '--cwd', elsewhere])).stdout.trim().split('\n').pop().trim();
    const { page } = await open();
    await signIn(daemon, page);
    const rows = page.locator('[data-testid="session-list"] [data-testid="session-item"]');
    await waitUntil('the CLI-created session in the list', async () => (await rows.count()) === 1);

    await chooseScriptedModel(page);
    await page.getByTestId('new-session-cwd').fill(daemon.project);
    await page.getByTestId('new-session').click();
    await waitUntil('the new session in the list', async () => (await rows.count()) === 2);
    const created = await waitUntil('the new session id', async () => {
      const ids = await rows.evaluateAll((nodes) => nodes.map((node) => node.getAttribute('data-session-id')));
      return ids.find((id) => id !== other);
    });
    const sessions = JSON.parse((await daemon.cli(['sessions', '--json'])).stdout);
    const record = sessions.find((session) => session.session_id === created);
    assert.equal(record?.cwd, daemon.project, 'the page created the session in the directory it was given');
    await page.getByTestId('transcript').waitFor({ state: 'visible' });

    await page.getByTestId('cwd-filter').fill('elsewhere');
    await waitUntil('the filter to leave only the other directory', async () => {
      const ids = await rows.evaluateAll((nodes) => nodes.filter((n) => n.offsetParent !== null).map((n) => n.getAttribute('data-session-id')));
      return ids.length === 1 && ids[0] === other;
    });
    await page.getByTestId('cwd-filter').fill('');
    await waitUntil('both sessions again', async () => (await rows.count()) === 2);
    await page.locator(`[data-testid="session-item"][data-session-id="${created}"]`).click();

    await page.getByTestId('rename-button').click();
    await page.getByTestId('rename-input').fill('Renamed in the browser');
    await page.getByTestId('rename-input').press('Enter');
    await waitUntil('the header to show the new title', async () => (await page.getByTestId('session-title').textContent()).includes('Renamed in the browser'));
    await waitUntil('the daemon to hold the new title', async () => {
      const list = JSON.parse((await daemon.cli(['sessions', '--json'])).stdout);
      return list.find((session) => session.session_id === created)?.title === 'Renamed in the browser';
    });

    const select = page.getByTestId('mode-select');
    const values = await select.evaluate((element) => [...element.options].map((option) => option.value));
    assert.deepEqual([...values].sort(), MODES, 'the mode picker offers exactly the protocol\'s mode names');
    assert.equal(await select.inputValue(), 'auto_approve', 'a new tree starts in the default mode');
    await select.selectOption('ask');
    // `echo` runs without asking in the default mode; in `ask` it waits for an answer.
    await waitUntil('the mode to be ask', async () => (await select.inputValue()) === 'ask');
    await send(page, 'check the mode');
    await page.getByTestId('approval-card').first().waitFor({ state: 'visible' });
    assert.match(await page.getByTestId('approval-card').first().textContent(), /echo mode-check/);
    await screenshot(page, 'session-admin');
    await page.getByTestId('approval-card').first().getByTestId('approve-tree').click();
    await waitUntil('the run to end', async () => (await page.locator('[data-testid="entry"][data-kind="run-end"]').count()) === 1);
  });
});
