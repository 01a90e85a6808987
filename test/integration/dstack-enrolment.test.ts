import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../agent/config.ts';
import { checkDstackEnrolment, createEnrolmentCache } from '../../agent/dstack-enrolment.ts';
import { sshFleet } from '../../scripts/sim/doubles/dstack/fleets.ts';
import {
  type DstackStandIn,
  MULTI_ARCH_IMAGE,
  startDstackStandIn,
} from '../../scripts/sim/doubles/dstack/server.ts';

/**
 * The heartbeat's dstack enrolment fact (docs/adr/0166-dstack-enrolment-fact.md): what the agent
 * finds when it asks its dstack server for the fleet that holds its host, against the stand-in
 * (scripts/sim/doubles/dstack/fleets.ts, from dstack 0.21.2's source): real HTTP on loopback, every
 * request validated like the server's pydantic models.
 */

let d: DstackStandIn | null = null;
let dir: string | null = null;
afterEach(async () => {
  if (d) expect(d.invalid).toEqual([]);
  await d?.close();
  d = null;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = null;
});

async function kit() {
  d = await startDstackStandIn();
  dir = mkdtempSync(join(tmpdir(), 'spark-enrol-'));
  const tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${d.token}\n`, { mode: 0o600 });
  const { url, project } = d;
  const section = (
    over: Partial<NonNullable<AgentConfig['dstack']>> = {},
  ): NonNullable<AgentConfig['dstack']> => ({
    url,
    project,
    tokenFile,
    fleet: 'spark-2',
    image: MULTI_ARCH_IMAGE,
    ide: null,
    requestTimeoutS: 5,
    ...over,
  });
  return { d, dir, tokenFile, section };
}

describe('dstack enrolment (agent/dstack-enrolment.ts)', () => {
  it('enrolled: the fleet is active with an idle or busy instance', async () => {
    const k = await kit();
    k.d.fleets.set('spark-2', sshFleet('spark-2'));
    expect(await checkDstackEnrolment(k.section(), 'spark-2')).toEqual({
      fleet: 'spark-2',
      ok: true,
      detail: 'fleet "spark-2" active; instance spark-2-0 idle',
    });
    k.d.fleets.set('spark-2', sshFleet('spark-2', { instance: { status: 'busy' } }));
    expect((await checkDstackEnrolment(k.section(), 'spark-2')).detail).toBe(
      'fleet "spark-2" active; instance spark-2-0 busy',
    );
    // without `dstack.fleet` the fleet is named like the host
    k.d.fleets.set('spark-1', sshFleet('spark-1'));
    expect(await checkDstackEnrolment(k.section({ fleet: null }), 'spark-1')).toMatchObject({
      fleet: 'spark-1',
      ok: true,
    });
    expect(k.d.calls.filter((c) => c.route === 'fleets/get').map((c) => c.body)).toEqual([
      { name: 'spark-2' },
      { name: 'spark-2' },
      { name: 'spark-1' },
    ]);
  });

  it('not enrolled: no such fleet, a fleet not active, no available instance, unreachable, failing health', async () => {
    const k = await kit();
    const check = () => checkDstackEnrolment(k.section(), 'spark-2');
    expect(await check()).toEqual({
      fleet: 'spark-2',
      ok: false,
      detail: 'dstack has no fleet "spark-2" in project main',
    });
    k.d.fleets.set('spark-2', sshFleet('spark-2', { status: 'terminated' }));
    expect((await check()).detail).toBe('fleet "spark-2" is terminated');
    k.d.fleets.set('spark-2', sshFleet('spark-2', { instance: { status: 'provisioning' } }));
    expect((await check()).detail).toBe('fleet "spark-2" has no available instance (spark-2-0 provisioning)');
    k.d.fleets.set('spark-2', sshFleet('spark-2', { instance: { unreachable: true } }));
    expect((await check()).detail).toBe(
      'fleet "spark-2" has no available instance (spark-2-0 idle, unreachable)',
    );
    k.d.fleets.set('spark-2', sshFleet('spark-2', { instance: { healthStatus: 'failure' } }));
    expect((await check()).detail).toBe(
      'fleet "spark-2" has no available instance (spark-2-0 idle, health failure)',
    );
    k.d.fleets.set('spark-2', sshFleet('spark-2', { instances: 0 }));
    expect((await check()).detail).toBe('fleet "spark-2" has no available instance (no instances)');
    // a deleted fleet is not found by name (server/routers/fleets.py `get_fleet`)
    k.d.fleets.set('spark-2', { ...sshFleet('spark-2'), deleted: true });
    expect((await check()).ok).toBe(false);
  });

  it('a wrong token, an unknown project, a missing token file, a server that does not answer', async () => {
    const k = await kit();
    k.d.fleets.set('spark-2', sshFleet('spark-2'));
    writeFileSync(join(k.dir, 'bad'), 'not-the-token\n');
    expect(await checkDstackEnrolment(k.section({ tokenFile: join(k.dir, 'bad') }), 'spark-2')).toEqual({
      fleet: 'spark-2',
      ok: false,
      detail: "dstack refused the agent's token for project main (403 Invalid token)",
    });
    expect((await checkDstackEnrolment(k.section({ project: 'other' }), 'spark-2')).detail).toBe(
      'dstack has no project "other" (404)',
    );
    expect(
      (await checkDstackEnrolment(k.section({ tokenFile: join(k.dir, 'none') }), 'spark-2')).detail,
    ).toBe(`cannot read dstack.tokenFile ${join(k.dir, 'none')}: ENOENT`);
    // a loopback port nothing listens on any more
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    expect(
      (await checkDstackEnrolment(k.section({ url: `http://127.0.0.1:${port}` }), 'spark-2')).detail,
    ).toBe(`dstack server http://127.0.0.1:${port} unreachable (ECONNREFUSED)`);
  });

  it('asks at most once a minute, in the background after the first answer; no dstack section: null', async () => {
    let asked = 0;
    let release: () => void = () => undefined;
    const cache = createEnrolmentCache(async (s) => {
      asked++;
      // the second question hangs until released: a heartbeat meanwhile is not held back
      if (asked === 2) await new Promise<void>((r) => (release = r));
      return { fleet: s.fleet ?? 'x', ok: asked > 1, detail: `answer ${asked}` };
    });
    const key = {};
    const cfg = { hostId: 'spark-2', dstack: { fleet: 'spark-2' } } as unknown as AgentConfig;
    expect((await cache(key, cfg, 0))?.detail).toBe('answer 1');
    expect((await cache(key, cfg, 59_000))?.detail).toBe('answer 1');
    // stale: the last answer at once, the new question asked once while it is pending
    expect((await cache(key, cfg, 60_000))?.detail).toBe('answer 1');
    expect((await cache(key, cfg, 61_000))?.detail).toBe('answer 1');
    expect(asked).toBe(2);
    release();
    await new Promise((r) => setTimeout(r, 0));
    expect((await cache(key, cfg, 62_000))?.detail).toBe('answer 2');
    expect(asked).toBe(2);
    expect(await cache(key, { ...cfg, dstack: null } as AgentConfig, 0)).toBeNull();
  });
});
