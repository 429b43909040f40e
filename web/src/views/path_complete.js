// `@path` in the composer: while the word before the caret starts with `@`, the session's folder is listed (by the
// daemon, `session.files`: the folder is on its machine) and the entries matching what was typed are offered. A
// folder continues the path; an image or a PDF is attached (`session.file`) and its `@word` removed; any other file
// puts its path in the prompt as text.
import { h } from '../dom.js';

const ATTACHABLE = /\.(png|jpe?g|gif|webp|pdf)$/i;
const MAX_SHOWN = 20;

/** The `@word` ending at `caret` in `text`: `{start, dir, prefix}`, or null. Pure (unit-tested). */
export function pathQuery(text, caret) {
  const match = /(^|\s)@([^\s@]*)$/.exec(text.slice(0, caret));
  if (!match) return null;
  const word = match[2];
  const slash = word.lastIndexOf('/');
  return { start: caret - word.length - 1, dir: slash === -1 ? '' : word.slice(0, slash), prefix: word.slice(slash + 1) };
}

/** The entries of a listing that match `prefix`, folders marked with a trailing `/`; dot files only when asked. */
export function matching(entries, prefix) {
  const lower = prefix.toLowerCase();
  return entries
    .filter((entry) => entry.name.toLowerCase().startsWith(lower) && (prefix.startsWith('.') || !entry.name.startsWith('.')))
    .slice(0, MAX_SHOWN)
    .map((entry) => ({ name: entry.name, dir: entry.kind === 'dir' }));
}

/**
 * Completion for `prompt` (a textarea). `actions`: `listFiles(dir)` → Promise<{entries}>, `readFile(path)` →
 * Promise<{attachment}>, `attach(attachment)`, `onError(text)`. Returns `{el}`: the list of offers, shown above the
 * prompt while there are some.
 */
export function createPathCompletion(prompt, actions) {
  const el = h('ul', { class: 'path-completions', 'data-testid': 'path-completions', role: 'listbox', 'aria-label': 'Files in the session folder', hidden: true });
  let offers = [];
  let selected = 0;
  let query = null;
  const listings = new Map();
  let asked = 0;

  function close() {
    // Listings live while one completion does: the next `@` sees the folder as it is then (and the session's).
    listings.clear();
    offers = [];
    query = null;
    el.hidden = true;
    el.replaceChildren();
    prompt.removeAttribute('aria-activedescendant');
  }

  function draw() {
    if (offers.length === 0) return close();
    el.hidden = false;
    el.replaceChildren(
      ...offers.map((offer, index) =>
        h(
          'li',
          { id: `path-offer-${index}`, role: 'option', class: 'path-offer', 'data-testid': 'path-offer', 'aria-selected': index === selected ? 'true' : 'false', onmousedown: (event) => { event.preventDefault(); choose(index); } },
          offer.dir ? `${offer.name}/` : offer.name,
        ),
      ),
    );
    prompt.setAttribute('aria-activedescendant', `path-offer-${selected}`);
  }

  async function refresh() {
    const found = pathQuery(prompt.value, prompt.selectionStart);
    if (!found) return close();
    const ticket = ++asked;
    let listing = listings.get(found.dir);
    if (!listing) {
      try {
        listing = await actions.listFiles(found.dir);
        listings.set(found.dir, listing);
      } catch {
        // A folder that cannot be listed (missing, outside the session's) offers nothing.
        if (ticket === asked) close();
        return;
      }
    }
    if (ticket !== asked) return;
    query = found;
    offers = matching(listing.entries ?? [], found.prefix);
    selected = 0;
    draw();
  }

  function replaceWord(text) {
    const before = prompt.value.slice(0, query.start);
    const after = prompt.value.slice(prompt.selectionStart);
    prompt.value = before + text + after;
    const caret = before.length + text.length;
    prompt.setSelectionRange(caret, caret);
  }

  async function choose(index) {
    const offer = offers[index];
    if (!offer || !query) return;
    const path = query.dir ? `${query.dir}/${offer.name}` : offer.name;
    if (offer.dir) {
      replaceWord(`@${path}/`);
      refresh();
      return;
    }
    if (ATTACHABLE.test(offer.name)) {
      replaceWord('');
      close();
      try {
        const read = await actions.readFile(path);
        actions.attach(read.attachment);
      } catch (error) {
        // Not an image or PDF after all (its bytes said otherwise): its path goes into the prompt instead.
        if (error.typed === 'invalid_attachment') {
          const at = prompt.selectionStart;
          prompt.setRangeText(path, at, at, 'end');
        } else {
          actions.onError(error.message);
        }
      }
      return;
    }
    replaceWord(path);
    close();
  }

  prompt.addEventListener('input', () => refresh());
  prompt.addEventListener('blur', () => setTimeout(close, 100));
  // Keys that move through or take an offer, only while some are shown (capture: before the composer's Ctrl+Enter).
  prompt.addEventListener(
    'keydown',
    (event) => {
      if (el.hidden || offers.length === 0) return;
      if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
        event.preventDefault();
        selected = (selected + (event.key === 'ArrowDown' ? 1 : offers.length - 1)) % offers.length;
        draw();
      } else if ((event.key === 'Enter' && !event.ctrlKey && !event.metaKey) || event.key === 'Tab') {
        event.preventDefault();
        event.stopImmediatePropagation();
        choose(selected);
      } else if (event.key === 'Escape') {
        event.preventDefault();
        close();
      }
    },
    true,
  );

  return { el };
}
