// Markdown → sanitized HTML for assistant and reasoning text (marked renders, DOMPurify sanitizes).
import DOMPurify from 'dompurify';
import { marked } from 'marked';
import { visibleText } from './dom.js';

marked.setOptions({ gfm: true, breaks: false, async: false });

const escapeHtml = (text) => String(text ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// Raw HTML in model text is shown as the text it is, never parsed as markup. A model's `<img onerror=…>` must not
// reach any HTML parser, not even DOMPurify's inert one: Chromium checks a parsed event handler against the page's
// CSP at parse time (and reports the refusal), and the sanitizer is the second line of defence, not the first.
// Images become links: the console's CSP loads no image from elsewhere, and a refused load is only noise.
marked.use({
  renderer: {
    html({ text }) {
      return escapeHtml(text);
    },
    image({ href, text }) {
      return `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>`;
    },
  },
});

// Links open in a new tab and never leak the console's URL.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

/** Renders model text as HTML safe to assign to innerHTML. */
export function renderMarkdown(text) {
  const html = marked.parse(visibleText(text ?? ''));
  return DOMPurify.sanitize(html, {
    USE_PROFILES: { html: true },
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'img', 'video', 'audio', 'source', 'picture'],
    // No class, id or data attribute from a model: its text must not borrow the console's own look (a fake
    // approval card, a fake "signed out" box) or collide with the page's ids.
    FORBID_ATTR: ['style', 'class', 'id', 'name'],
    ALLOW_DATA_ATTR: false,
  });
}
