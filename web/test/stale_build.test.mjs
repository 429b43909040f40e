// The committed web/dist is what web/build.mjs builds from web/src today: a build into a temporary folder must
// match it file for file, byte for byte. When it does not, the fix is `scripts/build-web` and a commit of web/dist.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { run } from './harness.mjs';

const WEB = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const FIX = 'web/dist is stale: run scripts/build-web and commit web/dist';

/** Every file under `root`, as paths relative to it. */
function files(root, dir = root) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((item) => {
    const full = path.join(dir, item.name);
    return item.isDirectory() ? files(root, full) : [path.relative(root, full)];
  });
}

test('the committed web/dist matches a fresh build of web/src', async () => {
  assert.ok(
    existsSync(path.join(WEB, 'node_modules')),
    'web/node_modules is missing: scripts/test installs it (npm ci in web/), or run scripts/build-web',
  );
  const out = mkdtempSync(path.join(tmpdir(), 'troupe-web-build-'));
  try {
    const built = await run(process.execPath, [path.join(WEB, 'build.mjs'), '--out', out], {
      cwd: path.dirname(WEB),
      timeoutMs: 120_000,
    });
    assert.equal(built.code, 0, `node web/build.mjs --out ${out} failed:\n${built.stdout}${built.stderr}`);
    const dist = path.join(WEB, 'dist');
    const fresh = files(out).sort();
    const committed = files(dist).sort();
    const missing = fresh.filter((file) => !committed.includes(file));
    const extra = committed.filter((file) => !fresh.includes(file));
    const changed = fresh.filter(
      (file) => committed.includes(file) && !readFileSync(path.join(out, file)).equals(readFileSync(path.join(dist, file))),
    );
    assert.deepEqual(
      { missing, extra, changed },
      { missing: [], extra: [], changed: [] },
      `${FIX} (missing: built but not committed; extra: committed but no longer built; changed: differ)`,
    );
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
