import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_BYTES, MAX_FILES, refusal, sizeWords } from './attachments.js';

test('the composer takes what the daemon takes, within its bounds', () => {
  assert.equal(refusal([], 'image/png', 10), null);
  assert.equal(refusal([], 'application/pdf', 10), null);
  assert.match(refusal([], 'text/plain', 10), /Only PNG, JPEG, GIF, WebP images and PDFs can be attached \(not text\/plain\)/);
  assert.match(refusal([], '', 10), /not this file type/);
  const eight = Array.from({ length: MAX_FILES }, () => ({ size: 1 }));
  assert.match(refusal(eight, 'image/png', 1), /At most 8 files/);
  assert.match(refusal([{ size: MAX_BYTES }], 'image/png', 1), /At most 10 MB/);
});

test('sizes read as words', () => {
  assert.equal(sizeWords(50), '50 bytes');
  assert.equal(sizeWords(12_000), '12 KB');
  assert.equal(sizeWords(3 * 1024 * 1024), '3.0 MB');
});
