// A run on local/scripted started from the page: the user's input, the assistant's text, the tool call and its
// shell output stream into the transcript while the run is still going (the command blocks until the test
// releases it), with ANSI colours rendered and stderr told apart from stdout.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  cspViolations,
  duplicatedSeqs,
  entries,
  entry,
  lowContrastText,
  openScriptedSession,
  openSession,
  screenshot,
  send,
  unlabelledControls,
  waitForEntry,
  waitForRunEnd,
  waitUntil,
  withConsole,
} from './harness.mjs';

const COMMAND =
  "printf 'first-line\\n'; printf '\\033[31mred-text\\033[0m\\n'; echo to-stderr >&2; " +
  'while [ ! -e release ]; do sleep 0.1; done; echo after-release';

const SCRIPT = {
  turns: [
    { text: 'Let me look around the project.', tool_calls: [{ tool: 'shell', arguments: { command: COMMAND } }] },
    { text: 'All done here.', delay_ms: 300 },
  ],
};

test('text and shell output stream into the page before the run ends', async () => {
  await withConsole({ name: 'streaming', script: SCRIPT }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await openScriptedSession(daemon, open, sessionId);
    await send(page, 'what is in here?');

    await waitForEntry(page, 'user', 'what is in here?');
    await waitForEntry(page, 'run-start');
    await waitForEntry(page, 'assistant', 'Let me look around the project.');
    const tool = await waitForEntry(page, 'tool', 'shell');
    await waitUntil('the tool entry to show its command', async () => (await tool.textContent()).includes('first-line'));
    const output = tool.getByTestId('tool-output');
    await waitUntil('stdout in tool-output', async () => (await output.textContent()).includes('first-line'));
    await waitUntil('colored stdout in tool-output', async () => (await output.textContent()).includes('red-text'));
    await waitUntil('stderr in tool-output', async () => (await output.textContent()).includes('to-stderr'));

    // The command is still blocked: all of that arrived while the run was active.
    assert.equal(daemon.exists('release'), false);
    assert.equal(await entry(page, 'run-end').count(), 0, 'no run-end yet');
    assert.equal(await page.getByTestId('cancel').isEnabled(), true, 'cancel is enabled while the run is active');
    await screenshot(page, 'streaming-running');
    assert.deepEqual(await unlabelledControls(page), [], 'every control of the running view has an accessible name');
    assert.deepEqual(await lowContrastText(page), [], 'text in the running view meets WCAG AA contrast');

    // ANSI colours are rendered: the red text is drawn in another colour than the plain line.
    const colors = await output.evaluate((root) => {
      const colorOf = (needle) => {
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          if (node.textContent.includes(needle)) return getComputedStyle(node.parentElement).color;
        }
        return null;
      };
      const markOf = (needle) => {
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          if (!node.textContent.includes(needle)) continue;
          const marks = [];
          for (let element = node.parentElement; element && element !== root.parentElement; element = element.parentElement) {
            marks.push(`${element.className}|${[...element.attributes].filter((a) => a.name.startsWith('data-')).map((a) => `${a.name}=${a.value}`).join(',')}|${getComputedStyle(element).color}`);
          }
          return marks.join(' < ');
        }
        return null;
      };
      return { plain: colorOf('first-line'), red: colorOf('red-text'), stdout: markOf('first-line'), stderr: markOf('to-stderr') };
    });
    assert.notEqual(colors.red, colors.plain, `ANSI red is rendered: ${JSON.stringify(colors)}`);
    assert.notEqual(colors.stderr, colors.stdout, `stderr is distinguishable from stdout: ${JSON.stringify(colors)}`);
    assert.equal(await output.evaluate((root) => root.textContent.includes('\u001b[')), false, 'no raw escapes');

    daemon.touch('release');
    await waitUntil('the output after release', async () => (await output.textContent()).includes('after-release'));
    await waitForEntry(page, 'assistant', 'All done here.');
    await waitForRunEnd(page);
    await waitUntil('cancel to be disabled after the run', async () => !(await page.getByTestId('cancel').isEnabled()));

    const list = await entries(page);
    assert.deepEqual(duplicatedSeqs(list), [], 'no event rendered twice');
    for (const item of list) assert.match(item.seq ?? '', /^\d+$/, `every entry has a numeric data-seq: ${JSON.stringify(item)}`);
    const seqs = list.map((item) => Number(item.seq));
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), 'entries are in event order');
    assert.equal(list.filter((item) => item.kind === 'assistant' && item.text.includes('All done here.')).length, 1);
    await screenshot(page, 'streaming-done');
    assert.deepEqual(cspViolations(page), []);
  });
});

const LOUD = {
  turns: [
    {
      text: 'Printing a lot.',
      tool_calls: [
        {
          tool: 'shell',
          arguments: {
            // About 340 KB of stdout, more than the 64 KiB per stream the log keeps, then a wait for the test.
            command:
              'i=0; while [ $i -lt 4000 ]; do echo "line-$i-$(printf %070d 0)"; i=$((i+1)); done; ' +
              'while [ ! -e release ]; do sleep 0.1; done; echo tail-marker',
          },
        },
      ],
    },
    { text: 'Printed.' },
  ],
};

test('a page opened in the middle of a long output shows what it missed as a gap', async () => {
  await withConsole({ name: 'output-gap', script: LOUD }, async ({ daemon, open }) => {
    const sessionId = await daemon.createSession({ mode: 'yolo' });
    const { page } = await openScriptedSession(daemon, open, sessionId);
    await send(page, 'print a lot');
    const live = (await waitForEntry(page, 'tool', 'line-')).getByTestId('tool-output');
    await waitUntil('all of the output live', async () => ((await live.textContent()) ?? '').includes('line-3999-'));

    // A page that comes later gets the log's first 64 KiB and the live tail; what lies between is a gap.
    await page.reload();
    await openSession(page, sessionId);
    const tool = await waitForEntry(page, 'tool', 'line-');
    const output = tool.getByTestId('tool-output');
    await waitUntil('the head and the tail of the output', async () => {
      const text = (await output.textContent()) ?? '';
      return text.includes('line-0-') && text.includes('line-3999-');
    });
    const gap = tool.getByTestId('output-gap');
    await gap.first().waitFor({ state: 'visible' });
    assert.match(await gap.first().textContent(), /\d+ bytes/, 'the gap says how much is missing');
    await screenshot(page, 'output-gap');
    daemon.touch('release');
    await waitUntil('the output after the gap', async () => ((await output.textContent()) ?? '').includes('tail-marker'));
    await waitForRunEnd(page);
  });
});
