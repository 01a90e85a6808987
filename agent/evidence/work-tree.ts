import { join } from 'node:path';
import type { WorkTree } from '../../core/protocol/host-evidence.ts';
import { runCommand } from '../exec.ts';
import { runAsRunner } from '../host/sandbox.ts';
import type { RunnerAccount } from '../runner.ts';

/**
 * The commit in the work tree after the job (ADR 0160), read by the agent without running git:
 * the checkout belongs to the PR's code, which controls its `.git/config` and hooks
 * (`core.fsmonitor`, `core.hooksPath`, …), so nothing of it may execute as anyone. The agent
 * reads `.git/HEAD`, and for a symbolic HEAD the ref's file or `packed-refs`, as plain bytes.
 *
 * The files are read as the runner user (the lease helper's `as-runner`, ADR 0155, like every
 * other touch of the job's files):
 * the PR's code can point any of them at any path with a symlink, and as the runner user such a
 * link reaches nothing the job could not read anyway — never the agent's token or state. Only a
 * commit id or a ref name is ever taken from what is read; nothing else of it leaves the host.
 *
 * Where: a GitHub runner's work folder is `<runner root>/<workFolder>` (actions/runner
 * `src/Runner.Common/HostContext.cs`, `WellKnownDirectory.Work`; the controller registers every
 * JIT runner with `work_folder: "_work"`, functions/github/senders.ts), and a repository's
 * checkout is `<workFolder>/<repo>/<repo>` (`src/Runner.Worker/TrackingConfig.cs`).
 */

/** The work folder the controller asks GitHub for (`generate-jitconfig`'s `work_folder`). */
export const RUNNER_WORK_FOLDER = '_work';

const MAX_TREES = 8;
const READ_TIMEOUT_MS = 10_000;
const NAME = /^[A-Za-z0-9._-]{1,100}$/;

/** Lists `<x>/<x>` checkouts (the runner's own `_*` dirs skipped) with their HEAD and packed-refs, base64. */
const LIST_SCRIPT = `cd -- "$1" 2>/dev/null || { echo nofolder; exit 0; }
for d in */*/; do
  [ -d "$d" ] || continue
  d=\${d%/}; a=\${d%%/*}; b=\${d#*/}
  [ "$a" = "$b" ] || continue
  case "$a" in _*|*[!A-Za-z0-9._-]*) continue ;; esac
  printf 'tree %s\\n' "$d"
  g="$d/.git"
  [ -d "$g" ] || { printf 'nogit %s\\n' "$d"; continue; }
  [ -f "$g/HEAD" ] && printf 'HEAD %s %s\\n' "$d" "$(head -c 4096 -- "$g/HEAD" | base64 -w0)"
  [ -f "$g/packed-refs" ] && printf 'packed %s %s\\n' "$d" "$(head -c 1048576 -- "$g/packed-refs" | base64 -w0)"
done
exit 0`;

/** Prints each named file (relative to the folder) base64, or `-` when it is no regular file. */
const READ_SCRIPT = `cd -- "$1" 2>/dev/null || exit 0
shift
for f; do
  if [ -f "$f" ]; then printf 'file %s %s\\n' "$f" "$(head -c 4096 -- "$f" | base64 -w0)"; else printf 'file %s -\\n' "$f"; fi
done
exit 0`;

const SHA1 = /^[0-9a-f]{40}$/;
/** A ref name git itself would write: `refs/…` of plain segments, no `..`, no control characters. */
const REF = /^refs\/(?!.*(^|\/)\.)(?!.*\.\.)[A-Za-z0-9._/-]{1,200}$/;

export type HeadFile =
  | { kind: 'sha'; sha: string }
  | { kind: 'ref'; ref: string }
  | { kind: 'bad'; why: string };

/** What a `.git/HEAD` says: a detached commit, a symbolic ref, or neither (never echoing it). */
export function parseHead(text: string): HeadFile {
  const line = text.split('\n')[0]!.trim();
  if (SHA1.test(line)) return { kind: 'sha', sha: line };
  const m = /^ref: (\S+)$/.exec(line);
  if (m && REF.test(m[1]!)) return { kind: 'ref', ref: m[1]! };
  if (/^[0-9a-f]{64}$/.test(line))
    return { kind: 'bad', why: 'HEAD is a SHA-256 object id, not a SHA-1 commit' };
  return { kind: 'bad', why: 'HEAD is neither a commit id nor a ref' };
}

/** The commit of `ref` from its loose file (when present) or from `packed-refs`. */
export function resolveRef(ref: string, loose: string | null, packed: string | null): string | null {
  if (loose != null) {
    const line = loose.split('\n')[0]!.trim();
    return SHA1.test(line) ? line : null;
  }
  for (const line of (packed ?? '').split('\n')) {
    // `<sha> <ref>`; `#` headers and `^<sha>` peeled lines are skipped
    const m = /^([0-9a-f]{40}) (\S+)$/.exec(line.trim());
    if (m && m[2] === ref) return m[1]!;
  }
  return null;
}

type Runner = (script: string, args: string[]) => Promise<string | null>;

function shellAs(account: RunnerAccount | null): Runner {
  return async (script, args) => {
    const argv = ['/bin/sh', '-c', script, 'spark-evidence', ...args];
    // a clean, fixed environment: nothing of the agent's, nothing the job could have set
    const env = { PATH: '/usr/bin:/bin', LC_ALL: 'C' };
    const r = account
      ? await runAsRunner(account, argv, { timeoutMs: READ_TIMEOUT_MS, env })
      : await runCommand(argv, { timeoutMs: READ_TIMEOUT_MS, env, cwd: '/' });
    return r.code === 0 ? r.stdout : null;
  };
}

const unb64 = (s: string | undefined) =>
  s == null || s === '-' ? null : Buffer.from(s, 'base64').toString('utf8');

/**
 * The checkouts in `workFolder` and the commit each one's HEAD names. Never throws: a folder that
 * cannot be read gives no tree, a HEAD that cannot be resolved gives `sha: null` with why.
 */
export async function readWorkTrees(
  workFolder: string,
  account: RunnerAccount | null,
  run: Runner = shellAs(account),
): Promise<{ trees: WorkTree[]; detail: string }> {
  const listed = await run(LIST_SCRIPT, [workFolder]);
  if (listed == null) return { trees: [], detail: 'the work folder could not be read' };
  if (listed.trim() === 'nofolder') return { trees: [], detail: 'the runner made no work folder' };
  const head = new Map<string, string | null>();
  const packed = new Map<string, string | null>();
  const order: string[] = [];
  for (const line of listed.split('\n')) {
    const [kind, path, data] = line.split(' ');
    if (!path) continue;
    const [a, b] = path.split('/');
    if (!a || a !== b || !NAME.test(a)) continue;
    if (kind === 'tree' && !order.includes(path)) order.push(path);
    else if (kind === 'HEAD') head.set(path, unb64(data));
    else if (kind === 'packed') packed.set(path, unb64(data));
  }
  const trees: WorkTree[] = [];
  const want: { path: string; ref: string }[] = [];
  for (const path of order.slice(0, MAX_TREES)) {
    const h = head.get(path);
    if (h == null) {
      trees.push({ path, sha: null, detail: 'no .git/HEAD in the checkout' });
      continue;
    }
    const parsed = parseHead(h);
    if (parsed.kind === 'sha') trees.push({ path, sha: parsed.sha, detail: 'detached HEAD' });
    else if (parsed.kind === 'bad') trees.push({ path, sha: null, detail: parsed.why });
    else {
      trees.push({ path, sha: null, detail: parsed.ref });
      want.push({ path, ref: parsed.ref });
    }
  }
  if (want.length) {
    const read = await run(READ_SCRIPT, [workFolder, ...want.map((w) => join(w.path, '.git', w.ref))]);
    const loose = new Map<string, string | null>();
    for (const line of (read ?? '').split('\n')) {
      const [kind, file, data] = line.split(' ');
      if (kind === 'file' && file) loose.set(file, unb64(data));
    }
    for (const w of want) {
      const t = trees.find((x) => x.path === w.path)!;
      const sha = resolveRef(
        w.ref,
        loose.get(join(w.path, '.git', w.ref)) ?? null,
        packed.get(w.path) ?? null,
      );
      t.sha = sha;
      t.detail = sha ? `HEAD is ${w.ref}` : `HEAD is ${w.ref}, which names no commit`;
    }
  }
  return {
    trees,
    detail: trees.length
      ? `${trees.length} checkout(s) in the work folder`
      : 'no checkout in the work folder',
  };
}

/** The work folder of the runner installed in `runnerDir`. */
export function runnerWorkFolder(runnerDir: string): string {
  return join(runnerDir, RUNNER_WORK_FOLDER);
}
