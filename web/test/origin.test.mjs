// The console cookie authorizes `/ws` only for the daemon's own origin: a page on another origin, in the same
// browser that holds the cookie, cannot open the daemon's WebSocket, and raw upgrades say why with their status.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { request } from 'node:http';
import { randomBytes } from 'node:crypto';
import { consoleCookie, pageKey, signIn, withConsole, WAIT_MS } from './harness.mjs';

/** The status of a raw WebSocket upgrade of `url` with `headers` (101 when it is accepted). */
function upgradeStatus(url, headers) {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': randomBytes(16).toString('base64'),
        ...headers,
      },
      timeout: WAIT_MS,
    });
    req.on('upgrade', (response, socket) => {
      socket.destroy();
      resolve(response.statusCode);
    });
    req.on('response', (response) => {
      response.resume();
      resolve(response.statusCode);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer to the upgrade of ${url}`)));
    req.on('error', reject);
    req.end();
  });
}

/** In `page`, whether `new WebSocket(url, protocols)` opens ('open') or fails ('refused'). */
function tryWebSocket(page, url, protocols = []) {
  return page.evaluate(
    ([url, protocols]) =>
      new Promise((resolve) => {
        const socket = new WebSocket(url, protocols);
        socket.onopen = () => {
          socket.close();
          resolve('open');
        };
        socket.onerror = () => resolve('refused');
        socket.onclose = () => resolve('refused');
      }),
    [url, protocols],
  );
}

test('a foreign Origin is refused even with the console cookie', async () => {
  await withConsole({ name: 'origin' }, async ({ daemon, open }) => {
    const { context, page } = await open();
    await signIn(daemon, page);
    const cookie = await consoleCookie(context);
    assert.ok(cookie, 'signed in');
    const jar = `${cookie.name}=${cookie.value}`;
    const key = await pageKey(page);
    assert.ok(key, 'the page holds its key');
    const keyed = `troupe, troupe.console.${key}`;
    const ws = daemon.wsUrl.replace('ws:', 'http:');

    assert.equal(await upgradeStatus(ws, { Origin: daemon.origin, Cookie: jar, 'Sec-WebSocket-Protocol': keyed }), 101);
    assert.equal(
      await upgradeStatus(ws, { Origin: 'http://evil.example', Cookie: jar, 'Sec-WebSocket-Protocol': keyed }),
      403,
      'cookie and key from a foreign Origin',
    );
    assert.equal(await upgradeStatus(ws, { Origin: daemon.origin, Cookie: jar }), 401, 'the cookie without the key');
    assert.equal(await upgradeStatus(ws, { Origin: daemon.origin, 'Sec-WebSocket-Protocol': keyed }), 401, 'the key without the cookie');
    assert.equal(
      await upgradeStatus(ws, { Origin: daemon.origin, Cookie: `${cookie.name}=forged`, 'Sec-WebSocket-Protocol': keyed }),
      401,
      'a forged cookie',
    );

    // The page itself may open it (the positive control of the browser cases below).
    assert.equal(await tryWebSocket(page, daemon.wsUrl, ['troupe', `troupe.console.${key}`]), 'open');

    // A page on another origin of the same site (another port of 127.0.0.1): the browser sends the SameSite=Strict
    // cookie along, so only the Origin check stands between that page and the daemon.
    const evil = createServer((_, response) => {
      response.writeHead(200, { 'Content-Type': 'text/html' });
      response.end('<!doctype html><title>elsewhere</title><p>another origin</p>');
    });
    await new Promise((resolve) => evil.listen(0, '127.0.0.1', resolve));
    try {
      const other = await context.newPage();
      await other.goto(`http://127.0.0.1:${evil.address().port}/`);
      assert.equal(await tryWebSocket(other, daemon.wsUrl), 'refused');
      // Even one that somehow learnt the page key.
      assert.equal(await tryWebSocket(other, daemon.wsUrl, ['troupe', `troupe.console.${key}`]), 'refused');
      // And from another site altogether (localhost), which does not get the cookie.
      await other.goto(`http://localhost:${evil.address().port}/`);
      assert.equal(await tryWebSocket(other, daemon.wsUrl), 'refused');
    } finally {
      evil.close();
    }
  });
});
