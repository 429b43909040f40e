// ANSI-coloured terminal output → HTML. ansi_up escapes the text itself (escape_html stays on) and emits
// classes for the 16 basic colours; the inline styles it would write for 256-colour and true-colour codes are
// stripped (the console's CSP blocks inline styles, and a blocked one only adds noise to the browser's console).
import { AnsiUp } from 'ansi_up';
import DOMPurify from 'dompurify';
import { visibleText } from './dom.js';

/** One converter per output stream: colour state carries over from one chunk to the next. */
export function ansiConverter() {
  const converter = new AnsiUp();
  converter.escape_html = true;
  converter.use_classes = true;
  // Terminal links (OSC 8) are not turned into anchors. A prototype-free object: ansi_up looks schemes up by key,
  // and `{}` would answer for `constructor:` or `__proto__:`.
  converter.url_allowlist = Object.create(null);
  return (text) => {
    const html = converter.ansi_to_html(visibleText(text));
    return html.includes('style=') ? DOMPurify.sanitize(html, { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'] }) : html;
  };
}
