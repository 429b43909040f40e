// What a write changes, as the daemon counts it: an approval of a `write_file` that overwrites a two-line file with
// one line shows the real diff (-2 +1, the lines it replaces), its tree grant says it allows this file, and once
// the write ran the transcript shows the result's diff, not the arguments' content as if the file were new.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { chooseScriptedModel, openSession, screenshot, send, signIn, waitForEntry, waitForRunEnd, waitUntil, withConsole } from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'Rewriting it.', tool_calls: [{ tool: 'write_file', arguments: { path: 'notes.txt', content: 'three\n' } }] },
    { text: 'Rewritten.' },
  ],
};

test("a write's approval and its transcript entry show the daemon's diff", async () => {
  await withConsole({ name: 'diffs', script: SCRIPT }, async ({ daemon, open }) => {
    writeFileSync(path.join(daemon.project, 'notes.txt'), 'one\ntwo\n');
    const sessionId = await daemon.createSession({ mode: 'ask' });
    const { page } = await open();
    await signIn(daemon, page);
    await openSession(page, sessionId);
    await chooseScriptedModel(page);
    await send(page, 'rewrite notes');

    const card = page.getByTestId('approval-card').first();
    await card.waitFor({ state: 'visible' });
    const diff = card.getByTestId('diff');
    assert.equal(await diff.getByTestId('diff-added').textContent(), '+1');
    assert.equal(await diff.getByTestId('diff-removed').textContent(), '-2');
    const body = await diff.locator('.diff-body').textContent();
    assert.match(body, /- one\n- two\n\+ three/, `the card shows the lines replaced: ${body}`);
    const hint = await card.getByTestId('approve-tree').textContent();
    assert.match(hint, /this file/, `a write's tree grant is for its file: ${hint}`);
    assert.doesNotMatch(hint, /this command/);
    await screenshot(page, 'approval-write-diff');

    await card.getByTestId('approve-once').click();
    await waitForRunEnd(page);
    assert.equal(readFileSync(path.join(daemon.project, 'notes.txt'), 'utf8'), 'three\n');
    const tool = await waitForEntry(page, 'tool', 'notes.txt');
    await waitUntil('the result diff in the transcript', async () => (await tool.getByTestId('diff-removed').count()) === 1);
    assert.equal(await tool.getByTestId('diff-added').textContent(), '+1');
    assert.equal(await tool.getByTestId('diff-removed').textContent(), '-2');
    const caption = await tool.locator('figcaption').textContent();
    assert.ok(caption.startsWith(path.join(daemon.project, 'notes.txt')), `the whole path: ${caption}`);
    const resultText = await tool.locator('pre.result').textContent();
    assert.match(resultText, /wrote 6 bytes/);
    assert.doesNotMatch(resultText, /--- a\//, `the diff is drawn once, not again as text: ${resultText}`);
    await screenshot(page, 'transcript-write-diff');
  });
});
