// Paths as a narrow list shows them: the end of a path tells sessions apart (`…/code/api` and `…/code/web`),
// where its beginning (`/home/me/c…`) is the same for every one.

/** `dir` cut to its last `keep` folders behind `…/` when it has more; the whole path otherwise. */
export function shortDir(dir, keep = 2) {
  if (!dir) return '';
  const parts = dir.split('/').filter((part) => part !== '');
  if (parts.length <= keep) return dir;
  return `…/${parts.slice(-keep).join('/')}`;
}
