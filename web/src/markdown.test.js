// The markdown wrapper needs a DOM (DOMPurify); this only checks what marked hands it, without one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { marked } from 'marked';

test('images are rendered as links', async () => {
  await import('./markdown.js').catch(() => {});
  const html = marked.parse('![a "cat"](http://example.com/x.png)');
  assert.ok(!html.includes('<img'), html);
  assert.ok(html.includes('href="http://example.com/x.png"'), html);
});
