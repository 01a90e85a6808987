/** `file:PATH`, `file:///PATH` or `file://localhost/PATH` → PATH. */
export function pathOfFileUrl(url: string): string {
  if (!url.startsWith('file:')) throw new TypeError(`expected a file: URL, got ${JSON.stringify(url)}`);
  let rest = url.slice('file:'.length);
  const q = rest.indexOf('?');
  if (q >= 0) throw new TypeError(`file: URL ${JSON.stringify(url)}: query parameters are not supported`);
  if (rest.startsWith('//')) {
    const slash = rest.indexOf('/', 2);
    const host = rest.slice(2, slash < 0 ? undefined : slash);
    if (host !== '' && host.toLowerCase() !== 'localhost') {
      throw new TypeError(
        `Invalid host in file URL ${JSON.stringify(url)}: an absolute path starts with one slash (file:/abs/path.db) or three (file:///abs/path.db)`,
      );
    }
    rest = slash < 0 ? '' : rest.slice(slash);
  }
  if (!rest) throw new TypeError(`file: URL ${JSON.stringify(url)} names no file`);
  return decodeURIComponent(rest);
}
