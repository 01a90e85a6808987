import fc from 'fast-check';
import { describe, it } from 'vitest';
import { type AdmissionInput, planAdmission } from '../../core/admission.ts';
import type { HostRecord, LeaseRecord, ReservationRecord } from '../../core/model.ts';
import { assertReachedEveryRule, bringUp, commandArbs, configArb, report, type Sut } from './commands.ts';
import { factsOf, newWorld, type World } from './world.ts';

/**
 * Model-based test of the pure admission engine (`planAdmission`): random fleets and command
 * sequences evolve the reference world; every pass, the engine's plan must equal the reference
 * model's prediction and obey every rule. No ledger here, so StrykerJS runs it for each mutant of
 * `core/` (`npm run test:mutation`); the ledger-level twin is `test/integration/ledger-model.test.ts`.
 */

const RUNS = Number(process.env.SPARK_MODEL_RUNS ?? (process.env.SPARK_TEST_LONG === '1' ? 5_000 : 300));

/** The world as the ledger would load it for a pass (queued + active work, binding leases). */
function admissionInput(w: World): AdmissionInput {
  const hosts: HostRecord[] = [...w.hosts.values()].map((h) => ({
    id: h.id,
    pool: h.pool,
    gpus: h.gpus,
    homeService: h.home,
    managed: h.managed,
    phase: h.phase,
    lastHeartbeatAt: h.lastHeartbeatAt,
    facts: h.reported ? factsOf(h.procs, h.serviceState) : null,
  }));
  const leases: LeaseRecord[] = w.leases
    .filter((l) => l.status !== 'released')
    .map((l) => ({
      id: l.id,
      reservationId: l.resId,
      hostId: l.hostId,
      fencingToken: l.token,
      status: l.status,
      grantedAt: l.grantedAt,
      expiresAt: l.expiresAt,
    }));
  const reservations: ReservationRecord[] = [...w.res.values()]
    .filter((r) => ['queued', 'allocated', 'preparing', 'running', 'releasing'].includes(r.status))
    .map((r) => ({
      id: r.id,
      seq: r.seq,
      kind: r.kind,
      priority: r.priority,
      topology: r.topology,
      pool: r.pool,
      targetHost: r.target,
      repo: r.repo,
      pr: r.pr,
      headSha: r.sha,
      suite: r.suite,
      requester: 'model',
      status: r.status,
      createdAt: r.createdAt,
      queueDeadline: r.deadline,
      ttlS: r.ttlS,
    }));
  return { now: w.now, config: w.cfg, hosts, leases, reservations };
}

const engine: Sut = {
  tick() {},
  async pass(w) {
    return { plan: planAdmission(admissionInput(w)) };
  },
  async check() {},
};

describe('admission engine against the reference model', () => {
  it(`plans exactly what rules 1–8 predict over ${RUNS} random fleets and sequences`, async () => {
    await fc.assert(
      fc.asyncProperty(
        configArb,
        fc.commands(commandArbs(), { maxCommands: 60, size: 'max' }),
        async (cfg, cmds) => {
          const w = newWorld(cfg);
          await bringUp(w, engine);
          await fc.asyncModelRun(() => ({ model: w, real: engine }), cmds);
        },
      ),
      { numRuns: RUNS, reporter: report, endOnFailure: process.env.SPARK_MUTATION === '1' },
    );
    // a short debugging run (SPARK_MODEL_RUNS) may not reach everything
    if (RUNS >= 100) assertReachedEveryRule();
  });
});
