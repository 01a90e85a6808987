import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { HostFacts } from '../../core/model.ts';
import { checkDstack } from '../../functions/github/readiness-fleet.ts';
import { hostRows } from '../../functions/ledger/queries.ts';
import { sshFleet } from '../../scripts/sim/doubles/dstack/fleets.ts';
import { MULTI_ARCH_IMAGE, startDstackStandIn } from '../../scripts/sim/doubles/dstack/server.ts';
import { startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * The dstack enrolment fact end to end (docs/adr/0166-dstack-enrolment-fact.md): real agents (the
 * shipped bundle) with a `dstack` section heartbeat to a real controller; each asks the dstack
 * stand-in for its fleet and the heartbeat carries the answer and the host's executor; the
 * controller's rollout check reads them for a repository whose CI runs on dstack.
 */
describe('dstack enrolment in the heartbeat', () => {
  it('a host whose fleet is active is enrolled, one without a fleet is not, and the readiness check says which', async () => {
    const dstack = await startDstackStandIn();
    const dir = mkdtempSync(join(tmpdir(), 'spark-enrol-e2e-'));
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, `${dstack.token}\n`, { mode: 0o600 });
    // an operator applied the fleet of spark-2 only
    dstack.fleets.set('spark-2', sshFleet('spark-2'));
    const fleet = await startFleet({
      hosts: [{ id: 'spark-1' }, { id: 'spark-2' }],
      runnerUsers: false,
      repositories: { 'acme/butter': { executor: 'dstack' } },
      agentConfig: (hostId) => ({
        executor: 'dstack',
        dstack: {
          url: dstack.url,
          project: dstack.project,
          tokenFile,
          fleet: hostId,
          image: MULTI_ARCH_IMAGE,
          requestTimeoutS: 5,
        },
      }),
    });
    try {
      for (const h of ['spark-1', 'spark-2']) fleet.startAgent(h);
      const facts = async (id: string) => {
        const row = await fleet.host(id);
        return row.factsJson ? (JSON.parse(row.factsJson) as HostFacts) : null;
      };
      for (const h of ['spark-1', 'spark-2'])
        await waitFor(
          `${h} heartbeat with its enrolment`,
          async () => (await facts(h))?.dstack !== undefined,
        );
      expect(await facts('spark-2')).toMatchObject({
        executor: 'dstack',
        dstack: { fleet: 'spark-2', ok: true, detail: 'fleet "spark-2" active; instance spark-2-0 idle' },
      });
      expect(await facts('spark-1')).toMatchObject({
        executor: 'dstack',
        dstack: { fleet: 'spark-1', ok: false, detail: 'dstack has no fleet "spark-1" in project main' },
      });
      const ledger = fleet.controller.ledger;
      const check = checkDstack(await hostRows(ledger), ledger.config, 'acme/butter', ledger.clock());
      expect(check).toMatchObject({
        id: 'dstack',
        status: 'fail',
        summary: 'spark-1: dstack has no fleet "spark-1" in project main',
      });
      // the agents asked with their own token and project, one fleet each, and nothing else
      expect(dstack.invalid).toEqual([]);
      expect(new Set(dstack.calls.map((c) => c.route))).toEqual(new Set(['fleets/get']));
    } finally {
      await fleet.close();
      await dstack.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
