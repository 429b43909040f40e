// Images and PDFs from the page: attached with the attach button, pasted into the prompt and dropped on the
// composer, shown as removable chips, refused in words when of another type, sent with the prompt, and shown in the
// transcript (an image as a thumbnail read back from the daemon, a PDF by its name); the daemon's log names them.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { cspViolations, entry, openScriptedSession, screenshot, send, waitForEntry, waitForRunEnd, waitUntil, withConsole } from './harness.mjs';

// A real 1×1 PNG (a thumbnail must decode) and a minimal PDF.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');
const PDF = Buffer.from('%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n');

const SCRIPT = { turns: [{ text: 'I looked at your files.' }] };

/** Dispatches a paste (`paste`) or a drop (`drop`) of one file on `selector`, as a user's would arrive. */
async function deliverFile(page, selector, how, { name, type, base64 }) {
  await page.locator(selector).evaluate(
    (target, { how, name, type, base64 }) => {
      const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
      const transfer = new DataTransfer();
      transfer.items.add(new File([bytes], name, { type }));
      const event = how === 'paste'
        ? new ClipboardEvent('paste', { clipboardData: transfer, bubbles: true, cancelable: true })
        : new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true });
      target.dispatchEvent(event);
    },
    { how, name, type, base64: base64 },
  );
}

const chipNames = (page) => page.getByTestId('attachment-chip').evaluateAll((chips) => chips.map((chip) => chip.getAttribute('data-name')));

test('attach, paste and drop images and PDFs; the transcript shows them', async () => {
  await withConsole({ name: 'attachments', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession();
    const { page } = await openScriptedSession(daemon, open, sessionId);

    // The attach button's file input.
    await page.getByTestId('attach-input').setInputFiles([
      { name: 'screen.png', mimeType: 'image/png', buffer: PNG },
      { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('plain text') },
    ]);
    await waitUntil('the picked image as a chip', async () => (await chipNames(page)).includes('screen.png'));
    await waitUntil('the text file refused in words', async () =>
      /notes\.txt: Only PNG, JPEG, GIF, WebP images and PDFs can be attached/.test(await page.locator('.composer-status').textContent()),
    );
    // A pasted screenshot and a dropped PDF.
    await deliverFile(page, '[data-testid="prompt-input"]', 'paste', { name: 'image.png', type: 'image/png', base64: PNG.toString('base64') });
    await deliverFile(page, 'form.composer', 'drop', { name: 'spec.pdf', type: 'application/pdf', base64: PDF.toString('base64') });
    await waitUntil('three chips', async () => (await chipNames(page)).length === 3);
    assert.deepEqual(await chipNames(page), ['screen.png', 'pasted-2.png', 'spec.pdf']);
    await screenshot(page, 'attachments-pending');

    // One is taken back before sending.
    await page.getByRole('button', { name: 'Remove pasted-2.png' }).click();
    assert.deepEqual(await chipNames(page), ['screen.png', 'spec.pdf']);

    await send(page, 'what do these show?');
    await waitForEntry(page, 'assistant', 'I looked at your files.');
    await waitForRunEnd(page);
    assert.equal(await page.getByTestId('attachment-chip').count(), 0, 'the chips go once sent');

    const user = entry(page, 'user', 'what do these show?').first();
    const thumb = user.getByTestId('attached-thumb');
    await waitUntil('the image thumbnail to load', () => thumb.evaluate((img) => img.complete && img.naturalWidth === 1 && img.src.startsWith('data:image/png;base64,')));
    assert.match(await user.getByTestId('attached-file').nth(1).textContent(), /spec\.pdf \(\d+ bytes\)/);
    await screenshot(page, 'attachments-sent');

    // The log names both, stored by content.
    const log = readFileSync(path.join(daemon.dataDir, 'sessions', sessionId, 'events.jsonl'), 'utf8');
    const started = log.trim().split('\n').map((line) => JSON.parse(line)).find((event) => event.payload?.type === 'run_started');
    assert.deepEqual(started.payload.attachments.map((file) => [file.name, file.mime_type, file.size]), [['screen.png', 'image/png', PNG.length], ['spec.pdf', 'application/pdf', PDF.length]]);
    assert.deepEqual(readFileSync(path.join(daemon.dataDir, started.payload.attachments[0].path)), PNG);
    assert.deepEqual(cspViolations(page), []);
  });
});

test('@path completes in the session folder: a folder continues, an image is attached, a text file is inserted', async () => {
  await withConsole({ name: 'attachments-path', script: SCRIPT }, async ({ daemon, open }) => {
    mkdirSync(path.join(daemon.project, 'docs'));
    writeFileSync(path.join(daemon.project, 'docs', 'arch.png'), PNG);
    writeFileSync(path.join(daemon.project, 'notes.txt'), 'plain');
    const sessionId = await daemon.createSession();
    const { page } = await openScriptedSession(daemon, open, sessionId);
    const prompt = page.getByTestId('prompt-input');
    const offers = () => page.getByTestId('path-offer').allTextContents();

    await prompt.click();
    await prompt.pressSequentially('explain @do');
    await waitUntil('the folder offered', async () => (await offers()).join() === 'docs/');
    await screenshot(page, 'path-completion');
    await prompt.press('Tab');
    await waitUntil('the folder entered and its files offered', async () => (await prompt.inputValue()) === 'explain @docs/' && (await offers()).join() === 'arch.png');
    await prompt.press('Enter');
    await waitUntil('the image attached as a chip', async () => (await chipNames(page)).join() === 'arch.png');
    assert.equal(await prompt.inputValue(), 'explain ', 'the @word goes once the file is attached');

    await prompt.pressSequentially('and @no');
    await waitUntil('the text file offered', async () => (await offers()).join() === 'notes.txt');
    await page.getByTestId('path-offer').first().click();
    await waitUntil('its path inserted as text', async () => (await prompt.inputValue()) === 'explain and notes.txt');
    assert.equal(await page.getByTestId('path-completions').isHidden(), true);

    await page.getByTestId('send').click();
    await waitForEntry(page, 'assistant', 'I looked at your files.');
    const user = entry(page, 'user', 'explain and notes.txt').first();
    await waitUntil('the attached image shown', () => user.getByTestId('attached-thumb').evaluate((img) => img.complete && img.naturalWidth === 1));
    assert.deepEqual(cspViolations(page), []);
  });
});
