import { asc } from 'drizzle-orm';
import { leaseGrantsOf } from '../../../core/events.ts';
import type { Ledger } from '../../../functions/ledger/ledger.ts';
import * as t from '../../../functions/ledger/schema.ts';

/**
 * Replays the append-only history (as test/integration/ledger-multiprocess.test.ts does): per
 * host, grants (ADR 0100: `reservation.allocated` rows, or an old ledger's `lease.granted`) and
 * `lease.released` must alternate and fencing tokens strictly
 * increase. Returns the number of grants and every violation found, in words.
 */
export async function replayGrants(ledger: Ledger): Promise<{ grants: number; violations: string[] }> {
  const events = await ledger.db.select().from(t.events).orderBy(asc(t.events.id));
  const holder = new Map<string, string | null>();
  const lastToken = new Map<string, number>();
  const violations: string[] = [];
  let grants = 0;
  for (const e of events) {
    // a grant is one `reservation.allocated` row listing its leases (ADR 0100); an old ledger's
    // `lease.granted` rows are read the same way
    for (const g of leaseGrantsOf(e)) {
      grants++;
      const held = holder.get(g.hostId) ?? null;
      if (held)
        violations.push(`double grant of ${g.hostId} to ${g.leaseId} while ${held} holds it (event ${e.id})`);
      if (!(g.fencingToken > (lastToken.get(g.hostId) ?? 0)))
        violations.push(`fencing token ${g.fencingToken} on ${g.hostId} did not increase (event ${e.id})`);
      holder.set(g.hostId, g.leaseId);
      lastToken.set(g.hostId, g.fencingToken);
    }
    if (e.type !== 'lease.released') continue;
    const data = JSON.parse(e.dataJson ?? '{}') as { hostId: string };
    if (holder.get(data.hostId) !== e.subjectId)
      violations.push(`release of ${e.subjectId} on ${data.hostId}, which it does not hold (event ${e.id})`);
    holder.set(data.hostId, null);
  }
  return { grants, violations };
}
