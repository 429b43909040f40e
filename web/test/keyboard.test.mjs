// Keyboard only: from the session list to a sent prompt to an answered approval with Tab, Enter and Ctrl+Enter,
// never a click. Focus is visible where it lands (an outline or a box shadow).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { entry, screenshot, signIn, waitUntil, withConsole } from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'May I?', tool_calls: [{ tool: 'shell', arguments: { command: 'echo typed-by-keyboard' } }] },
    { text: 'Thanks.' },
  ],
};

/** Presses Tab until the focused element matches `selector` (itself or an ancestor); fails after `max` presses. */
async function tabTo(page, selector, what, max = 80) {
  for (let i = 0; i < max; i += 1) {
    await page.keyboard.press('Tab');
    const hit = await page.evaluate((selector) => Boolean(document.activeElement?.closest(selector)), selector);
    if (hit) return;
  }
  throw new Error(`Tab never reached ${what} (${selector}) in ${max} presses`);
}

/** Whether the focused element shows that it has focus. */
function focusShows(page) {
  return page.evaluate(() => {
    const style = getComputedStyle(document.activeElement);
    return (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0) || style.boxShadow !== 'none';
  });
}

test('a session, a prompt and an approval, with the keyboard only', async () => {
  await withConsole({ name: 'keyboard', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'ask' });
    const { page } = await open();
    await signIn(daemon, page);
    await page.locator(`[data-testid="session-item"][data-session-id="${sessionId}"]`).waitFor({ state: 'visible' });

    await tabTo(page, `[data-testid="session-item"][data-session-id="${sessionId}"]`, 'the session row');
    assert.ok(await focusShows(page), 'the focused session row shows its focus');
    await page.keyboard.press('Enter');
    await page.getByTestId('transcript').waitFor({ state: 'visible' });

    await tabTo(page, '[data-testid="prompt-input"]', 'the prompt');
    await page.keyboard.type('please run it');
    await page.keyboard.press('Control+Enter');
    const card = page.getByTestId('approval-card').first();
    await card.waitFor({ state: 'visible' });

    // The card's buttons arm a moment after it appears (so a click meant for something else cannot approve).
    await waitUntil('approve once to arm', () => card.getByTestId('approve-once').isEnabled());
    await tabTo(page, '[data-testid="approval-card"] [data-testid="approve-once"]', 'approve once');
    assert.ok(await focusShows(page), 'the focused button shows its focus');
    await screenshot(page, 'keyboard-approve-focused');
    await page.keyboard.press('Enter');
    await waitUntil('the card to go', async () => (await page.getByTestId('approval-card').count()) === 0);
    await waitUntil('the run to end', async () => (await entry(page, 'run-end').count()) === 1);
    assert.equal(await entry(page, 'assistant', 'Thanks.').count(), 1);
  });
});
