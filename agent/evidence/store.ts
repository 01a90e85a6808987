import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { type HostPreflight, HostPreflightSchema } from '../../core/protocol/host-evidence.ts';
import { childPath } from '../executor/work-dir.ts';

/**
 * Where the agent keeps a lease's host preflight until it reports the runner's exit (ADR 0160):
 * `<state dir>/evidence/<lease id>.json`, the agent's own 0700 dir beside its state file (never
 * the runner user's), written like the state file (temp file, fsync, rename) so a restarted agent
 * still reports the preflight it ran before the runner started. One lease at a time: writing one
 * removes the others.
 */

function dirOf(stateFile: string): string {
  return join(dirname(stateFile), 'evidence');
}

export function saveHostPreflight(stateFile: string, leaseId: string, p: HostPreflight): void {
  const dir = dirOf(stateFile);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = childPath(dir, `${leaseId}.json`);
  for (const f of readdirSync(dir)) if (join(dir, f) !== file) rmSync(join(dir, f), { force: true });
  const tmp = `${file}.tmp`;
  const fd = openSync(tmp, 'w', 0o600);
  try {
    writeSync(fd, JSON.stringify(p));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
}

/** The preflight recorded for `leaseId`, or null (none ran, or the file is not in its shape). */
export function loadHostPreflight(stateFile: string, leaseId: string): HostPreflight | null {
  try {
    const file = childPath(dirOf(stateFile), `${leaseId}.json`);
    const parsed = HostPreflightSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** Forgets the recorded preflight once its evidence was reported. */
export function dropHostPreflight(stateFile: string, leaseId: string): void {
  try {
    rmSync(childPath(dirOf(stateFile), `${leaseId}.json`), { force: true });
  } catch {
    // an id that is no plain name was never written
  }
}
