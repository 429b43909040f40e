// Who answered an approval, in words: an approval's `answered_by` is `client:<connection id>` for a person's
// answer, and the presence list and `session.presence`'s `you` tell those connection ids apart.

/**
 * "you" when `answeredBy` is one of this page's connections (`mine`: every `you` it was given; the page takes a
 * new connection when it opens another session), else the client's name from a presence list (`names`:
 * connection id → name) when known, else "another client". Anything else (an engine component) is shown as it is.
 */
export function answeredByWords(answeredBy, mine, names) {
  if (!answeredBy) return null;
  if (!answeredBy.startsWith('client:')) return answeredBy;
  const id = answeredBy.slice('client:'.length);
  if (mine.has(id)) return 'you';
  const name = names.get(id);
  return name ? `${name} (another client)` : 'another client';
}
