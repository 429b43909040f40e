// The browser tests' harness: the real daemon as a child process (`troupe serve` on a free port and a fresh data
// dir), the CLI for setup (`connect local --script`, `create`, `mode`, `open --json`), and headless Debian chromium
// driven by playwright-core. Every wait is bounded and polls its condition; a failure says what it waited for.
//
// Run by tests/suite/web_console.rs, which sets TROUPE_BIN (the troupe binary cargo built) and
// TROUPE_TEST_OUTPUT (target/test-output/web-console/<test>: screenshots and the daemon's log go there).

import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, closeSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

/** Upper bound of any single wait: generous, CI machines are shared and slow. */
export const WAIT_MS = 30_000;
/** How long a reconnecting page may take to notice a restarted daemon (its backoff may have grown meanwhile). */
export const RECONNECT_MS = 45_000;

const BIN = process.env.TROUPE_BIN;
const OUTPUT = process.env.TROUPE_TEST_OUTPUT ?? path.join(tmpdir(), 'troupe-web-console-output');
export const CHROMIUM = process.env.TROUPE_CHROMIUM ?? '/usr/bin/chromium';

/** The test's output folder (screenshots, logs), created on first use. */
export function outputDir() {
  mkdirSync(OUTPUT, { recursive: true });
  return OUTPUT;
}

/** Polls `condition` (sync or async) every 50 ms until it returns a truthy value, which it returns. */
export async function waitUntil(what, condition, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (;;) {
    try {
      const value = await condition();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${lastError}` : ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A TCP port free on 127.0.0.1 right now (the daemon binds it a moment later). */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Runs `program args` to completion (bounded), collecting stdout and stderr. */
export function run(program, args, { cwd, env, timeoutMs = WAIT_MS, input } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`\`${program} ${args.join(' ')}\` took longer than ${timeoutMs} ms\n${stdout}${stderr}`));
    }, timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
    // A program that exits without reading its stdin closes the pipe first: EPIPE then is no failure.
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? '');
  });
}

/** The daemon as a child process: started, restarted on the same port and data dir, stopped. */
export class Daemon {
  /** Starts `troupe serve` on a fresh data dir and a free port and waits until `/readyz` answers 200. */
  static async start(name = 'daemon', config = '', { port } = {}) {
    if (!BIN) throw new Error('TROUPE_BIN is not set: run these tests through `cargo test web_console`');
    const root = mkdtempSync(path.join(tmpdir(), 'troupe-web-'));
    const daemon = new Daemon(root, port ?? (await freePort()), name, config);
    await daemon.#spawn();
    return daemon;
  }

  constructor(root, port, name, config = '') {
    this.root = root;
    this.dataDir = path.join(root, 'data');
    /** The sessions' working directory, kept apart from the data dir (which tools may never touch). */
    this.project = path.join(root, 'project');
    mkdirSync(this.dataDir, { recursive: true });
    mkdirSync(this.project, { recursive: true });
    // Titles from a model would take the scripted model's turns: off, as in the Rust suite.
    writeFileSync(path.join(this.dataDir, 'config.toml'), `${config}\n[titles]\nauto = false\n`);
    this.port = port;
    this.name = name;
    this.child = null;
    this.starts = 0;
  }

  /** The console's address: what a browser opens. */
  get base() {
    return `http://127.0.0.1:${this.port}/`;
  }

  get origin() {
    return `http://127.0.0.1:${this.port}`;
  }

  get wsUrl() {
    return `ws://127.0.0.1:${this.port}/ws`;
  }

  async #spawn() {
    this.starts += 1;
    const log = path.join(outputDir(), `${this.name}-${this.starts}.log`);
    const fd = openSync(log, 'w');
    const env = { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'info' };
    for (const key of ['TROUPE_TOKEN', 'TROUPE_URL', 'TROUPE_HOME']) delete env[key];
    const child = spawn(
      BIN,
      ['serve', '--data-dir', this.dataDir, '--listen', `127.0.0.1:${this.port}`],
      { env, stdio: ['ignore', fd, fd] },
    );
    closeSync(fd);
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    let exit;
    this.exited.then((status) => (exit = status));
    await waitUntil(`the daemon to answer /readyz on ${this.base} (log: ${log})`, async () => {
      if (exit) throw new Error(`the daemon exited (${JSON.stringify(exit)}); see ${log}`);
      const response = await fetch(new URL('readyz', this.base), { signal: AbortSignal.timeout(2000) });
      return response.status === 200;
    });
  }

  /** SIGTERM, then SIGKILL when it has not exited within the wait. */
  async stop() {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    let timer;
    const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve('timeout'), WAIT_MS)));
    const outcome = await Promise.race([this.exited, timeout]);
    // A pending timer would keep node's event loop (and so the test file) alive until it fires.
    clearTimeout(timer);
    if (outcome === 'timeout') {
      child.kill('SIGKILL');
      await this.exited;
    }
    this.child = null;
  }

  /** Stops the daemon and starts it again on the same port and data dir. */
  async restart() {
    await this.stop();
    await this.#spawn();
  }

  /** Stops the daemon and removes its folders. */
  async dispose() {
    await this.stop();
    rmSync(this.root, { recursive: true, force: true });
  }

  /** `troupe ARGS` as a client of this daemon, in the project dir; throws with its output when it fails. */
  async cli(args, { allowFailure = false, timeoutMs = WAIT_MS, input } = {}) {
    const env = { ...process.env, TROUPE_HOME: this.dataDir, TROUPE_URL: this.wsUrl, NO_COLOR: '1' };
    delete env.TROUPE_TOKEN;
    const result = await run(BIN, args, { cwd: this.project, env, timeoutMs, input });
    if (result.code !== 0 && !allowFailure) {
      throw new Error(`\`troupe ${args.join(' ')}\` failed (${result.code}):\n${result.stdout}${result.stderr}`);
    }
    return result;
  }

  /** Writes `script` (the local/scripted format of the README) and connects it as the local provider's. */
  async connectScript(script) {
    const file = path.join(this.root, 'script.json');
    writeFileSync(file, JSON.stringify(script, null, 2));
    await this.cli(['connect', 'local', '--script', file]);
    return file;
  }

  /** A new session on local/scripted in the project dir, with the tree's permission `mode` when given. */
  async createSession({ model = 'local/scripted', mode } = {}) {
    const { stdout } = await this.cli(['create', '--model', model]);
    const id = stdout.trim().split('\n').pop().trim();
    if (mode) await this.cli(['mode', id, mode]);
    return id;
  }

  /** A fresh one-time sign-in URL from `troupe open --json` (under `publicUrl`, a proxy's address, when given). */
  async signInUrl(publicUrl) {
    const { stdout } = await this.cli(['open', '--json', ...(publicUrl ? ['--public-url', publicUrl] : [])]);
    const answer = JSON.parse(stdout);
    if (typeof answer.url !== 'string' || typeof answer.expires_at !== 'string') {
      throw new Error(`troupe open --json printed ${stdout}`);
    }
    return answer.url;
  }

  /** A file in the project dir (a scripted command waits on one to be released). */
  touch(name) {
    writeFileSync(path.join(this.project, name), '');
  }

  exists(name) {
    return existsSync(path.join(this.project, name));
  }
}

/** Headless Debian chromium. */
export async function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    timeout: WAIT_MS,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** A new "browser" (its own cookie jar) whose page records console messages, page errors and CSP violations. */
export async function newPage(browser, { viewport = { width: 1280, height: 900 }, ignoreHTTPSErrors = false } = {}) {
  // ignoreHTTPSErrors: a proxy's certificate from the test's own CA, which chromium does not know.
  const context = await browser.newContext({ viewport, ignoreHTTPSErrors });
  context.setDefaultTimeout(WAIT_MS);
  const page = await context.newPage();
  page.consoleLog = [];
  page.on('console', (message) => page.consoleLog.push(`${message.type()}: ${message.text()}`));
  page.on('pageerror', (error) => page.consoleLog.push(`pageerror: ${error.message}`));
  return { context, page };
}

/** What the page's console said that a strict CSP refused. */
export function cspViolations(page) {
  return page.consoleLog.filter((line) => /Content Security Policy|Refused to (load|execute|apply)/i.test(line));
}

/**
 * Opens a fresh sign-in URL in `page`, presses "Sign in" and waits for the console's app root; `publicUrl`: the
 * console's address through a proxy (e.g. https://localhost:PORT/agent/).
 */
export async function signIn(daemon, page, publicUrl) {
  const url = await daemon.signInUrl(publicUrl);
  const home = new URL(publicUrl ?? daemon.base).pathname;
  await page.goto(url);
  await page.getByRole('button', { name: /sign in/i }).click();
  await page.waitForURL((current) => current.pathname === home && !current.search.includes('code='));
  await page.getByTestId('app').waitFor({ state: 'visible' });
  return url;
}

/** Clicks the session's row in the list and waits for its transcript. */
export async function openSession(page, sessionId) {
  const row = page.locator(`[data-testid="session-item"][data-session-id="${sessionId}"]`);
  await row.first().waitFor({ state: 'visible' });
  await row.first().click();
  await page.getByTestId('transcript').waitFor({ state: 'visible' });
}

/** Picks local/scripted in the model picker (the page's default may be another model); fails when it cannot. */
export async function chooseScriptedModel(page) {
  const picker = page.getByTestId('model-picker');
  // The options come from the runtime snapshot, which may arrive after the picker is drawn.
  const value = await waitUntil('a usable local/scripted in the model picker (its script is connected)', () =>
    picker.evaluate((select) => {
      const option = [...select.options].find(
        (o) => !o.disabled && (o.value.includes('local/scripted') || o.text.includes('local/scripted')),
      );
      return option ? option.value : null;
    }, null, { timeout: 1000 }),
  );
  await picker.selectOption(value);
}

/**
 * A new browser (`open` from withConsole) signed in, on `sessionId`, with local/scripted picked: where most tests
 * start. Returns what `open` returned.
 */
export async function openScriptedSession(daemon, open, sessionId) {
  const browser = await open();
  await signIn(daemon, browser.page);
  await openSession(browser.page, sessionId);
  await chooseScriptedModel(browser.page);
  return browser;
}

/** Types `text` into the composer and presses `send`. */
export async function send(page, text) {
  await page.getByTestId('prompt-input').fill(text);
  await page.getByTestId('send').click();
}

/** The transcript's entries as `{seq, kind, text, state}`, in page order. */
export async function entries(page) {
  return page.locator('[data-testid="transcript"] [data-testid="entry"]').evaluateAll((nodes) =>
    nodes.map((node) => ({
      seq: node.getAttribute('data-seq'),
      kind: node.getAttribute('data-kind'),
      state: node.getAttribute('data-state'),
      text: node.textContent,
    })),
  );
}

/** The entry of `kind` whose text contains `text` (a Playwright locator). */
export function entry(page, kind, text) {
  const locator = page.locator(`[data-testid="transcript"] [data-testid="entry"][data-kind="${kind}"]`);
  return text === undefined ? locator : locator.filter({ hasText: text });
}

/** Waits until the transcript has an entry of `kind` containing `text`. */
export async function waitForEntry(page, kind, text, timeout = WAIT_MS) {
  const locator = entry(page, kind, text).first();
  await locator.waitFor({ state: 'attached', timeout });
  return locator;
}

/** Waits until the run has ended in the page: a `run-end` entry, after `count` earlier ones. */
export async function waitForRunEnd(page, count = 1, timeout = WAIT_MS) {
  await waitUntil(`${count} run-end entries in the transcript`, async () => (await entry(page, 'run-end').count()) >= count, timeout);
}

/** Saves a screenshot of the page under the test's output folder. */
export async function screenshot(page, name) {
  await page.screenshot({ path: path.join(outputDir(), `${name}.png`), fullPage: true });
}

/**
 * The page key the console keeps in its origin's localStorage: the second half of a sign-in beside the cookie
 * (handed over in the sign-in redirect's fragment, offered at /ws as the subprotocol `troupe.console.<key>` and at
 * console/session as `X-Troupe-Console-Key`). `page` must be on the daemon's origin.
 */
export async function pageKey(page) {
  return page.evaluate(() => localStorage.getItem('troupe.console.key'));
}

/** `GET console/session` with the browser's cookies, and the page key when given: its status. */
export async function consoleSessionStatus(page, daemon, key) {
  const headers = key ? { 'X-Troupe-Console-Key': key } : {};
  return (await page.request.get(new URL('console/session', daemon.base).href, { headers })).status();
}

/** Visible form controls and buttons with no accessible name (a label, aria-label, aria-labelledby or text). */
export async function unlabelledControls(page) {
  return page.evaluate(() => {
    const named = (element) => {
      if (element.getAttribute('aria-label')?.trim()) return true;
      const labelledBy = element.getAttribute('aria-labelledby');
      if (labelledBy && labelledBy.split(/\s+/).some((id) => document.getElementById(id)?.textContent.trim())) return true;
      if (element.labels && [...element.labels].some((label) => label.textContent.trim())) return true;
      if (element.tagName === 'BUTTON' && element.textContent.trim()) return true;
      return Boolean(element.getAttribute('title')?.trim());
    };
    return [...document.querySelectorAll('button, input:not([type=hidden]), select, textarea')]
      .filter((element) => element.offsetParent !== null && !named(element))
      .map((element) => element.outerHTML.slice(0, 160));
  });
}

/**
 * Visible text whose contrast with its background is under WCAG AA (4.5:1, or 3:1 for large text); disabled
 * controls are exempt, as WCAG has them. The background is the nearest mostly opaque one up the tree.
 */
export async function lowContrastText(page) {
  return page.evaluate(() => {
    const parse = (color) => {
      const match = color.match(/rgba?\(([^)]+)\)/);
      if (!match) return null;
      const parts = match[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return { r: parts[0], g: parts[1], b: parts[2], a: parts.length > 3 ? parts[3] : 1 };
    };
    const luminance = ({ r, g, b }) => {
      const channel = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
    };
    const background = (element) => {
      for (let e = element; e; e = e.parentElement) {
        const color = parse(getComputedStyle(e).backgroundColor);
        if (color && color.a > 0.5) return color;
      }
      return { r: 255, g: 255, b: 255, a: 1 };
    };
    const found = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const element = node.parentElement;
      if (!node.textContent.trim() || !element || element.offsetParent === null) continue;
      if (element.closest('[disabled], [aria-hidden="true"], .visually-hidden')) continue;
      const style = getComputedStyle(element);
      const color = parse(style.color);
      if (!color) continue;
      const [light, dark] = [luminance(color), luminance(background(element))].sort((x, y) => y - x);
      const ratio = (light + 0.05) / (dark + 0.05);
      const size = parseFloat(style.fontSize);
      const large = size >= 24 || (Number(style.fontWeight) >= 700 && size >= 18.66);
      if (ratio < (large ? 3 : 4.5)) found.push(`${ratio.toFixed(2)}:1 "${node.textContent.trim().slice(0, 40)}" (${style.color})`);
    }
    return found;
  });
}

/** Whether the page is wider than its window (a phone would scroll sideways). */
export async function overflowsHorizontally(page) {
  return page.evaluate(() => document.scrollingElement.scrollWidth > window.innerWidth + 1);
}

/**
 * The console cookie of a browser context, or undefined. Its name is `troupe_console`, or `troupe_console_<suffix>`
 * where the daemon tells its cookie apart from another daemon's on another port of the same host (a cookie is
 * shared by every port of a host).
 */
export async function consoleCookie(context) {
  return (await context.cookies()).find((cookie) => isConsoleCookieName(cookie.name));
}

export function isConsoleCookieName(name) {
  return name === 'troupe_console' || name.startsWith('troupe_console_');
}

/** Fails when a `data-seq` shows twice among the entries. */
export function duplicatedSeqs(list) {
  const seen = new Map();
  for (const item of list) {
    if (item.seq === null) continue;
    seen.set(item.seq, (seen.get(item.seq) ?? 0) + 1);
  }
  return [...seen].filter(([, count]) => count > 1).map(([seq]) => seq);
}

/**
 * Sets up what nearly every test needs and tears it down after `body`, saving a screenshot of each open page when
 * the body fails: a daemon, a browser, and the `script` connected.
 */
export async function withConsole({ name, script, config, port }, body) {
  const daemon = await Daemon.start(name, config, { port });
  let browser;
  const pages = [];
  try {
    if (script) await daemon.connectScript(script);
    browser = await launchBrowser();
    const open = async (options) => {
      const opened = await newPage(browser, options);
      pages.push(opened.page);
      return opened;
    };
    await body({ daemon, browser, open });
  } catch (error) {
    for (const [index, page] of pages.entries()) {
      await page.screenshot({ path: path.join(outputDir(), `${name}-failure-${index}.png`), fullPage: true }).catch(() => {});
      writeFileSync(path.join(outputDir(), `${name}-console-${index}.log`), page.consoleLog.join('\n'));
    }
    throw error;
  } finally {
    await browser?.close().catch(() => {});
    await daemon.dispose();
  }
}
