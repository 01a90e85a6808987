import { afterEach, describe, expect, it } from 'vitest';
import { applyReport } from '../../functions/ledger/agent-reports.ts';
import { adoptAll, idleFacts, makeTestLedger, type TestLedger } from '../../scripts/sim/ledger.ts';

/**
 * the `cleaned` report carries the GPU facts read after cleanup, and the
 * controller stores them in the transaction that frees the host — so the next admission pass
 * grants the freed host instead of refusing it over the finished job's GPU processes, which the
 * last heartbeat still listed (on real hardware that waited up to one heartbeat, 10 s).
 */
describe('cleaned report with fresh GPU facts', () => {
  let tl: TestLedger | null = null;
  afterEach(() => {
    tl?.close();
    tl = null;
  });

  const busyFacts = idleFacts({ gpuProcesses: [{ pid: 31337, name: 'python', usedMemoryMiB: 20000 }] });

  async function freedHostWithNextRequestWaiting() {
    tl = await makeTestLedger({ config: { hosts: [{ id: 'spark-2' }] } });
    const { ledger } = tl;
    await adoptAll(ledger);
    const first = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 1,
        headSha: 'a'.repeat(40),
        requester: 't',
      },
      'test',
    );
    const pass = await ledger.admissionPass('test');
    const lease = pass.granted[0]!.leases[0]!;
    expect(pass.granted[0]!.reservationId).toBe(first.id);
    // the job runs: the heartbeat shows its GPU process
    await ledger.recordHeartbeat('spark-2', busyFacts);
    await ledger.beginRelease(first.id, 'passed', 'job finished', 'test');
    const next = await ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/iron',
        pr: 2,
        headSha: 'b'.repeat(40),
        requester: 't',
      },
      'test',
    );
    return { ledger, lease, next };
  }

  it('grants the freed host on the next pass when the report says the GPU is empty', async () => {
    const { ledger, lease, next } = await freedHostWithNextRequestWaiting();
    await applyReport(ledger, 'spark-2', {
      type: 'cleaned',
      fencingToken: lease.fencingToken,
      facts: idleFacts(),
    });
    const host = (await ledger.getHost(undefined, 'spark-2'))!;
    expect(host.phase).toBe('idle');
    expect(JSON.parse(host.factsJson!).gpuProcesses).toEqual([]);
    const pass = await ledger.admissionPass('test');
    expect(pass.granted.map((g) => g.reservationId)).toEqual([next.id]);
  });

  it('without facts the host keeps the last heartbeat’s processes and the request waits (the old path)', async () => {
    const { ledger, lease, next } = await freedHostWithNextRequestWaiting();
    await applyReport(ledger, 'spark-2', { type: 'cleaned', fencingToken: lease.fencingToken });
    const pass = await ledger.admissionPass('test');
    expect(pass.granted).toEqual([]);
    const waiting = (await ledger.getReservation(undefined, next.id))!;
    expect(waiting.status).toBe('queued');
    expect(waiting.reason).toMatch(/0 schedulable now/);
    const host = (await ledger.getHost(undefined, 'spark-2'))!;
    expect(host.phase).toBe('idle');
    expect(JSON.parse(host.factsJson!).gpuProcesses).toHaveLength(1);
  });

  it('a report with a stale fencing token is refused and writes none of its facts', async () => {
    const { ledger, lease } = await freedHostWithNextRequestWaiting();
    await expect(
      applyReport(ledger, 'spark-2', {
        type: 'cleaned',
        fencingToken: lease.fencingToken + 7,
        facts: idleFacts(),
      }),
    ).rejects.toMatchObject({ code: 'stale_fencing_token' });
    const host = (await ledger.getHost(undefined, 'spark-2'))!;
    expect(JSON.parse(host.factsJson!).gpuProcesses).toHaveLength(1);
    expect(host.phase).toBe('cleaning');
  });
});
