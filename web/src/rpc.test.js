// Unit tests of the connection's subscription bookkeeping with a fake WebSocket (node --test).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Connection, backoff, socketUrl } from './rpc.js';

class FakeSocket {
  static last = null;
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeSocket.last = this;
    setTimeout(() => {
      this.readyState = 1;
      this.onopen?.();
    }, 0);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close() {
    this.readyState = 3;
    this.onclose?.();
  }
  reply(id, result) {
    this.onmessage({ data: JSON.stringify({ jsonrpc: '2.0', id, result }) });
  }
  notify(method, params) {
    this.onmessage({ data: JSON.stringify({ jsonrpc: '2.0', method, params }) });
  }
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));
const event = (seq) => ({ session_id: 's', seq, payload: { type: 'x' } });

async function connected() {
  const statuses = [];
  const conn = new Connection({ url: 'ws://x/ws', sessionUrl: null, clientInfo: { name: 'web console' }, handlers: { status: (s) => statuses.push(s) }, WebSocketImpl: FakeSocket });
  conn.start();
  await tick();
  const socket = FakeSocket.last;
  const hs = socket.sent.at(-1);
  assert.equal(hs.method, 'handshake');
  assert.deepEqual(hs.params.client_info, { name: 'web console' });
  socket.reply(hs.id, { protocol_version: 20, server: {} });
  await tick();
  return { conn, socket, statuses };
}

test('socketUrl is relative to the page, ws or wss', () => {
  assert.equal(socketUrl('http://h:1/agent/?x=1#y'), 'ws://h:1/agent/ws');
  assert.equal(socketUrl('https://h/'), 'wss://h/ws');
  assert.equal(backoff(10, 200, 5000), 5000);
});

test('events are delivered once, in order; live events during a subscribe wait for its reply', async () => {
  const { conn, socket } = await connected();
  const got = [];
  conn.follow('s', 0, { events: (events) => got.push(...events.map((e) => e.seq)) });
  await tick();
  const sub = socket.sent.at(-1);
  assert.equal(sub.method, 'events.subscribe');
  assert.equal(sub.params.cursor, undefined);
  // A live event of the old subscription arrives before the reply: held, then dropped as a duplicate.
  socket.notify('events.subscription', { type: 'event', session_id: 's', event: event(2) });
  socket.reply(sub.id, { events: [event(1), event(2)], last_seq: 2 });
  await tick();
  socket.notify('events.subscription', { type: 'event', session_id: 's', event: event(3) });
  socket.notify('events.subscription', { type: 'event', session_id: 's', event: event(3) });
  assert.deepEqual(got, [1, 2, 3]);
  conn.stop();
});

test('a gap re-subscribes from the cursor', async () => {
  const { conn, socket } = await connected();
  const got = [];
  conn.follow('s', 0, { events: (events) => got.push(...events.map((e) => e.seq)) });
  await tick();
  socket.reply(socket.sent.at(-1).id, { events: [event(1)], last_seq: 1 });
  await tick();
  socket.notify('events.subscription', { type: 'gap', session_id: 's', last_delivered_seq: 1 });
  await tick();
  const again = socket.sent.at(-1);
  assert.equal(again.method, 'events.subscribe');
  assert.equal(again.params.cursor, 1);
  socket.reply(again.id, { events: [event(2), event(3)], last_seq: 3 });
  await tick();
  assert.deepEqual(got, [1, 2, 3]);
  conn.stop();
});

test('after a reconnect the session is re-subscribed from the last seq held', async () => {
  const { conn, socket, statuses } = await connected();
  const got = [];
  conn.follow('s', 0, { events: (events) => got.push(...events.map((e) => e.seq)) });
  await tick();
  socket.reply(socket.sent.at(-1).id, { events: [event(1), event(2)], last_seq: 2 });
  await tick();
  socket.close();
  assert.equal(statuses.at(-1), 'offline');
  await new Promise((resolve) => setTimeout(resolve, 260));
  const next = FakeSocket.last;
  assert.notEqual(next, socket);
  next.reply(next.sent.at(-1).id, { protocol_version: 20, server: {} });
  await tick();
  const sub = next.sent.at(-1);
  assert.equal(sub.method, 'events.subscribe');
  assert.equal(sub.params.cursor, 2);
  next.reply(sub.id, { events: [event(2), event(3)], last_seq: 3 });
  await tick();
  assert.deepEqual(got, [1, 2, 3]);
  assert.equal(statuses.at(-1), 'online');
  conn.stop();
});

test('recycling starts a fresh connection quietly; calls made meanwhile wait for its handshake', async () => {
  const { conn, socket, statuses } = await connected();
  const seen = statuses.length;
  conn.recycle();
  const answer = conn.call('session.list', {});
  await tick();
  const next = FakeSocket.last;
  assert.notEqual(next, socket);
  next.reply(next.sent.at(-1).id, { protocol_version: 20, server: {} });
  await tick();
  const call = next.sent.at(-1);
  assert.equal(call.method, 'session.list');
  next.reply(call.id, { sessions: [] });
  assert.deepEqual(await answer, { sessions: [] });
  assert.deepEqual(statuses.slice(seen), ['online'], 'never reported offline');
  conn.stop();
});
