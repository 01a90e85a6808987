import { eq } from 'drizzle-orm';
import { leaseGrantsOfData } from '../../../core/events.ts';
import { isReleasableStatus } from '../../../core/model.ts';
import type { AppModule } from '../../../functions/app.ts';
import * as t from '../../../functions/ledger/schema.ts';
import { type FakeRunnerBehavior, fakeJitConfig } from './index.ts';

/**
 * The fleet's stand-in for GitHub (scripts/sim/doubles/fleet.ts `github: 'jit-stand-in'`, the default):
 * no GitHub module, no fake GitHub. When a lease is granted it inserts the lease's `jit_handoffs`
 * row `latencyMs` later in a transaction of its own, with a JIT config the fake runner reads its
 * behaviour from — what the GitHub outbox ends with once GitHub returns the config (asked for at
 * grant, ADR 0070), without the outbox, the dispatch, the run's identification or
 * `generate-jitconfig`. For agent stories that are about the host, not GitHub; a figure about the
 * handover runs with `github: 'fake-github'` (docs/adr/0181-modelled-github-latency.md).
 */
export function jitStandInModule(
  markerDir: string,
  runner: (reservationId: string, hostId: string, attempt: number) => FakeRunnerBehavior,
  outcome: ((reservationId: string) => 'passed' | 'failed' | null) | undefined,
  latencyMs: number,
): AppModule {
  return {
    name: 'test-jit-stand-in',
    hooks: ({ ledger }) => [
      async (tx, ev) => {
        if (ev.type === 'reservation.running' && outcome) {
          const o = outcome(ev.subjectId);
          if (o)
            await tx.update(t.reservations).set({ outcome: o }).where(eq(t.reservations.id, ev.subjectId));
          return;
        }
        // the GitHub part asks for the JIT config at grant, while the agent prepares (ADR 0070);
        // GitHub answers later, outside the granting transaction, as the outbox does
        // each lease the grant issued, from the grant's one history row (ADR 0100)
        for (const { leaseId } of leaseGrantsOfData(ev.type, ev.subjectId, ev.data)) {
          setTimeout(() => {
            void ledger
              .write(async (tx2, at, changed) => {
                // what the sender checks before registering: the lease still active, the work wanted
                const l = (await tx2.select().from(t.leases).where(eq(t.leases.id, leaseId)))[0];
                if (l?.status !== 'active') return;
                const r = (
                  await tx2.select().from(t.reservations).where(eq(t.reservations.id, l.reservationId))
                )[0];
                if (!r || r.kind === 'development' || !isReleasableStatus(r.status)) return;
                const runnerName = `spark-${l.hostId}-${r.id}-a0`;
                await tx2
                  .insert(t.jitHandoffs)
                  .values({
                    runnerName,
                    leaseId: l.id,
                    reservationId: r.id,
                    hostId: l.hostId,
                    attempt: 0,
                    jitConfig: fakeJitConfig(runnerName, markerDir, runner(r.id, l.hostId, 0)),
                    createdAt: at,
                  })
                  .onConflictDoNothing();
                changed.add(`host:${l.hostId}`);
              })
              .catch(() => undefined);
          }, latencyMs);
        }
      },
    ],
  };
}
