// The MCP servers of config.toml in the console: the top bar's Tools button says one failed, and its panel lists
// each server with its state, the reason a server could not start, and the tools of the ready one.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { lowContrastText, screenshot, signIn, unlabelledControls, waitUntil, withConsole } from './harness.mjs';

const PROBE = fileURLToPath(new URL('../../examples/mcp/probe_server.py', import.meta.url));
const PYTHON = ['/usr/bin/python3', '/usr/local/bin/python3'].find((candidate) => existsSync(candidate)) ?? 'python3';

/** The servers as the panel lists them. */
function listed(page) {
  return page.locator('[data-testid="mcp-server"]').evaluateAll((nodes) =>
    nodes.map((node) => ({
      name: node.getAttribute('data-name'),
      state: node.querySelector('[data-testid="mcp-state"]').textContent,
      reason: node.querySelector('[data-testid="mcp-reason"]')?.textContent ?? null,
      tools: [...node.querySelectorAll('[data-testid="mcp-tool"]')].map((tool) => tool.textContent),
    })),
  );
}

test('the Tools panel shows each MCP server, why one failed, and the tools of the ready one', async () => {
  // The server script in a folder of its own, outside the data dir (which the sandbox denies).
  const dir = mkdtempSync(path.join(tmpdir(), 'troupe-web-mcp-'));
  copyFileSync(PROBE, path.join(dir, 'probe_server.py'));
  const config =
    `[mcp_servers.probe]\ncommand = ${JSON.stringify(PYTHON)}\nargs = [${JSON.stringify(path.join(dir, 'probe_server.py'))}]\n` +
    '[mcp_servers.broken]\ncommand = "/nonexistent/troupe-mcp-server"\n';
  try {
    await consoleWithServers(config);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

async function consoleWithServers(config) {
  await withConsole({ name: 'mcp', config }, async ({ daemon, open }) => {
    const { page } = await open();
    await signIn(daemon, page);
    const toggle = page.getByTestId('tools-toggle');
    await waitUntil('the Tools button to say a server failed', async () => /Tools · 1 failed/.test(await toggle.textContent()));
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    await toggle.focus();
    await page.keyboard.press('Enter');
    await page.getByTestId('tools-panel').waitFor({ state: 'visible' });
    assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
    await waitUntil('the probe server ready in the panel', async () => (await listed(page)).some((s) => s.name === 'probe' && s.state === 'ready'));
    const [broken, ready] = await listed(page);
    assert.equal(broken.name, 'broken');
    assert.equal(broken.state, 'failed');
    assert.match(broken.reason, /could not start `\/nonexistent\/troupe-mcp-server`/);
    assert.match(broken.reason, /No such file or directory/);
    assert.deepEqual(ready.tools.slice(0, 2), ['mcp__probe__echo echo', 'mcp__probe__hang hang'], JSON.stringify(ready));
    assert.equal(ready.reason, null);
    assert.deepEqual(await unlabelledControls(page), [], 'every control has an accessible name');
    assert.deepEqual(await lowContrastText(page), [], 'the panel meets WCAG AA contrast');
    await screenshot(page, 'mcp-panel');
    await page.keyboard.press('Escape');
    await page.getByTestId('tools-panel').waitFor({ state: 'hidden' });
    assert.ok(await toggle.evaluate((node) => node === document.activeElement), 'focus goes back to the button');
  });
}
