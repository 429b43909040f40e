// Attachments: the images and PDFs the composer sends with its next prompt (picked with the attach button, pasted,
// or dropped), shown as removable chips; and the files a transcript entry's input attached, shown as thumbnails
// (images, read back with `session.attachment`) or by name (PDFs).
import { h } from '../dom.js';

/** The types the daemon takes (it checks the bytes too), and its bounds on one input. */
export const ACCEPTED_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'application/pdf'];
export const MAX_FILES = 8;
export const MAX_BYTES = 10 * 1024 * 1024;

/** `size` in words: "12 KB", "1.5 MB". */
export function sizeWords(size) {
  if (size < 1024) return `${size} bytes`;
  if (size < 1024 * 1024) return `${Math.ceil(size / 1024)} KB`;
  return `${(size / (1024 * 1024)).toFixed(1)} MB`;
}

/** Whether another file of `size` bytes fits the pending ones; the reason in words when it does not. */
export function refusal(pending, type, size) {
  if (!ACCEPTED_TYPES.includes(type)) return `Only PNG, JPEG, GIF, WebP images and PDFs can be attached (not ${type || 'this file type'}).`;
  if (pending.length >= MAX_FILES) return `At most ${MAX_FILES} files can go with one prompt.`;
  const total = pending.reduce((sum, file) => sum + file.size, 0) + size;
  if (total > MAX_BYTES) return 'At most 10 MB of files can go with one prompt.';
  return null;
}

function readAsBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result);
      resolve(url.slice(url.indexOf(',') + 1));
    };
    reader.onerror = () => reject(new Error(`${file.name} could not be read.`));
    reader.readAsDataURL(file);
  });
}

/**
 * The pending attachments of the composer. `onError(text)` shows a refusal. Returns `{el, add(files), take(),
 * clear(), count()}`: `take()` gives the wire form (`{name, mime_type, data}`) of every pending file.
 */
export function createPendingAttachments(onError) {
  const el = h('ul', { class: 'attachment-chips', 'data-testid': 'attachment-chips', 'aria-label': 'Attached files' });
  let pending = [];

  function draw() {
    el.replaceChildren(
      ...pending.map((file, index) =>
        h(
          'li',
          { class: 'attachment-chip', 'data-testid': 'attachment-chip', 'data-name': file.name },
          file.type.startsWith('image/') ? h('img', { src: `data:${file.type};base64,${file.data}`, alt: '', class: 'chip-thumb' }) : h('span', { class: 'chip-icon', 'aria-hidden': 'true' }, 'PDF'),
          h('span', { class: 'chip-name' }, file.name),
          h('span', { class: 'dim' }, sizeWords(file.size)),
          h('button', { type: 'button', class: 'chip-remove', 'data-testid': 'attachment-remove', 'aria-label': `Remove ${file.name}`, onclick: () => remove(index) }, '×'),
        ),
      ),
    );
    el.hidden = pending.length === 0;
  }

  function remove(index) {
    pending = pending.filter((_, at) => at !== index);
    draw();
  }

  async function add(files) {
    for (const file of files) {
      const problem = refusal(pending, file.type, file.size);
      if (problem) {
        onError(`${file.name || 'That file'}: ${problem}`);
        continue;
      }
      try {
        // A pasted screenshot has no useful name.
        const name = file.name && file.name !== 'image.png' ? file.name : `pasted-${pending.length + 1}.${file.type.split('/')[1]}`;
        pending.push({ name, type: file.type, size: file.size, data: await readAsBase64(file) });
      } catch (error) {
        onError(error.message);
      }
    }
    draw();
  }

  /** An attachment the daemon read (`session.file`): `{name, mime_type, data}`. */
  function addEncoded(attachment) {
    const size = Math.floor((attachment.data.length * 3) / 4) - (attachment.data.match(/=*$/)[0].length);
    const problem = refusal(pending, attachment.mime_type, size);
    if (problem) return onError(`${attachment.name}: ${problem}`);
    pending.push({ name: attachment.name, type: attachment.mime_type, size, data: attachment.data });
    draw();
  }

  draw();
  return {
    el,
    add,
    addEncoded,
    count: () => pending.length,
    take: () => pending.map((file) => ({ name: file.name, mime_type: file.type, data: file.data })),
    clear: () => {
      pending = [];
      draw();
    },
  };
}

// Thumbnails already read, by artifact path (an artifact's content never changes: its name is its digest).
const thumbnails = new Map();

/**
 * The files an input attached (`[{path, mime_type, name, size}]`), for a transcript entry: an image as a
 * thumbnail read with `read(path)` → `{mime_type, data}`, a PDF by its name and size.
 */
export function attachedFiles(files, read) {
  if (!files || files.length === 0) return null;
  return h(
    'ul',
    { class: 'attached-files', 'aria-label': 'Attached files' },
    files.map((file) => {
      const label = `${file.name} (${sizeWords(file.size ?? 0)})`;
      if (!file.mime_type?.startsWith('image/')) {
        return h('li', { class: 'attached-file', 'data-testid': 'attached-file', 'data-name': file.name }, h('span', { class: 'chip-icon', 'aria-hidden': 'true' }, 'PDF'), h('span', null, label));
      }
      const img = h('img', { class: 'attached-thumb', 'data-testid': 'attached-thumb', alt: file.name, title: label });
      const known = thumbnails.get(file.path);
      if (known) img.src = known;
      else {
        read(file.path)
          .then((result) => {
            const url = `data:${result.mime_type};base64,${result.data}`;
            thumbnails.set(file.path, url);
            img.src = url;
          })
          .catch(() => {
            img.replaceWith(h('span', { class: 'dim' }, `${label}: not available`));
          });
      }
      return h('li', { class: 'attached-file', 'data-testid': 'attached-file', 'data-name': file.name }, img);
    }),
  );
}
