// The console's page key: the second half of a sign-in, beside the HttpOnly cookie.
//
// Browsers send a host's cookies to every port of it, so another web server on the same machine receives the
// console's cookie. The page key is what such a server never gets: the daemon hands it over in the sign-in
// redirect's fragment (`#console-key=…`, which no browser sends to any server), and the page keeps it in
// localStorage, which is scoped to the console's own origin. The page offers it at `/ws` as the subprotocol
// `troupe.console.<key>` (next to `troupe`, which the daemon selects) and at `console/session` as a header.

const STORAGE_NAME = 'troupe.console.key';
const FRAGMENT = /^#console-key=([A-Za-z0-9_-]{16,128})$/;

/** Stores the key of a sign-in redirect and takes it out of the address bar (and so out of history). */
export function adoptKeyFromFragment(loc = globalThis.location, storage = globalThis.localStorage, hist = globalThis.history) {
  const match = FRAGMENT.exec(loc.hash);
  if (!match) return false;
  storage.setItem(STORAGE_NAME, match[1]);
  hist.replaceState(null, '', loc.pathname + loc.search);
  return true;
}

/** The stored key, read afresh on every dial (another tab may have signed in again). */
export function pageKey(storage = globalThis.localStorage) {
  try {
    return storage.getItem(STORAGE_NAME);
  } catch {
    return null;
  }
}

/** Forgets the key (sign-out). */
export function forgetPageKey(storage = globalThis.localStorage) {
  try {
    storage.removeItem(STORAGE_NAME);
  } catch {
    // Storage unavailable: nothing to forget.
  }
}

/** The subprotocols a WebSocket offers with `key`. */
export function socketProtocols(key) {
  return key ? ['troupe', `troupe.console.${key}`] : [];
}

/** The headers of the page's own requests that prove the key. */
export function keyHeaders(key) {
  return key ? { 'X-Troupe-Console-Key': key } : {};
}
