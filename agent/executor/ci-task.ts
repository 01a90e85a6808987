import { createHash } from 'node:crypto';
import type { CiTask } from '../../core/protocol/agent.ts';
import {
  describeIssues,
  laneTiming,
  MAX_RECEIPT_LAST_LINES,
  MAX_RECEIPT_LINE_CHARS,
  type Receipt,
  ReceiptSchema,
} from '../../core/protocol/receipt.ts';
import { type AgentConfig, hostEnv } from '../config.ts';
import type { LeaseState } from '../state-file.ts';
import { baseRunnerEnv } from './runner-env.ts';
import type { TaskOutput } from './types.ts';

export type { TaskOutput } from './types.ts';

/**
 * CI as a dstack task (ADR 0110): what the task runs, and the receipt the agent builds
 * from how it ended. The task replaces the GitHub job's in-job steps: it checks out exactly the
 * admitted SHA, binds it (`git rev-parse HEAD` must equal it, or the script never runs), then runs
 * the repository's script once for the lane with the spark-test action's environment.
 */

/**
 * The task's hard limit, in minutes: the dispatched workflow's `timeout-minutes` (the spec's 120),
 * so a task ends where a GitHub job would. The lane's time target (30/60 minutes) is not a limit:
 * a run over it goes on, and the receipt says it went over (docs/in-job.md).
 */
export const TASK_LIMIT_MINUTES = 120;

/** Every line the task's own steps print starts with this; the agent reads them back from the logs. */
export const TASK_MARK = 'spark-task:';

/** The task's own line (after {@link TASK_MARK}) once GitHub answered its token's revoke with 204. */
const REVOKED_LINE = 'clone token revoked: ';

/** Exit codes of the task's own steps, before the repository's script runs. */
export const TASK_EXIT = {
  workspace: 80,
  checkout: 81,
  binding: 82,
  noScript: 83,
  noAssertion: 84,
  revoke: 85,
} as const;

/**
 * How many times the task asks GitHub to revoke its clone token before it gives up (ADR 0115):
 * a 5xx, a 429 or no answer is tried again after 2 s, then 4 s; any other answer is final.
 */
export const REVOKE_ATTEMPTS = 3;

/**
 * The task's shell functions that revoke its clone token (ADR 0115): GitHub's "Revoke an
 * installation access token", `DELETE $SPARK_REVOKE_URL` authenticated with the token itself,
 * answers 204 and the token is dead for every later use. Only 204 counts. The token never reaches
 * argv: `printf` is a shell builtin, curl reads the header from stdin (`-H @-`, curl ≥ 7.55), GNU
 * wget (which reads headers only from argv or a wgetrc file, and refuses a pipe as wgetrc) from a
 * 0600 file in a fresh private directory removed right after — nothing of the PR runs yet. With
 * neither client the task fails closed naming what to install. `revoke_token` prints one
 * `clone token revoked: …` or `clone token revoke failed: …` line and returns 0 only on 204.
 */
export const REVOKE_FUNCTIONS = `revoke_once() {
  if [ "$1" = curl ]; then
    printf 'Authorization: Bearer %s\\n' "$SPARK_CLONE_TOKEN" | curl -sS -o /dev/null -w '%{http_code}' --max-time 20 -X DELETE -H @- -H 'Accept: application/vnd.github+json' "$SPARK_REVOKE_URL" 2>/dev/null
  else
    d=$(mktemp -d) || return 0
    (umask 077 && printf 'header = Authorization: Bearer %s\\n' "$SPARK_CLONE_TOKEN" > "$d/wgetrc")
    WGETRC="$d/wgetrc" wget -S -O /dev/null --tries=1 --timeout=20 --method=DELETE --header='Accept: application/vnd.github+json' "$SPARK_REVOKE_URL" 2>&1 | sed -n 's/^ *HTTP\\/[0-9.]* \\([0-9][0-9][0-9]\\).*/\\1/p' | tail -n 1
    rm -rf "$d"
  fi
}
revoke_token() {
  if [ -z "\${SPARK_REVOKE_URL:-}" ]; then
    say "clone token revoke failed: the controller handed over no revoke URL (upgrade the controller); the script did not run"
    return 1
  fi
  if command -v curl >/dev/null 2>&1; then how=curl
  elif wget --help 2>&1 | grep -q -- '--method'; then how=wget
  else
    say "clone token revoke failed: the task image has neither curl nor GNU wget; install curl in the image (the token must be dead before the repository's code runs); the script did not run"
    return 1
  fi
  n=0
  while :; do
    n=$((n + 1))
    code=$(revoke_once "$how")
    code=\${code:-000}
    if [ "$code" = 204 ]; then say "clone token revoked: HTTP 204 from $SPARK_REVOKE_URL ($how)"; return 0; fi
    case "$code" in
      5??|429|000) if [ "$n" -lt ${REVOKE_ATTEMPTS} ]; then sleep $((n * 2)); continue; fi ;;
    esac
    break
  done
  if [ "$code" = 000 ]; then got="no answer"; else got="HTTP $code"; fi
  say "clone token revoke failed: $got from $SPARK_REVOKE_URL after $n attempt(s) ($how); the script did not run"
  return 1
}`;

/**
 * The task's commands: one POSIX shell program, no secret in it (the clone token is in the task's
 * environment; git reads it through `GIT_CONFIG_*` variables, never argv; right after the fetch
 * the token is revoked with GitHub, or the task fails closed (ADR 0115), and the repository's
 * code runs in a fresh process without it in its environment). The script runs once: with
 * SPARK_TEST_SUITE=performance it runs correctness first itself. Only the task's hard limit
 * ({@link TASK_LIMIT_MINUTES}) stops it: TERM, KILL 10 s later (`timeout`), exit 124 — never the
 * lane's target. `--foreground` keeps `timeout` in the task's process group (by default it makes
 * its own), so stopping the task through dstack reaches the script and everything it started.
 */
export const TASK_PROGRAM = `set -u
say() { printf '${TASK_MARK} %s\\n' "$*"; }
${REVOKE_FUNCTIONS}
ws="$SPARK_WORK_DIR/checkout"
rm -rf "$ws" && mkdir -p "$ws" && cd "$ws" || { say "cannot make the checkout dir $ws"; revoke_token; exit ${TASK_EXIT.workspace}; }
say "fetching $SPARK_HEAD_SHA from $SPARK_CLONE_URL"
auth=$(printf 'x-access-token:%s' "$SPARK_CLONE_TOKEN" | base64 | tr -d '\\n')
export GIT_TERMINAL_PROMPT=0 GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=http.extraHeader GIT_CONFIG_VALUE_0="Authorization: Basic $auth"
git init -q . && git fetch -q --depth 1 "$SPARK_CLONE_URL" "$SPARK_HEAD_SHA" && git -c advice.detachedHead=false checkout -q FETCH_HEAD
rc=$?
unset GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0 auth
# the token is not needed past the fetch: it dies now, whatever the fetch did (ADR 0115), so no
# process that still holds it (dstack's runner, /proc/<pid>/environ) leaks a live credential
[ "$rc" -eq 0 ] || { say "checkout failed: git could not fetch $SPARK_HEAD_SHA (exit $rc); the script did not run"; revoke_token; exit ${TASK_EXIT.checkout}; }
revoke_token || exit ${TASK_EXIT.revoke}
# the rest runs in a fresh process without the token in its environment (/proc/<pid>/environ
# keeps a process's initial environment; \`unset\` alone would leave it readable there)
stage2=$(cat <<'SPARK_STAGE2'
say() { printf '${TASK_MARK} %s\\n' "$*"; }
head=$(git rev-parse HEAD 2>/dev/null || echo none)
if [ "$head" != "$SPARK_HEAD_SHA" ]; then
  say "commit binding failed: HEAD is $head, not the admitted $SPARK_HEAD_SHA; the script did not run"
  exit ${TASK_EXIT.binding}
fi
say "commit binding ok: HEAD is $head"
say "toolchain source: $head"
say "toolchain git: $(git --version 2>&1)"
say "toolchain bash: $(bash --version 2>&1 | head -n 1)"
say "toolchain kernel: $(uname -srm 2>&1)"
[ -f "$SPARK_SCRIPT" ] || { say "$SPARK_SCRIPT does not exist in the repository: copy the template from the Spark controller's workflows-templates/"; exit ${TASK_EXIT.noScript}; }
if [ "$SPARK_TOPOLOGY" = pair ]; then
  [ -n "\${SPARK_ASSERTION_PATH:-}" ] || { say "topology pair needs a real distributed assertion: declare a script that proves both hosts computed together (repositories.<owner/name>.distributedAssertion); without one a pair run would pass vacuously, so it fails"; exit ${TASK_EXIT.noAssertion}; }
  [ -f "$SPARK_ASSERTION_PATH" ] || { say "the declared distributed assertion $SPARK_ASSERTION_PATH does not exist in the repository"; exit ${TASK_EXIT.noAssertion}; }
  export SPARK_DISTRIBUTED_ASSERTION="$PWD/$SPARK_ASSERTION_PATH"
fi
say "phase $SPARK_SUITE start"
t0=$(date +%s%3N)
SPARK_TEST_SUITE=$SPARK_SUITE timeout --foreground --signal=TERM --kill-after=10 ${TASK_LIMIT_MINUTES}m bash "$SPARK_SCRIPT" "$SPARK_TOPOLOGY" </dev/null
rc=$?
say "phase $SPARK_SUITE exit $rc ms $(( $(date +%s%3N) - t0 ))"
exit "$rc"
SPARK_STAGE2
)
exec env -u SPARK_CLONE_TOKEN /bin/sh -c "$stage2"`;

/**
 * The task's environment: the host basics, the spark-test action's variables, the clone token
 * and where to revoke it.
 */
export function taskEnv(
  cfg: AgentConfig,
  l: LeaseState,
  task: CiTask,
  cloneToken: string,
): Record<string, string> {
  const env: Record<string, string | undefined> = {
    ...baseRunnerEnv(hostEnv, cfg.runner.passEnv),
    ...(cfg.service
      ? { SPARK_HOME_SERVICE: cfg.service.name, SPARK_SERVICE_HEALTH_URL: cfg.service.healthUrl }
      : {}),
    SPARK_RESERVATION_ID: l.reservationId,
    SPARK_HOST_ID: cfg.hostId,
    SPARK_REPO: task.repo,
    SPARK_HEAD_SHA: task.headSha,
    SPARK_CLONE_URL: task.cloneUrl,
    SPARK_CLONE_TOKEN: cloneToken,
    SPARK_REVOKE_URL: task.revokeUrl,
    SPARK_SCRIPT: task.script,
    SPARK_ASSERTION_PATH: task.distributedAssertion,
    SPARK_SUITE: task.suite,
    SPARK_TOPOLOGY: l.topology,
    SPARK_LANE: task.lane.name,
    SPARK_LANE_TARGET_MINUTES: String(task.lane.targetMinutes),
    SPARK_WORK_DIR: l.workDir,
    SPARK_MODEL_CACHE: cfg.modelCacheDir,
    SPARK_EXECUTOR: 'dstack',
  };
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
}

/**
 * The agent's backstop for a task that ended without revoking its clone token (ADR 0115: it
 * failed closed, had no HTTP client, was stopped before the fetch finished): the same `DELETE
 * <revokeUrl>` with the token itself, from the agent's own HTTP client, once, bounded. `204` is
 * revoked; `401` means GitHub no longer takes the token (revoked or expired) — dead either way.
 * Never throws; the token is never in the outcome.
 */
export async function revokeCloneToken(
  revokeUrl: string,
  cloneToken: string,
  timeoutMs = 5000,
): Promise<{ dead: boolean; detail: string }> {
  try {
    const res = await fetch(revokeUrl, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${cloneToken}`, accept: 'application/vnd.github+json' },
      signal: AbortSignal.timeout(timeoutMs),
    });
    await res.body?.cancel();
    if (res.status === 204) return { dead: true, detail: 'HTTP 204 (revoked)' };
    if (res.status === 401) return { dead: true, detail: 'HTTP 401 (GitHub no longer takes it)' };
    return { dead: false, detail: `HTTP ${res.status}` };
  } catch (e) {
    return { dead: false, detail: `no answer (${(e as Error).name})` };
  }
}

/** The secrets a task's output must never show: the token, and the Basic credential git sends. */
export function taskSecrets(cloneToken: string): string[] {
  return [cloneToken, Buffer.from(`x-access-token:${cloneToken}`).toString('base64')];
}

const redact = (line: string, secrets: readonly string[]): string => {
  let out = line;
  for (const s of secrets) if (s) out = out.split(s).join('***');
  return out.length > MAX_RECEIPT_LINE_CHARS ? `${out.slice(0, MAX_RECEIPT_LINE_CHARS - 1)}…` : out;
};

/**
 * The task's evidence receipt — the same fields as the spark-test action's, naming backend
 * `dstack` and mode `task` — from the task's exit (dstack's job status) and its output. The task's
 * own lines are read only up to `phase … start`: what follows may be the repository's code, which
 * could print anything; its phases are taken from `phase … exit` lines only after that.
 */
export function taskReceipt(a: {
  lease: LeaseState;
  hostId: string;
  task: CiTask;
  exitCode: number | null;
  stopped: boolean;
  startedAt: number;
  endedAt: number;
  output: TaskOutput;
  secrets: readonly string[];
  tailLines?: number;
}): Receipt {
  const { lease, task, output } = a;
  const lines = output.text.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  const firstPhase = lines.findIndex((x) => x.startsWith(`${TASK_MARK} phase `));
  const preamble = firstPhase < 0 ? lines : lines.slice(0, firstPhase);
  const own = preamble.filter((x) => x.startsWith(TASK_MARK)).map((x) => x.slice(TASK_MARK.length + 1));
  const bound = own.some((x) => x === `commit binding ok: HEAD is ${task.headSha}`);
  // ADR 0115: the clone token was dead before anything of the PR ran (the task prints this line
  // only after GitHub answered the revoke with 204); no pass without it
  const revoked = own.find((x) => x.startsWith(REVOKED_LINE));
  const toolchain: Record<string, string> = {};
  if (revoked) toolchain.cloneToken = `revoked: ${revoked.slice(REVOKED_LINE.length)}`.slice(0, 200);
  for (const x of own) {
    const m = /^toolchain ([a-z]{1,40}): (.*)$/.exec(x);
    if (m && Object.keys(toolchain).length < 20) toolchain[m[1]!] = m[2]!.slice(0, 200);
  }
  const phases: Receipt['phases'] = [];
  for (const x of firstPhase < 0 ? [] : lines.slice(firstPhase)) {
    const m = new RegExp(`^${TASK_MARK} phase (smoke|performance) exit (\\d+) ms (\\d+)$`).exec(x);
    if (!m || phases.length >= 2 || phases.some((p) => p.suite === m[1])) continue;
    phases.push({ suite: m[1] as 'smoke' | 'performance', exitCode: Number(m[2]), durationMs: Number(m[3]) });
  }
  // one run of the script for the lane's suite (it runs correctness first itself)
  const ran = phases.find((p) => p.suite === task.suite);
  const passed = !a.stopped && a.exitCode === 0 && bound && !!revoked && ran?.exitCode === 0;
  const failedEarly = own.find(
    (x) =>
      /^(commit binding failed|checkout failed|clone token revoke failed|cannot make|topology pair needs|the declared distributed assertion)/.test(
        x,
      ) ||
      x.endsWith(
        "does not exist in the repository: copy the template from the Spark controller's workflows-templates/",
      ),
  );
  const reason = a.stopped
    ? 'the task was stopped through dstack before it ended (the work was released)'
    : failedEarly
      ? failedEarly
      : !bound
        ? output.endedBy && a.exitCode == null
          ? // dstack ended it before it ran: the cause in the spec's words, not a test result (ADR 0177)
            `${lease.runner?.startReported ? '' : 'the task never started: '}${output.endedBy}; the script did not run`
          : `the task ended (exit ${a.exitCode ?? 'unknown'}) before binding the commit; the script did not run`
        : a.exitCode === 124
          ? `the task reached its ${TASK_LIMIT_MINUTES}-minute limit (the workflow's timeout-minutes) and was stopped`
          : a.exitCode !== 0
            ? `${phases.at(-1)?.suite ?? 'smoke'} phase exited ${phases.at(-1)?.exitCode ?? a.exitCode ?? 'by signal'}`
            : !revoked
              ? 'the task exited 0 without reporting its clone token revoked before the script ran'
              : !passed
                ? `the task exited 0 but did not report its ${task.suite} phase`
                : null;
  const elapsedMs = Math.max(0, a.endedAt - a.startedAt);
  const bytes = Buffer.byteLength(output.text);
  const n = Math.min(a.tailLines ?? 40, MAX_RECEIPT_LAST_LINES);
  const tail = [
    ...(output.complete
      ? []
      : [`(dstack logs incomplete: ${output.detail ?? 'not all output could be read'})`]),
    ...lines,
  ]
    .slice(-n)
    .map((x) => redact(x, a.secrets));
  const receipt: Receipt = {
    version: 1,
    reservationId: lease.reservationId,
    hostId: a.hostId,
    fencingToken: lease.fencingToken,
    headSha: task.headSha,
    repo: task.repo,
    suite: task.suite,
    topology: lease.topology,
    executor: 'dstack',
    mode: 'task',
    phases,
    startedAt: new Date(a.startedAt).toISOString(),
    endedAt: new Date(Math.max(a.endedAt, a.startedAt)).toISOString(),
    result: passed ? 'passed' : a.stopped ? 'cancelled' : 'failed',
    exitCode: a.exitCode,
    ...(reason ? { reason: redact(reason, a.secrets).slice(0, 500) } : {}),
    log: {
      sha256: createHash('sha256').update(output.text).digest('hex'),
      bytes,
      lines: lines.length,
    },
    lane: laneTiming(task.lane.name, task.lane.targetMinutes, elapsedMs),
    ...(passed || n === 0 ? {} : { lastLines: tail }),
    toolchain,
  };
  const parsed = ReceiptSchema.safeParse(receipt);
  if (!parsed.success)
    throw new TypeError(
      `internal: the task receipt does not match its schema: ${describeIssues(parsed.error)}`,
    );
  return parsed.data;
}
