// The markdown wrapper needs a DOM (DOMPurify); this only checks what marked hands it, without one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { marked } from 'marked';

// markdown.js configures the shared `marked` when imported; DOMPurify's part of it needs a DOM and may throw here.
const configured = import('./markdown.js').catch(() => {});

test('images are rendered as links', async () => {
  await configured;
  const html = marked.parse('![a "cat"](http://example.com/x.png)');
  assert.ok(!html.includes('<img'), html);
  assert.ok(html.includes('href="http://example.com/x.png"'), html);
});

test('raw HTML in model text stays text: no tag or handler reaches the sanitizer', async () => {
  await configured;
  for (const hostile of [
    '<img src=x onerror="window.__owned=1">',
    'inline <img src=x onerror=alert(1)> html',
    '<script>window.__owned=2</script>',
    '<div>\n<svg onload=alert(1)></svg>\n</div>',
    '<details open ontoggle=alert(1)>',
  ]) {
    const html = marked.parse(hostile);
    assert.ok(!/<(img|script|svg|div|details)\b/i.test(html), `no raw tag: ${html}`);
    assert.ok(html.includes('&#60;'), `the tag is shown as text: ${html}`);
  }
});
