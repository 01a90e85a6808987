import { chmodSync } from 'node:fs';

/**
 * Runs a command that must see `dir` read-only, as a Spark host shows a job the managed model
 * cache. As root (mode bits do not stop root) the command runs in a mount namespace of its own in
 * which `dir` is a read-only bind mount of itself (unshare(1) makes the namespace's mounts private,
 * so nothing outside sees it, and it ends with the process); otherwise `dir` loses its write bits.
 * Returns the command and arguments to spawn instead of `cmd args`.
 */
export function readOnlyView(dir: string, cmd: string, args: readonly string[]): [string, string[]] {
  if (process.getuid?.() !== 0) {
    chmodSync(dir, 0o555);
    return [cmd, [...args]];
  }
  return [
    '/usr/bin/unshare',
    ['--mount', '/bin/sh', '-c', '/usr/bin/mount --bind -o ro "$0" "$0" && exec "$@"', dir, cmd, ...args],
  ];
}
