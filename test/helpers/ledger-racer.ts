/**
 * One of several processes racing on a shared ledger file (multi-process admission test).
 * argv: <ledgerUrl> <configJson> <seed> <ops>. Prints one JSON line: { created: string[], passes, grants }.
 */
import { parseConfig } from '../../core/config.ts';
import { isReleasableStatus } from '../../core/model.ts';
import { openLedgerDb } from '../../functions/ledger/db.ts';
import { Ledger } from '../../functions/ledger/ledger.ts';
import { createNodeLedgerClient } from '../../functions/ledger/node-client.ts';
import { idleFacts } from '../../scripts/sim/ledger.ts';

const [url, configJson, seedText, opsText] = process.argv.slice(2);
const config = parseConfig(JSON.parse(configJson!), 'racer');
let seed = Number(seedText) >>> 0 || 1;
const rand = () => {
  // mulberry32: deterministic per process so a failure can be replayed
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};

const store = await openLedgerDb({ url: url!, createClient: createNodeLedgerClient });
const ledger = new Ledger(store, { config });
const created: string[] = [];
let passes = 0;
let grants = 0;
let releases = 0;
const ops = Number(opsText);
for (let i = 0; i < ops; i++) {
  const x = rand();
  if (x < 0.45) {
    const pair = rand() < 0.25;
    const r = await ledger.createReservation(
      {
        kind: rand() < 0.2 ? 'development' : 'manual',
        topology: pair ? 'pair' : 'single',
        repo: 'acme/iron',
        pr: 1 + Math.floor(rand() * 50),
        headSha: 'c'.repeat(40),
        suite: 'smoke',
        requester: `racer-${process.pid}`,
      },
      `racer-${process.pid}`,
    );
    created.push(r.id);
  } else if (x < 0.75) {
    const res = await ledger.admissionPass(`racer-${process.pid}`);
    passes++;
    grants += res.granted.length;
  } else if (x < 0.95) {
    // act as the agent for some active reservation: release and confirm (other racers may win)
    const { resvRows } = await ledger.loadAdmissionInput(undefined);
    const active = resvRows.filter((r) => isReleasableStatus(r.status));
    const pick = active[Math.floor(rand() * active.length)];
    if (pick) {
      try {
        await ledger.beginRelease(pick.id, 'passed', 'racer finished', `racer-${process.pid}`);
        for (const l of await ledger.leasesOf(undefined, pick.id)) {
          if (l.status === 'releasing')
            await ledger.confirmReleased(l.hostId, l.fencingToken, `racer-${process.pid}`);
          const h = await ledger.getHost(undefined, l.hostId);
          if (h?.phase === 'restoring')
            await ledger.recordRestore(l.hostId, true, 'ready', `racer-${process.pid}`);
        }
        releases++;
      } catch (e) {
        // losing a race to another racer is expected: it surfaces as a 409 conflict
        const code = (e as { code?: string }).code;
        if (code !== 'not_active' && code !== 'stale_fencing_token' && code !== 'not_restoring') throw e;
      }
    }
  } else {
    const h = config.hosts[Math.floor(rand() * config.hosts.length)]!;
    await ledger.recordHeartbeat(h.id, idleFacts({ serviceState: h.homeService ? 'serving' : 'none' }));
  }
}
console.log(JSON.stringify({ created, passes, grants, releases }));
store.close();
