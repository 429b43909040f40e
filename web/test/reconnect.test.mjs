// A daemon restart under an open page: the connection-banner shows while the daemon is down, the page reconnects
// by itself, resumes from its cursor (a run that happened while it was away appears), and no event is rendered
// twice or lost.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  RECONNECT_MS,
  duplicatedSeqs,
  entries,
  openScriptedSession,
  screenshot,
  send,
  waitForEntry,
  waitForRunEnd,
  withConsole,
} from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'The first answer, before the restart.' },
    { text: 'The second answer, while the page was away.' },
    { text: 'The third answer, after the reconnect.' },
  ],
};

const count = (list, kind, text) => list.filter((item) => item.kind === kind && item.text.includes(text)).length;

test('the page reconnects after a daemon restart without duplicated or lost lines', async () => {
  await withConsole({ name: 'reconnect', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await openScriptedSession(daemon, open, sessionId);
    assert.equal(await page.getByTestId('connection-banner').isVisible(), false, 'no banner while connected');

    await send(page, 'first question');
    await waitForEntry(page, 'assistant', 'The first answer');
    await waitForRunEnd(page, 1);
    const before = await entries(page);

    await daemon.stop();
    const banner = page.getByTestId('connection-banner');
    await banner.waitFor({ state: 'visible' });
    assert.match(await banner.textContent(), /offline|reconnect|connect/i);
    await screenshot(page, 'offline-banner');

    // A run while the page is away: the page must pick it up from its cursor after reconnecting.
    await daemon.restart();
    await daemon.cli(['run', '--session', sessionId, 'second question'], { timeoutMs: 60_000 });
    await banner.waitFor({ state: 'hidden', timeout: RECONNECT_MS });
    await waitForEntry(page, 'assistant', 'The second answer', RECONNECT_MS);
    await waitForRunEnd(page, 2);

    // And a live one after the reconnect, from the page.
    await send(page, 'third question');
    await waitForEntry(page, 'assistant', 'The third answer');
    await waitForRunEnd(page, 3);

    const after = await entries(page);
    assert.deepEqual(duplicatedSeqs(after), [], 'no data-seq rendered twice');
    const seqsAfter = new Set(after.map((item) => item.seq));
    const lost = before.filter((item) => !seqsAfter.has(item.seq));
    assert.deepEqual(lost, [], 'every entry from before the restart is still there');
    for (const [kind, text] of [
      ['user', 'first question'],
      ['user', 'second question'],
      ['user', 'third question'],
      ['assistant', 'The first answer'],
      ['assistant', 'The second answer'],
      ['assistant', 'The third answer'],
    ]) {
      assert.equal(count(after, kind, text), 1, `${kind} "${text}" shown exactly once`);
    }
    assert.equal(after.filter((item) => item.kind === 'run-end').length, 3, 'three run-end entries');
    const seqs = after.map((item) => Number(item.seq));
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), 'entries in event order');
    await screenshot(page, 'reconnected');
  });
});
