// Approvals in two browsers on one `ask` session: the card shows in both; answered in one, it disappears from the
// other. Approve once, then reject with feedback from the other browser. Both browsers see each other as present.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  chooseScriptedModel,
  lowContrastText,
  openSession,
  overflowsHorizontally,
  screenshot,
  send,
  signIn,
  waitForEntry,
  waitForRunEnd,
  waitUntil,
  withConsole,
} from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'I will run a command.', tool_calls: [{ tool: 'shell', arguments: { command: 'echo approved-and-ran > approved.txt; cat approved.txt' } }] },
    { text: 'Now another.', tool_calls: [{ tool: 'shell', arguments: { command: 'echo should-not-run > rejected.txt' } }] },
    { text: 'Understood, I will not.' },
  ],
};

const cards = (page) => page.getByTestId('approval-card');

test('an approval answered in one browser disappears from the other', async () => {
  await withConsole({ name: 'approvals', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'ask' });
    const one = await open();
    const two = await open({ viewport: { width: 390, height: 844 } });
    await signIn(daemon, one.page);
    await signIn(daemon, two.page);
    await openSession(one.page, sessionId);
    await openSession(two.page, sessionId);

    await chooseScriptedModel(one.page);
    await send(one.page, 'please run something');

    for (const { page } of [one, two]) {
      await cards(page).first().waitFor({ state: 'visible' });
      const text = await cards(page).first().textContent();
      assert.match(text, /echo approved-and-ran/, `the card shows the command: ${text}`);
      assert.ok(await cards(page).first().getAttribute('data-approval-id'), 'the card carries its approval id');
      for (const button of ['approve-once', 'approve-tree', 'reject']) {
        assert.equal(await cards(page).first().getByTestId(button).count(), 1, `the card has ${button}`);
      }
    }
    const firstId = await cards(one.page).first().getAttribute('data-approval-id');
    assert.equal(await cards(two.page).first().getAttribute('data-approval-id'), firstId);
    await screenshot(one.page, 'approval-card');
    await screenshot(two.page, 'approval-card-phone');
    assert.equal(await overflowsHorizontally(two.page), false, 'the phone-width page does not scroll sideways');
    assert.deepEqual(await lowContrastText(one.page), [], 'the approval card meets WCAG AA contrast');

    await cards(one.page).first().getByTestId('approve-once').click();
    await waitUntil('the card to disappear from browser 2', async () => (await two.page.locator(`[data-testid="approval-card"][data-approval-id="${firstId}"]`).count()) === 0);
    await waitUntil('the card to disappear from browser 1', async () => (await one.page.locator(`[data-testid="approval-card"][data-approval-id="${firstId}"]`).count()) === 0);
    const tool = await waitForEntry(two.page, 'tool', 'approved-and-ran');
    await waitUntil('the approved command output', async () => ((await tool.getByTestId('tool-output').textContent()) ?? '').includes('approved-and-ran'));

    // The second call: rejected with feedback from browser 2, gone from browser 1.
    await waitUntil('the second card in browser 1', async () => {
      const id = await cards(one.page).first().getAttribute('data-approval-id', { timeout: 500 });
      return id && id !== firstId;
    });
    const secondCard = cards(two.page).first();
    await waitUntil('the second card in browser 2', async () => (await secondCard.getAttribute('data-approval-id', { timeout: 500 })) !== firstId);
    const secondId = await secondCard.getAttribute('data-approval-id');
    await secondCard.getByTestId('reject-feedback').fill('not that file');
    await secondCard.getByTestId('reject').click();
    await waitUntil('the rejected card to disappear from browser 1', async () => (await one.page.locator(`[data-testid="approval-card"][data-approval-id="${secondId}"]`).count()) === 0);
    await waitForEntry(one.page, 'assistant', 'Understood, I will not.');
    await waitForRunEnd(one.page);
    await waitForRunEnd(two.page);
    assert.equal(daemon.exists('rejected.txt'), false, 'the rejected command never ran');
    assert.equal(daemon.exists('approved.txt'), true, 'the approved command ran');
    await screenshot(one.page, 'approvals-answered');
  });
});

test('each browser on a session sees the other in its presence list', async () => {
  await withConsole({ name: 'presence', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession();
    const one = await open();
    await signIn(daemon, one.page);
    await openSession(one.page, sessionId);
    const present = (page) => page.getByTestId('presence').getByTestId('presence-client');
    await waitUntil('browser 1 to list itself', async () => (await present(one.page).count()) >= 1);

    const two = await open();
    await signIn(daemon, two.page);
    await openSession(two.page, sessionId);
    for (const { page } of [one, two]) {
      await waitUntil('both browsers in the presence list', async () => (await present(page).count()) === 2);
      assert.match(await present(page).first().textContent(), /web console/i);
    }
    await screenshot(one.page, 'presence');

    await two.context.close();
    await waitUntil('browser 2 to leave browser 1\'s presence list', async () => (await present(one.page).count()) === 1);
  });
});
