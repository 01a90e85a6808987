import { sign } from '@octokit/webhooks-methods';
import { eq, sql } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { createRequestGate } from '../../functions/admission-loop.ts';
import { createAgentToken, createApiToken } from '../../functions/auth/tokens.ts';
import { renderCheckRun } from '../../functions/github/check-run.ts';
import { createGitHubService } from '../../functions/github/create-service.ts';
import { readMeta } from '../../functions/github/meta.ts';
import { renderContextFor } from '../../functions/github/senders.ts';
import * as t from '../../functions/ledger/schema.ts';
import { silentLogger } from '../../functions/log.ts';
import { isolateIdentity } from '../../functions/process-identity.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { createViewsMemo } from '../../functions/views.ts';
import { SECRET } from '../../scripts/sim/fake-github/harness.ts';
import { adoptAll, makeTestLedger, type TestLedger } from '../../scripts/sim/ledger.ts';
import { startAgentSim } from '../../scripts/sim/load/agent-sim.ts';
import { type ControllerGroup, startControllerProcesses } from '../../scripts/sim/load/controllers.ts';
import {
  githubBody,
  LOAD_INSTALLATION,
  LOAD_REPO,
  MAINTAINER,
  OUTSIDER,
  planDeliveries,
  pullRequestEvent,
  sendAll,
  sendDelivery,
  workflowJob,
} from '../../scripts/sim/load/deliveries.ts';
import {
  type FakeGitHubProcess,
  startFakeGitHubProcess,
} from '../../scripts/sim/load/fake-github-process.ts';
import { replayGrants } from '../helpers/load/verify.ts';

/**
 * load: four controller processes (`node --import tsx functions/node.ts`) share one
 * libSQL ledger file and receive signed deliveries at high concurrency, spread over the four,
 * with redeliveries of the same X-GitHub-Delivery to a different process and related events out
 * of order. A minimal agent per host keeps admission busy (grant → prepare → run → release).
 * Each process acknowledges a delivery after one insert (202) and processes its inbox afterwards.
 * Afterwards the ledger and the fake GitHub must show: every first attempt answered 2xx (nothing
 * is resent: a delivery GitHub saw fail is a failure, not a retry), zero lost deliveries,
 * duplicates deduplicated, zero double grants in the replayed history, and every check run in
 * the state its reservation renders to once the outbox has drained.
 *
 * `npm test` sends 400; `npm run test:long` (SPARK_TEST_LONG=1) sends 2,000. Replay a run with
 * SPARK_LOAD_SEED=<seed> (printed on failure) and SPARK_LOAD_SENDS=<n>.
 */

const LONG = process.env.SPARK_TEST_LONG === '1';
const SENDS = Number(process.env.SPARK_LOAD_SENDS ?? (LONG ? 2000 : 400));
/** `npm test` runs a recorded seed (a CI run never fails by the luck of a seed); test:long a new one, printed. */
const RECORDED_SEED = 43575009;
const SEED = Number(process.env.SPARK_LOAD_SEED ?? (LONG ? Date.now() % 1_000_000_000 : RECORDED_SEED));
const PROCESSES = 4;
const CONCURRENCY = 64;
const HOSTS = ['spark-1', 'spark-2', 'spark-3', 'spark-4'];

const config = {
  hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }, { id: 'spark-3' }, { id: 'spark-4' }],
  budgets: { maxPrs: 1000, maxGpusPerPr: 8, maxGpus: 8 },
  // nothing may change by the clock while the final state is compared
  timings: { heartbeatIntervalS: 10, offlineAfterS: 3600, ciLeaseTtlS: 3600 },
  // a running controller has its permission answers cached; the burst starts warm (see below)
  github: { permissionCacheS: 3600 },
};

let gh: FakeGitHubProcess | null = null;
let group: ControllerGroup | null = null;
let tl: TestLedger | null = null;
afterAll(async () => {
  await group?.stop();
  await gh?.close();
  tl?.close();
});

async function count(table: string): Promise<number> {
  const rows = await tl!.ledger.db.all<{ n: number }>(sql.raw(`SELECT count(*) AS n FROM ${table}`));
  return rows[0]!.n;
}

describe(`webhook load: ${SENDS} deliveries over ${PROCESSES} controller processes on one ledger`, () => {
  it('no lost or doubled delivery, no double grant, every check run final', {
    timeout: LONG ? 600_000 : 180_000,
  }, async () => {
    const ctx = `seed ${SEED} (replay: SPARK_LOAD_SEED=${SEED} SPARK_LOAD_SENDS=${SENDS})`;
    const prs = Math.max(8, Math.round(SENDS / 12));
    const started = performance.now();
    const phases: string[] = [];
    const phase = (what: string) =>
      phases.push(`${what} ${((performance.now() - started) / 1000).toFixed(1)}s`);
    const plan = await planDeliveries({ sends: SENDS, seed: SEED, targets: PROCESSES, prs });

    gh = await startFakeGitHubProcess([
      {
        fullName: LOAD_REPO,
        installationId: LOAD_INSTALLATION,
        defaultBranch: 'main',
        collaborators: { [MAINTAINER]: 'maintain', [OUTSIDER]: 'write' },
        pulls: Object.fromEntries(
          Object.entries(plan.prHeads).map(([n, sha]) => [
            Number(n),
            { state: 'open' as const, headSha: sha, headRepo: LOAD_REPO, labels: ['spark-test'] },
          ]),
        ),
      },
    ]);
    const fullConfig = { ...config, github: { ...config.github, apiUrl: gh.url, runnerGroupId: 1 } };
    tl = await makeTestLedger({ config: fullConfig });
    await adoptAll(tl.ledger);
    const tokens: Record<string, string> = {};
    for (const h of HOSTS) tokens[h] = (await createAgentToken(tl.ledger, h, 'load-test')).token;
    const operator = (
      await createApiToken(tl.ledger, { name: 'load-operator', scopes: ['operate'] }, 'load-test')
    ).token;

    group = await startControllerProcesses({
      count: PROCESSES,
      config: fullConfig,
      dir: tl.dir,
      ledgerUrl: tl.url,
      env: {
        SPARK_WEBHOOK_SECRET: SECRET,
        SPARK_GITHUB_APP_ID: String(gh.appId),
        SPARK_GITHUB_PRIVATE_KEY: gh.privateKey,
        SPARK_AGENT_RATE_LIMIT: '1000000',
      },
    });
    phase('processes up');
    const enabled = await fetch(`${group.urls[0]}/api/v1/repositories/${LOAD_REPO}/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${operator}`, 'content-type': 'application/json' },
      // Deckard is never lent here and the runners join the organization's "Default" group: the
      // readiness checks the load does not play are overridden, as an operator may
      // (docs/adr/0165-enable-is-a-gate.md)
      body: JSON.stringify({ pairEnabled: true, override: ['hosts', 'deckard', 'dstack', 'runner-group'] }),
    });
    expect(enabled.status, await enabled.clone().text()).toBe(200);

    // warm-up: each process fetches its installation token and both senders' roles once, as a
    // controller that has been running does; these deliveries are accounted like the others
    const extraSends: Array<{ id: string; status: number; json: Record<string, unknown> | null }> = [];
    for (const [i, url] of group.urls.entries()) {
      for (const sender of [MAINTAINER, OUTSIDER]) {
        const body = githubBody(
          'pull_request',
          pullRequestEvent('labeled', 1, plan.prHeads[1]!, {
            label: 'spark-test',
            labels: ['spark-test'],
            sender,
          }),
        );
        const id = `warm-${SEED}-${i}-${sender}`;
        const res = await sendDelivery(url, {
          id,
          event: 'pull_request',
          body,
          signature: await sign(SECRET, body),
        });
        extraSends.push({ id, status: res.status, json: res.json });
      }
    }

    // deliveries the simulated jobs cause (workflow_job in_progress/completed), checked like the rest
    let jobSeq = 0;
    const sim = startAgentSim({
      urls: group.urls,
      tokens,
      serviceHosts: new Set(['spark-1']),
      async onRun({ reservationId, runnerName }) {
        const r = await tl!.ledger.getReservation(undefined, reservationId);
        if (!r?.headSha) return;
        // the admitted job: the reservation's nonce label, in the run the dispatch recorded
        const meta = readMeta(r);
        for (const action of ['in_progress', 'completed'] as const) {
          const body = githubBody(
            'workflow_job',
            workflowJob(action, {
              rid: reservationId,
              sha: r.headSha,
              runner: runnerName,
              nonce: meta?.nonce ?? null,
              runId: meta?.runId ?? null,
            }),
          );
          const id = `job-${SEED}-${++jobSeq}`;
          const res = await sendDelivery(group!.urls[jobSeq % PROCESSES]!, {
            id,
            event: 'workflow_job',
            body,
            signature: await sign(SECRET, body),
          });
          extraSends.push({ id, status: res.status, json: res.json });
        }
      },
    });

    const t0 = performance.now();
    const results = await sendAll(plan.sends, group.urls, CONCURRENCY);
    const sendMs = performance.now() - t0;
    // a refused connection means nobody listens any more: say which process died and why
    expect(group.deaths(), ctx).toEqual([]);
    // The inbox answers after one insert, so GitHub's slowness cannot fail a delivery. A delivery
    // counts as accepted only when its first (and only) attempt got a 2xx: GitHub shows anything
    // else as a failed delivery and never retries it by itself (docs: "Handling failed webhook
    // deliveries"), so a resend would hide exactly the failure this test exists to find. Nothing
    // is resent; every non-2xx is reported below with its delivery id and the processes' words.
    const ok = (status: number) => status === 200 || status === 202;
    // every first attempt is 2xx (202 accepted, 200 a known id): said at once, before the drain
    const bad = [
      ...results.map((r) => ({ id: r.delivery.id, status: r.status, json: r.json })),
      ...extraSends,
    ].filter((r) => !ok(r.status));
    // the processes' own words for a refused insert (e.g. "SQLITE_BUSY: database is locked")
    const refusedInserts = group.procs.flatMap((p) =>
      p
        .logLines(['warn', 'error'])
        .filter((l) => l.msg === 'webhook: ledger unreachable')
        .map((l) => `process ${p.index}: ${String(l.error)}`),
    );
    expect(
      bad.slice(0, 5),
      `${bad.length} non-2xx responses: ${ctx}; ${refusedInserts.length} refused inserts: ${refusedInserts.slice(0, 3).join('; ')}`,
    ).toEqual([]);
    // every acknowledged delivery is processed by one of the processes (retries included), while
    // the agents keep admission busy and the jobs send their own workflow_job deliveries
    const open = async () =>
      Number(
        (
          await tl!.ledger.db.all<{ n: number }>(
            sql`SELECT count(*) AS n FROM webhook_deliveries WHERE state <> 'done' AND state = 'pending'`,
          )
        )[0]!.n,
      );
    const drainDeadline = Date.now() + (LONG ? 240_000 : 90_000);
    while ((await open()) > 0 && Date.now() < drainDeadline) await new Promise((r) => setTimeout(r, 100));
    const simStats = await sim.stop();
    while ((await open()) > 0 && Date.now() < drainDeadline) await new Promise((r) => setTimeout(r, 100));
    phase('sent and processed');
    expect(await open(), `deliveries still waiting in the inbox: ${ctx}`).toBe(0);
    expect(await count("webhook_deliveries WHERE state = 'parked'"), ctx).toBe(0);
    const retriedInInbox = await count('webhook_deliveries WHERE attempts > 0');
    // the jobs' own workflow_job deliveries, sent while the inbox drained: first attempts too
    const badJobEvents = extraSends.filter((r) => !ok(r.status));
    expect(badJobEvents.slice(0, 5), `${badJobEvents.length} non-2xx job events: ${ctx}`).toEqual([]);
    expect(simStats.failures, ctx).toEqual([]);

    // duplicates deduplicated: per delivery id exactly one send did the work, the others said duplicate
    const byId = new Map<string, typeof results>();
    for (const r of results) byId.set(r.delivery.id, [...(byId.get(r.delivery.id) ?? []), r]);
    const sentTwice = [...byId.values()].filter((rs) => rs.length > 1);
    expect(sentTwice.length, 'the plan redelivers some ids').toBeGreaterThan(SENDS / 20);
    expect(plan.outOfOrderPairs, 'the plan sends some related events out of order').toBeGreaterThan(0);
    let doubled = 0;
    for (const [id, rs] of byId) {
      const worked = rs.filter((r) => r.json?.duplicate !== true);
      if (worked.length > 1) doubled++;
      expect(worked.length, `delivery ${id} processed ${worked.length} times: ${ctx}`).toBe(1);
    }

    // zero lost deliveries: every unique id recorded exactly once
    const recorded = await tl.ledger.db
      .select({ id: t.webhookDeliveries.deliveryId })
      .from(t.webhookDeliveries);
    const recordedIds = new Set(recorded.map((r) => r.id));
    expect(recorded.length, ctx).toBe(plan.uniqueIds.length + extraSends.length);
    const lost = [...plan.uniqueIds, ...extraSends.map((j) => j.id)].filter((id) => !recordedIds.has(id));
    expect(lost, ctx).toEqual([]);

    // no delivery's effect applied twice
    const reservations = await tl.ledger.db.select().from(t.reservations);
    const made = new Map<string, number>();
    for (const r of reservations) {
      const key = `${readMeta(r)?.deliveryId}|${r.topology}|${r.suite}`;
      made.set(key, (made.get(key) ?? 0) + 1);
    }
    expect(
      [...made].filter(([, n]) => n > 1),
      ctx,
    ).toEqual([]);
    const active = reservations.filter(
      (r) => !['done', 'failed', 'cancelled', 'superseded'].includes(r.status),
    );
    const openKeys = active
      .filter((r) => r.pr != null)
      .map((r) => `${r.pr}|${r.headSha}|${r.topology}|${r.suite}`);
    expect(openKeys.length - new Set(openKeys).size, `same PR commit queued twice: ${ctx}`).toBe(0);
    const refusals = (
      await tl.ledger.db.select().from(t.events).where(eq(t.events.type, 'github.refused'))
    ).map((e) => (JSON.parse(e.dataJson ?? '{}') as { delivery: string }).delivery);
    expect(refusals.length - new Set(refusals).size, `a delivery refused twice: ${ctx}`).toBe(0);

    // zero double grants in the replayed history, and admission really worked under the load
    const replay = await replayGrants(tl.ledger);
    expect(replay.violations, ctx).toEqual([]);
    expect(replay.grants, `grants: ${ctx}`).toBe(await count('leases'));
    expect(replay.grants).toBeGreaterThan(HOSTS.length);

    // the outbox drains and every check run on GitHub shows its reservation's final state
    // a GitHub service of its own on the test's ledger, only to render what each check run should show
    const svc = createGitHubService({
      ledger: tl.ledger,
      settings: settingsFromEnv(
        { SPARK_WEBHOOK_SECRET: SECRET },
        { text: JSON.stringify(fullConfig), source: 'load' },
      ),
      log: silentLogger,
      fetch,
      identity: isolateIdentity(),
      gate: createRequestGate(),
      views: createViewsMemo(tl.ledger),
      observe: () => {},
    });
    const mismatches = async () => {
      const out: string[] = [];
      const github = await gh!.snapshot();
      const pending = await tl!.ledger.db.select().from(t.outbox).where(eq(t.outbox.status, 'pending'));
      if (pending.length) out.push(`${pending.length} outbox rows pending`);
      for (const r of await tl!.ledger.db.select().from(t.reservations)) {
        if (!r.repo || !r.headSha) continue;
        const runs = github.checkRuns.filter((c) => c.external_id === r.id);
        const view = renderCheckRun(r, await renderContextFor(svc, r));
        if (runs.length !== 1) out.push(`${r.id} (${r.status}) has ${runs.length} check runs`);
        else if (
          runs[0]!.status !== view.status ||
          runs[0]!.conclusion !== (view.conclusion ?? null) ||
          runs[0]!.output.title !== view.title
        )
          out.push(
            `${r.id} (${r.status}): GitHub shows ${runs[0]!.status}/${runs[0]!.conclusion}/"${runs[0]!.output.title}", ledger renders ${view.status}/${view.conclusion ?? null}/"${view.title}"`,
          );
      }
      return out;
    };
    // settled = the outbox drained and the comparison came out the same for 3 s in a row
    const deadline = Date.now() + (LONG ? 240_000 : 60_000);
    let last: string[] = [];
    let same = 0;
    for (;;) {
      const now = await mismatches();
      same = now.join('\n') === last.join('\n') ? same + 1 : 0;
      last = now;
      if (!last.length || Date.now() > deadline || (same >= 10 && !last.some((m) => m.includes('pending'))))
        break;
      await new Promise((r) => setTimeout(r, 300));
    }
    phase('settled');
    expect(last.slice(0, 10), `check runs not final (${last.length}): ${ctx}`).toEqual([]);
    expect(await count("outbox WHERE status = 'failed'"), ctx).toBe(0);
    const github = await gh.snapshot();
    // one refusal (or "/spark status") check run per outbox row, never two
    const refusalKeys = (
      await tl.ledger.db
        .select({ key: t.outbox.idempotencyKey })
        .from(t.outbox)
        .where(eq(t.outbox.kind, 'refusal-check'))
    ).map((r) => r.key.slice(0, 100));
    expect(refusalKeys.length, 'the load includes refused requests').toBeGreaterThan(0);
    const refusalRuns = refusalKeys
      .map((k) => [k, github.checkRuns.filter((c) => c.external_id === k).length] as const)
      .filter(([, n]) => n !== 1);
    expect(refusalRuns, ctx).toEqual([]);
    expect(github.violations, ctx).toEqual([]);

    const errors = group.procs.flatMap((p) =>
      p.logLines(['error']).map((l) => `process ${p.index}: ${JSON.stringify(l)}`),
    );
    expect(errors.slice(0, 5), ctx).toEqual([]);
    expect(group.deaths(), ctx).toEqual([]);

    const statuses: Record<string, number> = {};
    for (const r of await tl.ledger.db.select().from(t.reservations))
      statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    console.log(
      `load: ${SENDS} sends (${plan.uniqueIds.length} unique, ${lost.length} lost, ${doubled} processed twice, ${sentTwice.length} redelivered, ${plan.outOfOrderPairs} out-of-order pairs, ${bad.length} not accepted on their first attempt, ${retriedInInbox} retried inside the inbox) + ${extraSends.length} warm-up and job events in ${(sendMs / 1000).toFixed(1)} s at concurrency ${CONCURRENCY}; ${replay.grants} grants; ${simStats.runners} runners; reservations ${JSON.stringify(statuses)}; ${github.checkRuns.length} check runs, ${github.requests} GitHub calls; seed ${SEED}; ${phases.join(', ')}`,
    );
  });
});
