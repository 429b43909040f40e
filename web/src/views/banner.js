// The connection banner: present only while the daemon is unreachable, with a way to retry at once.
import { h } from '../dom.js';

export function createBanner(retryNow) {
  const text = h('span', null);
  const retry = h('button', { type: 'button', class: 'small', onclick: retryNow }, 'Retry now');
  const el = h('div', { class: 'banner', 'data-testid': 'connection-banner', role: 'status', 'aria-live': 'polite', hidden: true }, text, ' ', retry);

  function render(status, retryInMs) {
    const offline = status === 'offline';
    el.hidden = !offline;
    if (offline) {
      const seconds = retryInMs ? Math.max(1, Math.round(retryInMs / 1000)) : null;
      const words = `Offline: the daemon cannot be reached. Reconnecting${seconds ? ` (next try in ${seconds} s)` : '…'}`;
      if (text.textContent !== words) text.textContent = words;
    }
  }

  return { el, render };
}
