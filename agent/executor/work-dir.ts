import { isAbsolute, join, relative, resolve } from 'node:path';

/** Thrown when a path handed to the agent would leave its work root. */
export class PathOutsideRoot extends Error {
  override name = 'PathOutsideRoot';
}

/**
 * `root/name` when `name` is one plain path segment and the result stays strictly under `root`;
 * throws {@link PathOutsideRoot} otherwise (a `runnerName` of `../../victim` must never reach `rm`).
 */
export function childPath(root: string, name: string): string {
  if (!name || name === '.' || name === '..' || /[/\\\0]/.test(name)) {
    throw new PathOutsideRoot(`refusing path segment ${JSON.stringify(name.slice(0, 80))}: not a plain name`);
  }
  const p = join(root, name);
  assertUnder(root, p);
  return p;
}

/** Throws {@link PathOutsideRoot} unless `path` is strictly below `root` (lexically, after resolving). */
export function assertUnder(root: string, path: string): void {
  const rel = relative(resolve(root), resolve(path));
  if (!rel || rel.startsWith('..') || isAbsolute(rel) || resolve(root, rel) !== resolve(path)) {
    throw new PathOutsideRoot(`refusing ${path}: not under ${root}`);
  }
}
