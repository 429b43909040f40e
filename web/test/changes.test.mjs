// The Changes view (troupe's `session.diff` and `session.undo`), over the real wire: two runs write files; the view
// lists them newest first with their diffs and counts; "Undo this run" (by keyboard) removes the file the newest run
// created, on disk; undoing the older run after the file was edited by hand is refused with the file named, and
// "Undo anyway" puts it back as it was before the run.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { lowContrastText, openScriptedSession, screenshot, send, unlabelledControls, waitForRunEnd, waitUntil, withConsole } from './harness.mjs';

const SCRIPT = {
  turns: [
    { text: 'Rewriting it.', tool_calls: [{ tool: 'write_file', arguments: { path: 'notes.txt', content: 'three\n' } }] },
    { text: 'Rewritten.' },
    { text: 'Adding one.', tool_calls: [{ tool: 'write_file', arguments: { path: 'fresh.txt', content: 'fresh\n' } }] },
    { text: 'Added.' },
  ],
};

/** The run articles of the Changes view, in page order: run id, heading text and diff captions. */
function shownRuns(page) {
  return page.locator('[data-testid="change-run"]').evaluateAll((nodes) =>
    nodes.map((node) => ({
      runId: node.getAttribute('data-run-id'),
      heading: node.querySelector('h3').textContent,
      files: [...node.querySelectorAll('[data-testid="diff"] .diff-path')].map((caption) => caption.textContent),
    })),
  );
}

test('the Changes view shows each run’s diff and undoes a run, and anyway after a refusal', async () => {
  await withConsole({ name: 'changes', script: SCRIPT }, async ({ daemon, open }) => {
    const notes = path.join(daemon.project, 'notes.txt');
    const fresh = path.join(daemon.project, 'fresh.txt');
    writeFileSync(notes, 'one\ntwo\n');
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await openScriptedSession(daemon, open, sessionId);
    await send(page, 'rewrite notes');
    await waitForRunEnd(page, 1);
    await send(page, 'add a file');
    await waitForRunEnd(page, 2);
    assert.equal(readFileSync(fresh, 'utf8'), 'fresh\n');

    // Keyboard: the header's Changes button opens the view in place of the transcript.
    await page.getByTestId('changes-toggle').focus();
    await page.keyboard.press('Enter');
    await page.getByTestId('changes').waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('changes-toggle').getAttribute('aria-pressed'), 'true');
    assert.equal(await page.getByTestId('transcript').isVisible(), false, 'the view takes the transcript’s place');
    await waitUntil('two runs in the Changes view', async () => (await shownRuns(page)).length === 2);
    const [newest, older] = await shownRuns(page);
    assert.deepEqual(newest.files, [fresh], `the newest run first: ${JSON.stringify(newest)}`);
    assert.deepEqual(older.files, [notes], `then the older one: ${JSON.stringify(older)}`);
    assert.match(newest.heading, /\+1 -0 · 1 file/, newest.heading);
    assert.match(older.heading, /\+1 -2 · 1 file/, older.heading);
    const olderRun = page.locator(`[data-testid="change-run"][data-run-id="${older.runId}"]`);
    const body = await olderRun.locator('.diff-body').textContent();
    assert.match(body, /- one\n- two\n\+ three/, `the lines the run replaced: ${body}`);
    assert.equal(await olderRun.getByTestId('diff-added').textContent(), '+1');
    assert.equal(await olderRun.getByTestId('diff-removed').textContent(), '-2');
    assert.deepEqual(await unlabelledControls(page), [], 'every control of the view has an accessible name');
    assert.deepEqual(await lowContrastText(page), [], 'the view meets WCAG AA contrast');
    await screenshot(page, 'changes-view');

    // Undo the newest run with the keyboard: the file it created is removed.
    const newestRun = page.locator(`[data-testid="change-run"][data-run-id="${newest.runId}"]`);
    await newestRun.getByTestId('undo-run').focus();
    await page.keyboard.press('Enter');
    const outcome = newestRun.getByTestId('undo-outcome');
    await waitUntil('the undo’s answer', async () => /Undone: 1 file/.test(await outcome.textContent()));
    assert.match(await outcome.textContent(), /fresh\.txt removed \(the run created it\)/);
    assert.equal(existsSync(fresh), false, 'the file the run created is gone');
    await newestRun.getByTestId('run-undone').waitFor({ state: 'visible' });
    assert.equal(await newestRun.getByTestId('undo-run').count(), 0, 'an undone run offers no second undo');
    assert.ok(await outcome.evaluate((node) => node === document.activeElement), 'focus moves to the answer');

    // The older run's file was edited by hand since: refused, the file named, nothing changed; then anyway.
    writeFileSync(notes, 'edited by hand\n');
    await olderRun.getByTestId('undo-run').click();
    const refused = olderRun.getByTestId('undo-outcome');
    await waitUntil('the refusal', async () => (await olderRun.getByTestId('conflict-file').count()) === 1);
    assert.match(await olderRun.getByTestId('conflict-file').textContent(), /notes\.txt changed since the run/);
    assert.match(await refused.textContent(), /Not undone: nothing was changed/);
    assert.equal(readFileSync(notes, 'utf8'), 'edited by hand\n', 'a refused undo changes nothing');
    assert.deepEqual(await unlabelledControls(page), [], 'Undo anyway has an accessible name');
    await screenshot(page, 'changes-conflict');
    await olderRun.getByTestId('undo-force').click();
    await waitUntil('the forced undo’s answer', async () => /Undone: 1 file/.test(await olderRun.getByTestId('undo-outcome').textContent()));
    assert.match(await olderRun.getByTestId('undo-outcome').textContent(), /notes\.txt restored/);
    assert.equal(readFileSync(notes, 'utf8'), 'one\ntwo\n', 'the file is as before the run');

    // Escape goes back to the transcript, focus on the Changes button.
    await page.keyboard.press('Escape');
    await page.getByTestId('transcript').waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('changes').isVisible(), false);
    assert.ok(await page.getByTestId('changes-toggle').evaluate((node) => node === document.activeElement));
  });
});
