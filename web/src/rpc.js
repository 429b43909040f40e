// The page's JSON-RPC 2.0 client over one WebSocket: request ids and timeouts, the handshake, reconnecting with
// backoff, and per-session event subscriptions that stay gapless and free of duplicates across gaps and
// reconnects, the way the shared Rust client (protocol/src/client/subscriptions.rs) keeps them:
//
// - every session followed has a cursor, the last seq handed to the consumer; an event at or below it is a
//   duplicate and dropped;
// - while an `events.subscribe` is in flight, live events of that session are held and delivered after the
//   reply's events, as far as they continue them without a hole (the rest come again from the new subscription);
// - a `gap` notice, or a reconnect, subscribes again from the cursor; a gap that arrives while subscribing
//   re-subscribes once more after the reply; failed re-subscribes are retried with backoff, then given up.
//
// The socket rides the console's HttpOnly cookie and the page key (page_key.js): no token is ever in the page.
// When the socket is refused, `console/session` tells a signed-out browser (401) from a daemon that is down.

import { keyHeaders, socketProtocols } from './page_key.js';

const PROTOCOL_VERSION = 20;
const CALL_TIMEOUT_MS = 30_000;
const SUBSCRIBE_TIMEOUT_MS = 60_000;
const RECONNECT_INITIAL_MS = 200;
const RECONNECT_MAX_MS = 5_000;
const RECOVERY_RETRIES = 6;
const RECOVERY_INITIAL_MS = 100;
const MAX_HELD_EVENTS = 1024;

export class RpcError extends Error {
  constructor(code, message, data) {
    super(data?.detail || message);
    this.code = code;
    this.data = data ?? null;
  }

  /** The typed `data.code` (`session_busy`, `run_not_active`, …), if any. */
  get typed() {
    return this.data?.code ?? null;
  }
}

/** The code of errors made by this client (not by the daemon): the call never got an answer. */
export const OFFLINE = 'offline';
export const TIMEOUT = 'timeout';

/** `ws(s)://…/ws` next to the page, whatever prefix a proxy serves it under. */
export function socketUrl(href) {
  const url = new URL('ws', href);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.hash = '';
  url.search = '';
  return url.toString();
}

export function backoff(attempt, initial, max) {
  return Math.min(max, initial * 2 ** Math.min(attempt, 16));
}

/**
 * One logical connection to the daemon that survives drops.
 *
 * `handlers`: `status(state, detail)` with state `connecting` | `online` | `offline` | `signed-out`;
 * `ready()` after each successful handshake (re-fetch what the page shows); `notification(method, params)`
 * for every notification other than `events.subscription`.
 */
export class Connection {
  constructor({ url, sessionUrl, clientInfo, handlers, pageKey = () => null, WebSocketImpl = globalThis.WebSocket, fetchImpl = globalThis.fetch?.bind(globalThis) }) {
    this.url = url;
    // The console's page key (page_key.js), read at every dial: the daemon wants it beside the cookie.
    this.pageKey = pageKey;
    this.sessionUrl = sessionUrl;
    this.clientInfo = clientInfo;
    this.handlers = handlers;
    this.WebSocketImpl = WebSocketImpl;
    this.fetchImpl = fetchImpl;
    this.socket = null;
    this.ready = false;
    this.nextId = 1;
    this.pending = new Map();
    this.attempt = 0;
    this.retryTimer = null;
    this.stopped = false;
    // Until the daemon accepts `client_info` (older builds reject unknown handshake fields), it is left out.
    this.sendClientInfo = Boolean(clientInfo);
    this.follows = new Map();
    this.epoch = 0;
    this.readyWaiters = [];
    this.recycling = false;
    this.quietDial = false;
    this.server = null;
  }

  start() {
    this.stopped = false;
    this.dial();
  }

  /** Closes the socket for good (sign-out). */
  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.socket?.close();
  }

  /**
   * Starts a fresh connection at once, without reporting it offline: the protocol has no way to end one
   * subscription, so a page that switches sessions drops the old connection (and with it the old session's
   * events and its place in that session's presence list). Calls made meanwhile wait for the new handshake.
   */
  recycle() {
    if (!this.socket || !this.ready) return;
    this.ready = false;
    this.recycling = true;
    this.socket.close();
  }

  /** Dials now instead of waiting out the backoff (the banner's "Retry now"). */
  retryNow() {
    if (this.stopped || (this.socket && this.socket.readyState <= 1)) return;
    clearTimeout(this.retryTimer);
    this.attempt = 0;
    this.dial();
  }

  dial(quiet = false) {
    this.quietDial = quiet;
    if (!quiet) this.handlers.status?.(this.attempt === 0 && !this.everReady ? 'connecting' : 'offline');
    let opened = false;
    let socket;
    try {
      socket = new this.WebSocketImpl(this.url, socketProtocols(this.pageKey()));
    } catch (error) {
      this.lost(false);
      return;
    }
    this.socket = socket;
    socket.onopen = () => {
      opened = true;
      this.handshake();
    };
    socket.onmessage = (message) => this.received(message.data);
    socket.onclose = () => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.lost(opened);
    };
    socket.onerror = () => {};
  }

  async handshake() {
    const params = { protocol_version: PROTOCOL_VERSION };
    if (this.sendClientInfo) params.client_info = this.clientInfo;
    try {
      this.server = (await this.request('handshake', params, CALL_TIMEOUT_MS, true)).server;
    } catch (error) {
      if (error instanceof RpcError && error.code === -32602 && params.client_info && /client_info|unknown field/.test(error.message)) {
        this.sendClientInfo = false;
        return this.handshake();
      }
      this.socket?.close();
      return;
    }
    this.ready = true;
    this.quietDial = false;
    this.everReady = true;
    this.attempt = 0;
    this.handlers.status?.('online');
    for (const waiter of this.readyWaiters.splice(0)) waiter.resolve();
    for (const [sessionId, follow] of this.follows) {
      if (follow.phase === 'awaiting-link') this.subscribe(sessionId, follow.reason);
    }
    this.handlers.ready?.();
  }

  async lost(opened) {
    this.ready = false;
    for (const [, call] of this.pending) {
      clearTimeout(call.timer);
      call.reject(new RpcError(OFFLINE, 'the connection to the daemon was lost'));
    }
    this.pending.clear();
    for (const follow of this.follows.values()) {
      clearTimeout(follow.retryTimer);
      follow.epoch = ++this.epoch;
      follow.phase = 'awaiting-link';
      follow.held = [];
    }
    if (this.stopped) return;
    if (this.recycling) {
      this.recycling = false;
      this.dial(true);
      return;
    }
    this.quietDial = false;
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(new RpcError(OFFLINE, 'the connection to the daemon was lost'));
    if (!opened && this.sessionUrl && this.fetchImpl) {
      // A refused upgrade looks the same as a daemon that is down; the cookie check tells them apart.
      try {
        const headers = keyHeaders(this.pageKey());
        const response = await this.fetchImpl(this.sessionUrl, { credentials: 'same-origin', cache: 'no-store', headers });
        if (response.status === 401) {
          this.stopped = true;
          this.handlers.status?.('signed-out');
          return;
        }
      } catch {
        // Unreachable: offline.
      }
    }
    const delay = backoff(this.attempt, RECONNECT_INITIAL_MS, RECONNECT_MAX_MS);
    this.attempt += 1;
    this.handlers.status?.('offline', { retryInMs: delay });
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.dial(), delay);
  }

  /** Calls `method`; rejects with an RpcError (the daemon's, or OFFLINE/TIMEOUT). */
  call(method, params = {}, timeoutMs = CALL_TIMEOUT_MS) {
    if (!this.ready && (this.recycling || this.quietDial)) {
      return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject })).then(() => this.call(method, params, timeoutMs));
    }
    if (!this.ready) return Promise.reject(new RpcError(OFFLINE, 'not connected to the daemon'));
    return this.request(method, params, timeoutMs, false);
  }

  request(method, params, timeoutMs) {
    const socket = this.socket;
    if (!socket || socket.readyState !== 1) return Promise.reject(new RpcError(OFFLINE, 'not connected to the daemon'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RpcError(TIMEOUT, `no answer to ${method} within ${Math.round(timeoutMs / 1000)} s`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer, method });
      socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  received(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    for (const one of Array.isArray(message) ? message : [message]) {
      if (one && 'id' in one && !('method' in one)) this.answered(one);
      else if (one && typeof one.method === 'string') this.notified(one.method, one.params ?? {});
    }
  }

  answered(reply) {
    const call = this.pending.get(reply.id);
    if (!call) return;
    this.pending.delete(reply.id);
    clearTimeout(call.timer);
    if (reply.error) call.reject(new RpcError(reply.error.code, reply.error.message, reply.error.data));
    else call.resolve(reply.result);
  }

  notified(method, params) {
    if (method === 'events.subscription') this.subscriptionNotice(params);
    else this.handlers.notification?.(method, params);
  }

  // ---- subscriptions -------------------------------------------------------------------------------------

  /**
   * Follows a session's events from `cursor` (the last seq the consumer holds; 0 or absent: from the start).
   * `consumer`: `events(events, {replay})` with events in seq order, never one twice; `lost(error)` when the
   * subscription cannot be re-established (the session was deleted, or retries ran out); `reset()` when the
   * daemon has fewer events than the cursor (its data was replaced): the consumer drops what it holds and the
   * session is followed again from the start.
   */
  follow(sessionId, cursor, consumer) {
    const previous = this.follows.get(sessionId);
    if (previous) clearTimeout(previous.retryTimer);
    const follow = { cursor: cursor || 0, consumer, phase: 'awaiting-link', reason: 'subscribe', epoch: 0, held: [], gapWhileSubscribing: false, failures: 0, retryTimer: null };
    this.follows.set(sessionId, follow);
    if (this.ready) this.subscribe(sessionId, 'subscribe');
    return {
      stop: () => {
        if (this.follows.get(sessionId) === follow) {
          clearTimeout(follow.retryTimer);
          this.follows.delete(sessionId);
        }
      },
      cursor: () => follow.cursor,
    };
  }

  async subscribe(sessionId, reason) {
    const follow = this.follows.get(sessionId);
    if (!follow) return;
    const epoch = ++this.epoch;
    follow.epoch = epoch;
    follow.reason = reason;
    if (!this.ready) {
      follow.phase = 'awaiting-link';
      return;
    }
    follow.phase = 'subscribing';
    const params = { session_id: sessionId };
    if (follow.cursor > 0) params.cursor = follow.cursor;
    let result;
    try {
      result = await this.request('events.subscribe', params, SUBSCRIBE_TIMEOUT_MS);
    } catch (error) {
      if (this.follows.get(sessionId) !== follow || follow.epoch !== epoch) return;
      this.subscribeFailed(sessionId, follow, error);
      return;
    }
    if (this.follows.get(sessionId) !== follow || follow.epoch !== epoch) return;
    const fresh = [];
    for (const event of result.events ?? []) {
      if (event.seq > follow.cursor) {
        follow.cursor = event.seq;
        fresh.push(event);
      }
    }
    follow.cursor = Math.max(follow.cursor, result.last_seq ?? 0);
    follow.failures = 0;
    follow.consumer.events(fresh, { replay: true, reason });
    const held = follow.held;
    follow.held = [];
    const droppedAbove = follow.droppedAbove ?? 0;
    follow.droppedAbove = 0;
    if (follow.gapWhileSubscribing || droppedAbove > follow.cursor) {
      follow.gapWhileSubscribing = false;
      this.subscribe(sessionId, 'gap');
      return;
    }
    follow.phase = 'live';
    const continuing = [];
    let expected = follow.cursor + 1;
    for (const event of held) {
      if (event.seq < expected) continue;
      if (event.seq > expected) break;
      expected += 1;
      continuing.push(event);
    }
    if (continuing.length) {
      follow.cursor = continuing[continuing.length - 1].seq;
      follow.consumer.events(continuing, { replay: false });
    }
  }

  subscribeFailed(sessionId, follow, error) {
    if (error.code === OFFLINE) {
      // The reconnect re-subscribes.
      follow.phase = 'awaiting-link';
      return;
    }
    if (error.typed === 'cursor_ahead') {
      follow.cursor = 0;
      follow.consumer.reset?.();
      this.subscribe(sessionId, 'subscribe');
      return;
    }
    follow.failures += 1;
    if (error.typed === 'session_not_found' || follow.failures > RECOVERY_RETRIES) {
      this.follows.delete(sessionId);
      follow.consumer.lost?.(error);
      return;
    }
    follow.phase = 'retry-wait';
    const delay = backoff(follow.failures - 1, RECOVERY_INITIAL_MS, RECONNECT_MAX_MS);
    const epoch = follow.epoch;
    follow.retryTimer = setTimeout(() => {
      if (this.follows.get(sessionId) === follow && follow.epoch === epoch) this.subscribe(sessionId, follow.reason);
    }, delay);
  }

  subscriptionNotice(params) {
    const follow = this.follows.get(params.session_id);
    if (!follow) return;
    if (params.type === 'event' && params.event) {
      const event = params.event;
      if (event.seq <= follow.cursor) return;
      if (follow.phase === 'live') {
        follow.cursor = event.seq;
        follow.consumer.events([event], { replay: false });
      } else if (follow.held.length < MAX_HELD_EVENTS) {
        follow.held.push(event);
      } else {
        follow.droppedAbove = Math.max(follow.droppedAbove ?? 0, event.seq);
      }
    } else if (params.type === 'gap') {
      if (follow.phase === 'live') this.subscribe(params.session_id, 'gap');
      else if (follow.phase === 'subscribing') follow.gapWhileSubscribing = true;
    }
  }
}
