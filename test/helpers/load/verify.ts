import { asc } from 'drizzle-orm';
import type { Ledger } from '../../../functions/ledger/ledger.ts';
import * as t from '../../../functions/ledger/schema.ts';

/**
 * Replays the append-only history (as test/integration/ledger-multiprocess.test.ts does): per
 * host, `lease.granted` and `lease.released` must alternate and fencing tokens strictly
 * increase. Returns the number of grants and every violation found, in words.
 */
export async function replayGrants(ledger: Ledger): Promise<{ grants: number; violations: string[] }> {
  const events = await ledger.db.select().from(t.events).orderBy(asc(t.events.id));
  const holder = new Map<string, string | null>();
  const lastToken = new Map<string, number>();
  const violations: string[] = [];
  let grants = 0;
  for (const e of events) {
    if (e.type !== 'lease.granted' && e.type !== 'lease.released') continue;
    const data = JSON.parse(e.dataJson ?? '{}') as { hostId: string; fencingToken: number };
    if (e.type === 'lease.granted') {
      grants++;
      const held = holder.get(data.hostId) ?? null;
      if (held)
        violations.push(
          `double grant of ${data.hostId} to ${e.subjectId} while ${held} holds it (event ${e.id})`,
        );
      if (!(data.fencingToken > (lastToken.get(data.hostId) ?? 0)))
        violations.push(
          `fencing token ${data.fencingToken} on ${data.hostId} did not increase (event ${e.id})`,
        );
      holder.set(data.hostId, e.subjectId);
      lastToken.set(data.hostId, data.fencingToken);
    } else {
      if (holder.get(data.hostId) !== e.subjectId)
        violations.push(
          `release of ${e.subjectId} on ${data.hostId}, which it does not hold (event ${e.id})`,
        );
      holder.set(data.hostId, null);
    }
  }
  return { grants, violations };
}
