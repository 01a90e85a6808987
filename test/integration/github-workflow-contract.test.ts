import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { describe, expect, it, type TestContext } from 'vitest';
import { readMeta } from '../../functions/github/meta.ts';
import {
  inspectWorkflowContract,
  NONCE_LOST,
  readWorkflowContract,
} from '../../functions/github/workflow-contract.ts';
import { applyReport } from '../../functions/ledger/agent-reports.ts';
import * as t from '../../functions/ledger/schema.ts';
import { example, workflowJobEvent } from '../../scripts/sim/fake-github/harness.ts';
import { loadWorkflow } from '../../scripts/sim/fake-github/workflows.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';
import { hostEvidence } from '../helpers/host-evidence.ts';

/**
 * The spec's workflow contract, unchanged (docs/github-app.md "The workflow contract", ADR 0131):
 * a repository whose workflow is exactly the spec's four-input file gets a dispatch GitHub accepts,
 * its run identified from the dispatch answer, its job on the JIT runner, a bound check that ends
 * `success`; a workflow that breaks the contract is refused with the fix, before any dispatch.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';
const TIP = 'b'.repeat(40);
const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, '..', 'fixtures', 'workflows', name), 'utf8');
const SPEC = fixture('spec-spark-pr-test.yml');
const TEMPLATE = readFileSync(
  join(import.meta.dirname, '..', '..', 'workflows-templates', 'spark-pr-test.yml'),
  'utf8',
);

function labeled() {
  const p = example('pull_request', 'labeled');
  p.label.name = 'spark-test';
  p.sender.login = 'Codertocat';
  p.pull_request.labels = [{ ...p.label }];
  return p;
}

/**
 * `editedAfterEnable`: the repository is enabled with `enabledWith` (enable's own workflow check,
 * docs/adr/0165-enable-is-a-gate.md, refuses a workflow that breaks the contract) and its workflow
 * file changed to `workflowText` afterwards, as a later commit to the default branch would.
 */
async function world(ctx: TestContext, workflowText: string, o: { enabledWith?: string } = {}) {
  const h = await startHarnessFor(ctx);
  const repo = h.gh.addRepo(REPO, {
    installationId: 1,
    collaborators: { Codertocat: 'admin' },
    pulls: { 2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] } },
    headSha: TIP,
    workflows: { 'spark-pr-test.yml': loadWorkflow(o.enabledWith ?? workflowText) },
  });
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
  expect((await h.enable(REPO)).status).toBe(200);
  repo.workflows['spark-pr-test.yml'] = loadWorkflow(workflowText);
  await adoptAll(h.c.ledger);
  expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
  // the grant wakes the GitHub module at once (no polling tick), so a workflow that breaks the
  // contract can already be refused, and the reservation releasing, by the time this looks
  const granted = await h.until('allocated (or already refused)', async () => {
    const cur = await h.c.ledger.getReservation(undefined, 'r-1');
    return cur && cur.status !== 'queued' ? cur : null;
  });
  if (granted.status === 'allocated')
    await h.c.ledger.advanceReservation('r-1', 'preparing', 'every lease reported prepared', 'agent:spark-2');
  const meta = async () => readMeta((await h.c.ledger.getReservation(undefined, 'r-1'))!)!;
  return { h, meta };
}

describe('inspectWorkflowContract (pure)', () => {
  it('the spec’s four-input workflow keeps the contract; only the nonce protection is lost', () => {
    const c = inspectWorkflowContract(SPEC, 'spark-pr-test.yml');
    expect(c).toMatchObject({
      ok: true,
      nonce: false,
      sends: ['reservation_id', 'head_sha', 'topology', 'suite'],
      problems: [],
      warnings: [NONCE_LOST],
    });
    expect(NONCE_LOST).toMatch(/unguessable per-reservation runner label protection is lost/);
    expect(NONCE_LOST).toMatch(/the foreign-job stop still applies/);
  });

  it('the shipped template keeps it with the nonce', () => {
    expect(inspectWorkflowContract(TEMPLATE, 'spark-pr-test.yml')).toMatchObject({
      ok: true,
      nonce: true,
      warnings: [],
      sends: ['reservation_id', 'nonce', 'head_sha', 'topology', 'suite'],
    });
  });

  it('names the fix for a missing spec input, an input it cannot fill, a narrow choice, no dispatch trigger', () => {
    const noSuite = SPEC.replace(/ {6}suite:\n(?: {8}.*\n)+/, '');
    expect(inspectWorkflowContract(noSuite, 'w.yml').problems).toEqual([
      'input `suite` is not declared: the Spark workflow contract needs reservation_id, head_sha, topology, suite (docs/github-app.md)',
    ]);
    const extra = SPEC.replace(
      '    inputs:\n',
      '    inputs:\n      ticket:\n        required: true\n        type: string\n      note:\n        required: false\n        type: string\n',
    );
    const c = inspectWorkflowContract(extra, 'w.yml');
    expect(c.problems).toEqual([
      'input `ticket` is required and the controller cannot fill it: give it a default or make it optional',
    ]);
    expect(c.sends).not.toContain('note');
    const narrow = SPEC.replace('options: [smoke, performance]', 'options: [smoke]');
    expect(inspectWorkflowContract(narrow, 'w.yml').problems).toEqual([
      "input `suite` does not offer 'performance', which the controller sends: add it to its options",
    ]);
    expect(inspectWorkflowContract('on: push\njobs: {}\n', 'w.yml').problems[0]).toMatch(
      /no `on: workflow_dispatch`/,
    );
    expect(inspectWorkflowContract('on: [', 'w.yml').problems[0]).toMatch(/not valid YAML/);
  });

  it('reading the file again gives the contract of what it holds now, each read its own copy', async () => {
    // the contents API's answer for a file (REST "Get repository content": type, encoding, content)
    let text = TEMPLATE;
    const port = {
      client: {
        request: async () => ({
          data: { type: 'file', encoding: 'base64', content: Buffer.from(text).toString('base64') },
        }),
      },
    } as unknown as Parameters<typeof readWorkflowContract>[0];
    const read = () => readWorkflowContract(port, REPO, 'spark-pr-test.yml', 'main', 1);
    const first = await read();
    first.problems.push('changed by its caller');
    first.sends.length = 0;
    const again = await read();
    expect(again).toEqual(inspectWorkflowContract(TEMPLATE, 'spark-pr-test.yml'));
    text = SPEC.replace('options: [smoke, performance]', 'options: [smoke]');
    expect((await read()).problems).toEqual([
      "input `suite` does not offer 'performance', which the controller sends: add it to its options",
    ]);
  });
});

describe('the spec’s workflow contract against the fake GitHub', () => {
  it('a repository whose workflow is exactly the spec’s: dispatched, identified from the answer, picked up, bound, success', async (ctx) => {
    const { h, meta } = await world(ctx, SPEC);
    const handoff = await h.until('JIT handoff', async () => {
      const rows = await h.c.ledger.db
        .select()
        .from(t.jitHandoffs)
        .where(eq(t.jitHandoffs.reservationId, 'r-1'));
      return rows[0];
    });
    // exactly the four declared inputs: GitHub accepted the dispatch (a fifth would be a 422)
    expect(h.gh.dispatches).toEqual([
      {
        repo: REPO,
        workflow: 'spark-pr-test.yml',
        ref: 'main',
        inputs: { reservation_id: 'r-1', head_sha: SHA, topology: 'single', suite: 'smoke' },
      },
    ]);
    expect(h.gh.refused).toEqual([]);
    // the run is the one the dispatch answer named; nothing was listed or matched by name
    const run = h.gh.runs[0]!;
    expect(await meta()).toMatchObject({ runId: run.id, runAttempt: 1, nonceLabel: false });
    expect(h.gh.calls('GET', /\/actions\/workflows\/[^/]+\/runs/)).toEqual([]);
    const [recorded] = await h.c.ledger.db
      .select()
      .from(t.events)
      .where(eq(t.events.type, 'reservation.run_recorded'));
    expect(recorded?.cause).toMatch(/identified by the dispatch response/);
    // the runner carries the allocation labels only: the workflow declares no nonce
    expect(h.gh.runners.map((r) => r.labels)).toEqual([
      ['self-hosted', 'Linux', 'ARM64', 'waffuru-spark', 'spark-single'],
    ]);
    const picked = h.gh.pickUp(handoff.runnerName);
    expect(picked).toMatchObject({ runId: run.id, runnerName: handoff.runnerName, headSha: TIP });
    const started = await h.deliver('workflow_job', workflowJobEvent(picked!, 'in_progress'));
    expect((await started.json()).result).toBe('running r-1');
    const done = await h.deliver('workflow_job', workflowJobEvent(h.gh.completeJob(picked!.id), 'completed'));
    expect((await done.json()).result).toBe('r-1 outcome passed');
    // the agent reports the runner's exit with what it observed itself (ADR 0160): the check's
    // verdict is the host's, GitHub's conclusion alone does not pass it
    const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
    await applyReport(h.c.ledger, lease.hostId, {
      type: 'runner_exited',
      fencingToken: lease.fencingToken,
      runnerName: handoff.runnerName,
      exitCode: 0,
      lastLines: [],
      hostEvidence: hostEvidence(SHA, {
        workTrees: [{ path: 'Hello-World/Hello-World', sha: SHA, detail: 'detached HEAD' }],
      }),
    });
    const check = await h.until('passed check', () =>
      h.gh.checkRuns.find(
        (c) => c.external_id === 'r-1' && c.output.title === 'Spark test passed — evidence receipt recorded',
      ),
    );
    expect(check).toMatchObject({ conclusion: 'success', head_sha: SHA });
  });

  it('without the nonce, a job of another run on the runner is still stopped as foreign', async (ctx) => {
    const { h, meta } = await world(ctx, SPEC);
    const handoff = await h.until('JIT handoff', async () => {
      const rows = await h.c.ledger.db
        .select()
        .from(t.jitHandoffs)
        .where(eq(t.jitHandoffs.reservationId, 'r-1'));
      return rows[0];
    });
    await h.until('run recorded', async () => (await meta()).runId != null);
    // someone dispatches the same workflow by hand: its job asks for the same allocation labels
    // and is older, so GitHub hands it to our runner first
    const theirs = h.gh.jobs[0]!;
    theirs.runId = 880_001;
    const taken = h.gh.pickUp(handoff.runnerName)!;
    expect(taken.id).toBe(theirs.id);
    const res = await h.deliver('workflow_job', workflowJobEvent(taken, 'in_progress'));
    expect((await res.json()).result).toMatch(/^foreign job stopped: .*run 880001 is not the dispatched run/);
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({ outcome: 'foreign_job' });
  });

  it('a workflow changed after enable to break the contract is refused with the fix on the check, and nothing is dispatched', async (ctx) => {
    const ticket = SPEC.replace(
      '    inputs:\n',
      '    inputs:\n      ticket:\n        required: true\n        type: string\n',
    );
    const { h } = await world(ctx, ticket, { enabledWith: SPEC });
    const r = await h.until('refused', async () => {
      await h.drain();
      const cur = await h.c.ledger.getReservation(undefined, 'r-1');
      return cur?.outcome === 'github_failed' ? cur : null;
    });
    expect(r.status).toBe('releasing');
    const history = JSON.stringify(await h.c.ledger.history('reservation', 'r-1'));
    expect(history).toMatch(
      /breaks the Spark workflow contract: input `ticket` is required and the controller cannot fill it: give it a default or make it optional/,
    );
    expect(h.gh.dispatches).toEqual([]);
    expect(h.gh.calls('POST', /\/dispatches$/)).toEqual([]);
    expect(h.gh.calls('POST', /generate-jitconfig$/)).toEqual([]);
    const check = await h.until('the check says why', async () => {
      await h.drain();
      return h.gh.checkRuns.find(
        (c) => c.external_id === 'r-1' && /ticket/.test(`${c.output.title} ${c.output.summary}`),
      );
    });
    expect(check.output.summary).toMatch(/breaks the Spark workflow contract: input `ticket` is required/);
  });
});
