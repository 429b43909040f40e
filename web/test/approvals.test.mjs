// Approvals in two browsers on one `ask` session: the card shows in both; answered in one, it disappears from the
// other. Approve once, then reject with feedback from the other browser. Both browsers see each other as present.
// A command of several lines holding a carriage return, bidi controls and an escape sequence is shown line by line
// with every control seen, in the card and its aria-label, and a long one is cut with a toggle that shows it whole.

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
    // On the phone the header (top bar and session header) leaves the transcript most of the screen: the
    // session's details fold behind a button that shows them.
    const headerBottom = () => two.page.locator('.session-header').evaluate((el) => el.getBoundingClientRect().bottom);
    const folded = await headerBottom();
    assert.ok(folded <= 844 * 0.22, `the phone's header ends at ${folded}px of 844`);
    assert.equal(await two.page.getByTestId('mode-select').isVisible(), false, 'the mode folds on a phone');
    await two.page.getByTestId('header-more').click();
    assert.equal(await two.page.getByTestId('mode-select').isVisible(), true, 'Details shows the mode');
    assert.equal(await two.page.getByTestId('header-more').getAttribute('aria-expanded'), 'true');
    await screenshot(two.page, 'phone-header-details');
    await two.page.getByTestId('header-more').click();
    assert.equal(await one.page.getByTestId('header-more').isVisible(), false, 'a wide screen shows its details always');
    assert.equal(await one.page.getByTestId('mode-select').isVisible(), true);
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

// 34 lines: a carriage return, a bidi override, an isolate and an escape sequence in the first two, then 32 more.
const HOSTILE = `ls\r\nrm -rf build #\u202e\u2066txt.sh\x1b[2J\n${Array.from({ length: 32 }, (_, i) => `echo step ${i + 1}\n`).join('')}`;
const HOSTILE_SCRIPT = { turns: [{ tool_calls: [{ tool: 'shell', arguments: { command: HOSTILE } }] }, { text: 'Not run.' }] };
// Anything a browser would act on or hide, other than the line breaks.
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

test('a command with several lines and controls is shown line by line with every control seen, and whole on demand', async () => {
  await withConsole({ name: 'approval-text', script: HOSTILE_SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'ask' });
    const { page } = await open();
    await signIn(daemon, page);
    await openSession(page, sessionId);
    await chooseScriptedModel(page);
    await send(page, 'run the script');

    const card = cards(page).first();
    await card.waitFor({ state: 'visible' });
    const label = await card.getAttribute('aria-label');
    assert.match(label, /^Approval: run ls⟨CR⟩ \[\+\d+ lines\]$/, `the label is one line and says more follow: ${label}`);
    const command = card.getByTestId('approval-command');
    const shown = (await command.textContent()).split('\n');
    assert.deepEqual(shown.slice(0, 2), ['ls⟨CR⟩', 'rm -rf build #⟨U+202E⟩⟨U+2066⟩txt.sh⟨ESC⟩[2J'], shown.join('\n'));
    assert.equal(shown.length, 24, `cut at 24 lines: ${shown.join('\n')}`);
    assert.equal(shown[23], 'echo step 22');
    // What is seen, line by line: the browser lays out each line as its own (no CR or bidi reordering).
    const rendered = (await command.innerText()).split('\n');
    assert.deepEqual(rendered.slice(0, 2), shown.slice(0, 2), 'the rendered lines are the shown ones');
    const cut = card.getByTestId('approval-command-cut');
    assert.match(await cut.textContent(), /^… 130 more bytes, 10 more lines Show whole command$/);
    const everything = `${label}\n${await card.textContent()}`;
    assert.ok(!INVISIBLE.test(everything.replaceAll('\n', '')), `nothing hidden: ${JSON.stringify(everything)}`);
    await screenshot(page, 'approval-card-controls');

    await card.getByTestId('show-whole-command').click();
    await waitUntil('the whole command', async () => (await command.textContent()).split('\n').length === 34);
    assert.equal((await command.textContent()).split('\n')[33], 'echo step 32');
    assert.equal(await card.getByTestId('approval-command-cut').count(), 0, 'nothing is left out any more');

    await card.getByTestId('reject-feedback').fill('not that');
    await waitUntil('the buttons to arm', async () => !(await card.getByTestId('reject').isDisabled()));
    await card.getByTestId('reject').click();
    await waitForEntry(page, 'assistant', 'Not run.');
    await waitForRunEnd(page);
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
