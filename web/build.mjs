// Builds the console into web/dist (or --out DIR): one minified script and one stylesheet, named by a hash of
// their content, and an index.html that refers to them by relative paths (the console also works under a proxy
// prefix). Same sources → byte-identical output, so a test can rebuild into a temporary directory and compare it
// with the committed web/dist to catch a stale build. Files in the output directory that this build did not
// write are removed.
import { createHash } from 'node:crypto';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = path.dirname(fileURLToPath(import.meta.url));

function outDir() {
  const at = process.argv.indexOf('--out');
  if (at === -1) return path.join(here, 'dist');
  const dir = process.argv[at + 1];
  if (!dir) throw new Error('--out needs a directory');
  return path.resolve(dir);
}

const hash = (bytes) => createHash('sha256').update(bytes).digest('hex').slice(0, 12);

async function bundle(entry, loader) {
  const result = await esbuild.build({
    entryPoints: [path.join(here, 'src', entry)],
    bundle: true,
    minify: true,
    sourcemap: false,
    write: false,
    format: 'iife',
    target: ['chrome110', 'firefox110', 'safari16'],
    legalComments: 'none',
    charset: 'utf8',
    loader,
    logLevel: 'warning',
    // No absolute paths of the build machine end up in the output.
    absWorkingDir: here,
  });
  if (result.outputFiles.length !== 1) throw new Error(`expected one output file for ${entry}`);
  return result.outputFiles[0].contents;
}

async function removeStale(dir, keep) {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      await removeStale(full, keep);
      if ((await readdir(full)).length === 0 && !keep.has(full)) await rm(full, { recursive: true });
    } else if (!keep.has(full)) {
      await rm(full);
    }
  }
}

async function main() {
  const out = outDir();
  const js = await bundle('main.js');
  const css = await bundle('style.css');
  const jsName = `app-${hash(js)}.js`;
  const cssName = `app-${hash(css)}.css`;
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="referrer" content="same-origin">
<title>troupe console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/${cssName}">
<script defer src="assets/${jsName}"></script>
</head>
<body>
<div id="root"><noscript>The troupe console needs JavaScript.</noscript></div>
</body>
</html>
`;
  const assets = path.join(out, 'assets');
  await mkdir(assets, { recursive: true });
  const written = new Map([
    [path.join(assets, jsName), js],
    [path.join(assets, cssName), css],
    [path.join(out, 'index.html'), Buffer.from(html)],
  ]);
  for (const [file, bytes] of written) await writeFile(file, bytes);
  await removeStale(out, new Set([...written.keys(), assets]));
  console.log(`built ${path.relative(process.cwd(), out) || '.'}: index.html, assets/${jsName}, assets/${cssName}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
