// Signing in and out: the one-time login URL of `troupe open`, the cookie it becomes, the session list it opens,
// the code refused on its second use, sign-out, and the signed-out screen when the cookie stops being valid.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  consoleCookie,
  consoleSessionStatus,
  cspViolations,
  pageKey,
  RECONNECT_MS,
  screenshot,
  signIn,
  lowContrastText,
  unlabelledControls,
  withConsole,
} from './harness.mjs';

test('a login URL becomes an HttpOnly SameSite=Strict cookie and shows the session list', async () => {
  await withConsole({ name: 'sign-in' }, async ({ daemon, open }) => {
    const first = await daemon.createSession({ model: 'local/echo' });
    const second = await daemon.createSession({ model: 'local/echo' });
    const { context, page } = await open();

    const url = await daemon.signInUrl();
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/login\?code=[^&]+$/, url);
    // Opening the link (as a link-preview bot would) must not use the code up.
    const preview = await fetch(url);
    assert.equal(preview.status, 200);
    await page.goto(url);
    assert.equal(await consoleCookie(context), undefined, 'GET /login sets no cookie');
    await screenshot(page, 'login-page');
    const response = page.waitForResponse((r) => r.url().endsWith('/login') && r.request().method() === 'POST');
    await page.getByRole('button', { name: /sign in/i }).click();
    const posted = await response;
    assert.equal(posted.status(), 303, 'POST /login answers 303 See Other');
    assert.match((await posted.headerValue('set-cookie')) ?? '', /^troupe_console(_[A-Za-z0-9]+)?=/);
    // The page key rides in the redirect's fragment, which no browser sends to a server.
    const location = (await posted.headerValue('location')) ?? '';
    const handed = /^\.\/#console-key=([A-Za-z0-9_-]{16,128})$/.exec(location);
    assert.ok(handed, `303 to ./ with the page key in the fragment: ${location}`);
    await page.getByTestId('app').waitFor({ state: 'visible' });
    await page.waitForURL(daemon.base);
    assert.equal(await pageKey(page), handed[1], 'the page keeps the key in localStorage');
    assert.equal(new URL(page.url()).hash, '', 'and takes it out of the address bar');

    const cookie = await consoleCookie(context);
    assert.ok(cookie, 'the troupe_console cookie is set');
    assert.equal(cookie.httpOnly, true, 'HttpOnly');
    assert.equal(cookie.sameSite, 'Strict', 'SameSite=Strict');
    assert.equal(cookie.path, '/');
    assert.equal(cookie.secure, false, 'no Secure flag on plain http to 127.0.0.1');
    assert.equal(await page.evaluate(() => document.cookie.includes('troupe_console')), false, 'scripts cannot read it');

    for (const id of [first, second]) {
      await page.locator(`[data-testid="session-item"][data-session-id="${id}"]`).waitFor({ state: 'visible' });
    }
    // Most recent first.
    const order = await page
      .locator('[data-testid="session-list"] [data-testid="session-item"]')
      .evaluateAll((rows) => rows.map((row) => row.getAttribute('data-session-id')));
    assert.ok(order.indexOf(second) < order.indexOf(first), `most recent first: ${order}`);

    const session = await page.request.get(new URL('console/session', daemon.base).href, {
      headers: { 'X-Troupe-Console-Key': handed[1] },
    });
    assert.equal(session.status(), 200);
    assert.ok(Date.parse((await session.json()).expires_at) > Date.now(), 'expires_at is in the future');
    assert.equal(await consoleSessionStatus(page, daemon), 401, 'the cookie alone is not a sign-in');
    assert.equal(await consoleSessionStatus(page, daemon, 'A'.repeat(43)), 401, 'nor the cookie with another key');
    await screenshot(page, 'session-list');
    // The list is live: a session created elsewhere shows up without a reload.
    const third = await daemon.createSession({ model: 'local/echo' });
    await page.locator(`[data-testid="session-item"][data-session-id="${third}"]`).waitFor({ state: 'visible' });
    assert.deepEqual(cspViolations(page), [], 'the page runs under its CSP without violations');
    assert.deepEqual(await unlabelledControls(page), [], 'every control has an accessible name');
    assert.deepEqual(await lowContrastText(page), [], 'text in the session list meets WCAG AA contrast');
  });
});

test('a login code is refused on its second use', async () => {
  await withConsole({ name: 'code-reuse' }, async ({ daemon, open }) => {
    const one = await open();
    const url = await signIn(daemon, one.page);

    const two = await open();
    await two.page.goto(url);
    const response = two.page.waitForResponse((r) => r.url().endsWith('/login') && r.request().method() === 'POST');
    await two.page.getByRole('button', { name: /sign in/i }).click();
    assert.equal((await response).status(), 401);
    await two.page.getByText(/already used/i).waitFor({ state: 'visible' });
    await two.page.getByText(/troupe open/).first().waitFor({ state: 'visible' });
    assert.equal(await consoleCookie(two.context), undefined, 'no cookie for a used code');
    await screenshot(two.page, 'login-code-reused');

    // Straight to the form's endpoint too, without a browser: a post that does not say it came from the console's
    // own origin is refused before its code is looked at (403); one that does is refused for the used code (401).
    const code = new URL(url).searchParams.get('code');
    const anonymous = await fetch(new URL('login', daemon.base), {
      method: 'POST',
      body: new URLSearchParams({ code }),
      redirect: 'manual',
    });
    assert.equal(anonymous.status, 403);
    assert.equal(anonymous.headers.get('set-cookie'), null);
    const own = { Origin: new URL(daemon.base).origin };
    const again = await fetch(new URL('login', daemon.base), {
      method: 'POST',
      headers: own,
      body: new URLSearchParams({ code }),
      redirect: 'manual',
    });
    assert.equal(again.status, 401);
    assert.equal(again.headers.get('set-cookie'), null);
    const unknown = await fetch(new URL('login', daemon.base), {
      method: 'POST',
      headers: own,
      body: new URLSearchParams({ code: 'not-a-code' }),
      redirect: 'manual',
    });
    assert.equal(unknown.status, 401);
  });
});

test('sign-out clears the cookie and shows the signed-out page', async () => {
  await withConsole({ name: 'sign-out' }, async ({ daemon, open }) => {
    const { context, page } = await open();
    await signIn(daemon, page);
    const key = await pageKey(page);
    assert.equal(await consoleSessionStatus(page, daemon, key), 200);
    await page.getByTestId('sign-out').click();
    await page.getByText(/troupe open/).first().waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('app').count(), 0, 'the console app is gone');
    const cookie = await consoleCookie(context);
    assert.ok(!cookie || cookie.value === '', `the cookie is cleared: ${JSON.stringify(cookie)}`);
    assert.equal(await consoleSessionStatus(page, daemon, key), 401, 'the sign-in is over at the daemon too');
    assert.equal(await pageKey(page), null, 'the page forgot its key');
    await screenshot(page, 'signed-out-page');
    // The signed-out page is what `/` serves without a cookie, even after a reload.
    await page.reload();
    await page.getByText(/troupe open/).first().waitFor({ state: 'visible' });
  });
});

test('signing out in one tab signs out the other tabs of that browser', async () => {
  await withConsole({ name: 'sign-out-tabs' }, async ({ daemon, open }) => {
    const { context, page } = await open();
    await signIn(daemon, page);
    const other = await context.newPage();
    await other.goto(daemon.base);
    await other.getByTestId('app').waitFor({ state: 'visible' });
    await page.getByTestId('sign-out').click();
    // The daemon closes the WebSockets that cookie opened; the other tab learns it is signed out.
    await other.getByTestId('signed-out').waitFor({ state: 'visible', timeout: RECONNECT_MS });
    await screenshot(other, 'signed-out-other-tab');
  });
});

test('a page whose cookie stopped being valid shows the signed-out screen, not the offline banner', async () => {
  await withConsole({ name: 'cookie-gone' }, async ({ daemon, open }) => {
    const { context, page } = await open();
    await signIn(daemon, page);
    // Losing the cookie while the page is open, then a restart that drops the WebSocket: the page's reconnect is
    // refused, `/console/session` says 401, and the page must say "signed out" rather than retry forever.
    await context.clearCookies();
    await daemon.restart();
    await page.getByTestId('signed-out').waitFor({ state: 'visible', timeout: RECONNECT_MS });
    await screenshot(page, 'signed-out-screen');
  });
});
