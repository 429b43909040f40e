// A small element builder. Text is always set as text (never parsed as HTML); the only HTML the console inserts
// comes from markdown.js, ansi.js and diff.js, which sanitize or escape it.

/**
 * h('button', {class: 'x', 'data-testid': 'send', onclick: fn, disabled: true}, 'Send')
 * Attribute values: strings are set as attributes, `true` sets a boolean attribute, `false`/null/undefined skip
 * it; `on<event>` functions become listeners.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === false || value === null || value === undefined) continue;
      if (name.startsWith('on') && typeof value === 'function') {
        el.addEventListener(name.slice(2), value);
      } else if (name === 'value') {
        el.value = value;
      } else {
        el.setAttribute(name, value === true ? '' : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(visibleText(String(child))));
  }
}

// Characters that reorder or hide text without showing themselves: bidi embeddings, overrides, isolates and marks,
// zero-width spaces and joiners-that-are-not-for-scripts, the BOM, line and paragraph separators. A file named
// `notes-\u202etxt.sh` would read as `notes-hs.txt`; shown as escapes, every character is seen for what it is.
const DECEPTIVE = /[\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/gu;

/** `text` with its reordering and invisible characters shown as `⟨U+202E⟩`. */
export function visibleText(text) {
  return text.replace(DECEPTIVE, (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`);
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Sets or clears a boolean attribute/property without touching anything else. */
export function toggle(el, name, on) {
  if (on) el.setAttribute(name, '');
  else el.removeAttribute(name);
}

/** A client-made idempotency key (client_run_id, client_rename_id, client_response_id). */
export function newKey(prefix) {
  const random = crypto.randomUUID ? crypto.randomUUID() : Math.random().toString(36).slice(2);
  return `${prefix}-${random}`;
}

/** "12:04:31" for an RFC 3339 timestamp, in the browser's time zone. */
export function clock(timestamp) {
  const date = new Date(timestamp);
  if (Number.isNaN(date.getTime())) return '';
  return date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/** "3 min ago"-style age for the session list. */
export function age(timestamp, now = Date.now()) {
  const then = new Date(timestamp).getTime();
  if (Number.isNaN(then)) return '';
  const seconds = Math.max(0, Math.round((now - then) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes}m ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours}h ago`;
  return `${Math.round(hours / 24)}d ago`;
}

/** A short, readable form of a UUIDv7 session id. */
export function shortId(id) {
  return id ? id.slice(0, 13) : '';
}
