import { test } from 'node:test';
import assert from 'node:assert/strict';
import { adoptKeyFromFragment, pageKey, forgetPageKey, socketProtocols, keyHeaders } from './page_key.js';

function memoryStorage() {
  const map = new Map();
  return { getItem: (k) => (map.has(k) ? map.get(k) : null), setItem: (k, v) => map.set(k, v), removeItem: (k) => map.delete(k) };
}

test('a sign-in fragment is stored and removed from the address', () => {
  const storage = memoryStorage();
  const replaced = [];
  const loc = { hash: '#console-key=abcdefghijklmnop_-0123', pathname: '/agent/', search: '' };
  assert.equal(adoptKeyFromFragment(loc, storage, { replaceState: (_s, _t, url) => replaced.push(url) }), true);
  assert.equal(pageKey(storage), 'abcdefghijklmnop_-0123');
  assert.deepEqual(replaced, ['/agent/']);
  forgetPageKey(storage);
  assert.equal(pageKey(storage), null);
});

test('other fragments are left alone', () => {
  const storage = memoryStorage();
  const loc = { hash: '#session=01a2', pathname: '/', search: '' };
  assert.equal(adoptKeyFromFragment(loc, storage, { replaceState: () => assert.fail('replaced') }), false);
  assert.equal(adoptKeyFromFragment({ ...loc, hash: '#console-key=<script>' }, storage, { replaceState: () => assert.fail('replaced') }), false);
  assert.equal(pageKey(storage), null);
});

test('the key is offered as a subprotocol beside troupe, and as a header', () => {
  assert.deepEqual(socketProtocols('k3y'), ['troupe', 'troupe.console.k3y']);
  assert.deepEqual(socketProtocols(null), []);
  assert.deepEqual(keyHeaders('k3y'), { 'X-Troupe-Console-Key': 'k3y' });
});
