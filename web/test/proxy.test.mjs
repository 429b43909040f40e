// The console through the real nginx of deploy/ over TLS, at the site's root and under its /agent/ prefix: the
// sign-in link of `troupe open --public-url`, a Secure cookie (the proxy says the browser came over HTTPS), and a
// scripted run streaming into the page over the proxied WebSocket. The page's URLs are all relative, so nothing
// here knows the prefix but the link.
//
// tests/suite/web_console.rs starts nginx in front of 127.0.0.1:$TROUPE_TEST_PORT and sets TROUPE_PROXY_ORIGIN
// (https://localhost:<nginx port>).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  chooseScriptedModel,
  consoleCookie,
  cspViolations,
  openSession,
  screenshot,
  send,
  signIn,
  waitForEntry,
  waitForRunEnd,
  waitUntil,
  withConsole,
} from './harness.mjs';

const PORT = Number(process.env.TROUPE_TEST_PORT);
const ORIGIN = process.env.TROUPE_PROXY_ORIGIN;

const SCRIPT = {
  turns: [
    { text: 'Through the proxy.', tool_calls: [{ tool: 'shell', arguments: { command: 'echo proxied-output' } }] },
    { text: 'Done behind the proxy.' },
    { text: 'Again through the proxy.', tool_calls: [{ tool: 'shell', arguments: { command: 'echo proxied-output' } }] },
    { text: 'Done behind the proxy.' },
  ],
};

test('the console works through nginx at the root and under /agent/', async () => {
  assert.ok(PORT && ORIGIN, 'run through cargo test (TROUPE_TEST_PORT, TROUPE_PROXY_ORIGIN)');
  await withConsole({ name: 'proxy', script: SCRIPT, config: 'trust_proxy = true\n', port: PORT }, async ({ daemon, open }) => {
    for (const [index, prefix] of ['/', '/agent/'].entries()) {
      const publicUrl = `${ORIGIN}${prefix}`;
      const sessionId = await daemon.createSession({ mode: 'yolo' });
      const { context, page } = await open({ ignoreHTTPSErrors: true });
      await signIn(daemon, page, publicUrl);
      assert.equal(page.url(), publicUrl, 'the page is at the proxied address');
      const cookie = await consoleCookie(context);
      assert.equal(cookie?.secure, true, 'the cookie is Secure behind TLS');
      await openSession(page, sessionId);
      await chooseScriptedModel(page);
      await send(page, `through ${prefix}`);
      const tool = await waitForEntry(page, 'tool', 'proxied-output');
      await waitUntil('the output through the proxy', async () => ((await tool.getByTestId('tool-output').textContent()) ?? '').includes('proxied-output'));
      await waitForEntry(page, 'assistant', 'Done behind the proxy.');
      await waitForRunEnd(page, 1);
      assert.deepEqual(cspViolations(page), []);
      await screenshot(page, `behind-nginx-${index === 0 ? 'root' : 'agent'}`);
      await context.close();
    }
  });
});
