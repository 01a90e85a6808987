/**
 * Admission over a remote ledger (the scale-out path: a Worker and a remote libSQL, every request
 * a network round trip): the admission bench's mixed stream through the real `@libsql/client` HTTP
 * transport (Hrana over HTTP) to the local sqld stand-in (`scripts/sim/fake-sqld`) backed by a real
 * libSQL file, with a fixed round-trip time injected at the server. Requests are counted at the
 * server. The controller's GitHub hook is attached and the requests carry the meta a webhook gives
 * them, so each grant queues what it queues in production (check run, dispatch, JIT registration)
 * in the same transaction (docs/adr/0185-admission-pass-in-two-round-trips.md).
 */
import { join } from 'node:path';
import { admissionPassStats } from '../../functions/ledger/admission-pass.ts';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';
import { startFakeSqld } from '../sim/harness/fake-sqld.ts';
import { BENCH_FACTS, benchLedger, cpuNowMs, percentile, round } from './admission-ledger.ts';

export const REMOTE_RTT_MS = 20;

export async function remoteAdmission(dir: string, rounds: number, progress: (msg: string) => void) {
  const sqld = await startFakeSqld({ path: join(dir, 'remote.db') });
  const hostCount = 16;
  try {
    const { store, ledger } = await benchLedger({
      url: sqld.url,
      // a remote URL: the Node ledger client is the stock `@libsql/client` (node-client.ts)
      client: createNodeLedgerClient,
      hostCount,
      githubEffects: true,
    });
    const passes: { ms: number; requests: number; grants: number; cpuMs: number }[] = [];
    for (let r = 0; r < rounds; r++) {
      // requests, heartbeats and releases are not timed and cross no injected latency
      sqld.setRttMs(0);
      const burst = r % 2 === 0 ? hostCount : 1;
      for (let i = 0; i < burst; i++) {
        const sha = 'f'.repeat(40);
        await ledger.createReservation(
          {
            kind: 'manual',
            topology: 'single',
            repo: 'acme/iron',
            pr: i + 1,
            headSha: sha,
            suite: 'smoke',
            requester: 'bench',
            // what the webhook intake stores (functions/github/meta.ts): the hook acts on it
            meta: {
              trigger: 'label',
              installationId: 1,
              label: 'spark-test',
              deliveryId: `bench-${r}-${i}`,
              defaultBranch: 'main',
              workflow: 'spark-pr-test.yml',
              currentHeadSha: sha,
              prOpen: true,
              labels: ['spark-test'],
            },
          },
          'bench',
        );
      }
      for (let h = 1; h <= hostCount; h++) await ledger.recordHeartbeat(`spark-${h}`, BENCH_FACTS);
      sqld.setRttMs(REMOTE_RTT_MS);
      const before = sqld.stats.requests;
      const c0 = cpuNowMs();
      const t0 = performance.now();
      const res = await ledger.admissionPass('bench');
      const ms = performance.now() - t0;
      passes.push({
        ms,
        requests: sqld.stats.requests - before,
        grants: res.granted.length,
        cpuMs: cpuNowMs() - c0,
      });
      if (res.granted.length !== burst)
        throw new Error(`remote round ${r}: ${burst} requests, ${res.granted.length} granted`);
      sqld.setRttMs(0);
      for (const g of res.granted) {
        await ledger.beginRelease(g.reservationId, 'passed', 'bench', 'bench');
        for (const l of g.leases) await ledger.confirmReleased(l.hostId, l.fencingToken, 'bench');
      }
      if (r % 10 === 9) progress(`remote: ${r + 1}/${rounds} passes`);
    }
    const stats = { ...admissionPassStats(ledger) };
    store.close();
    const ms = passes.map((p) => p.ms).sort((a, b) => a - b);
    const reqs = passes.map((p) => p.requests);
    const of = (burst: boolean) => {
      const sel = passes.filter((_, i) => (i % 2 === 0) === burst);
      const t = sel.map((p) => p.ms).sort((a, b) => a - b);
      return {
        passes: sel.length,
        roundTripsPerPass: round(sel.reduce((a, p) => a + p.requests, 0) / sel.length, 2),
        passP50Ms: round(percentile(t, 50), 1),
        passP99Ms: round(percentile(t, 99), 1),
      };
    };
    return {
      rttMs: REMOTE_RTT_MS,
      passes: passes.length,
      roundTripsPerPass: round(reqs.reduce((a, b) => a + b, 0) / reqs.length, 2),
      roundTripsMax: Math.max(...reqs),
      passP50Ms: round(percentile(ms, 50), 1),
      passP99Ms: round(percentile(ms, 99), 1),
      cpuMsPerPass: round(passes.reduce((a, p) => a + p.cpuMs, 0) / passes.length, 2),
      burst16: of(true),
      single: of(false),
      batched: stats.batched,
      conflicts: stats.conflicts,
      interactive: stats.interactive,
      method: `@libsql/client over HTTP (Hrana) to scripts/sim/fake-sqld on loopback with ${REMOTE_RTT_MS} ms injected per request (half each way), one controller, the GitHub hook attached and webhook meta on every request; the mixed stream (bursts of 16 requests and single requests on 16 hosts), only admission passes timed; round trips = HTTP requests the server received during the pass; the fake sqld runs in the bench's process, so cpuMsPerPass includes the server's share`,
    };
  } finally {
    await sqld.close();
  }
}
