import fc from 'fast-check';
import { parseConfig, type SparkConfig } from '../../core/config.ts';
import type { ReservationKind } from '../../core/model.ts';
import { HeartbeatCmd, OperatorCmd, RestoreCmd, type Svc, TickCmd } from './host-commands.ts';
import { ConfirmCmd, ProgressCmd, ReleaseCmd, ReportCmd, StaleTokenCmd } from './lease-commands.ts';
import { CancelCmd, PushCmd, RequestCmd } from './request-commands.ts';
import type { Cmd, Sut } from './sut.ts';
import * as M from './world.ts';

export { admit, assertReachedEveryRule, reached, runUntilEveryRuleReached } from './admit.ts';
export {
  HeartbeatCmd,
  naturalFacts,
  OperatorCmd,
  RestoreCmd,
  type Svc,
  TickCmd,
} from './host-commands.ts';
export { ConfirmCmd, ProgressCmd, ReleaseCmd, ReportCmd, StaleTokenCmd } from './lease-commands.ts';
export { CancelCmd, PushCmd, RequestCmd } from './request-commands.ts';
export type { Cmd, Sut } from './sut.ts';

/**
 * The command vocabulary both model tests share (fast-check `commands`): requests of every kind,
 * cancel, pushes, heartbeats with any facts, time passing (hosts going offline, leases expiring,
 * queue timeouts), agent progress and release reports, stale fencing tokens, Deckard restores,
 * operator adopt / unadopt / quarantine clear. Each command changes the model world by the design,
 * tells the system under test, compares answers, then runs one admission pass whose plan must be
 * the model's prediction and obey every rule.
 */

// ------------------------------------------------------------------ generators

const KINDS: ReservationKind[] = ['development', 'deckard', 'manual', 'merge', 'benchmark', 'background'];

/** The commands, weighted so sequences keep the fleet busy and reach every rule. */
export function commandArbs(): fc.Arbitrary<Cmd>[] {
  const host = fc.nat({ max: 11 });
  const request = fc
    .record({
      kind: fc.constantFrom(...KINDS, 'manual', 'merge', 'background'),
      pair: fc.boolean(),
      pr: fc.nat({ max: 4 }),
      target: fc.nat({ max: 7 }),
      ttl: fc.constantFrom(null, 120, 3600),
    })
    .map((x) => new RequestCmd(x.kind, x.pair, x.pr, x.target, x.ttl));
  return [
    request,
    request,
    request,
    fc.nat().map((n) => new CancelCmd(n)),
    fc.integer({ min: 1, max: 4 }).map((n) => new PushCmd(n)),
    fc
      .tuple(
        host,
        fc.constantFrom(
          'none',
          'none',
          'foreign-process',
          'gpu-unknown',
          'service-failed',
          'service-serving',
        ),
      )
      .map(([h, odd]) => new HeartbeatCmd(h, odd as HeartbeatCmd['odd'])),
    fc
      .tuple(
        fc.constantFrom('short', 'short', 'offline', 'ci-ttl', 'dev-ttl', 'half-queue-timeout'),
        fc.oneof(fc.constant(0xfff), fc.nat({ max: 0xfff })),
      )
      .map(([s, a]) => new TickCmd(s as TickCmd['step'], a)),
    fc
      .tuple(fc.nat(), fc.constantFrom('preparing', 'running'))
      .map(([n, to]) => new ProgressCmd(n, to as 'running')),
    fc
      .tuple(fc.nat(), fc.constantFrom('passed', 'failed', 'released'))
      .map(([n, o]) => new ReleaseCmd(n, o as 'passed')),
    fc.tuple(fc.nat(), fc.boolean()).map(([n, r]) => new ConfirmCmd(n, r)),
    fc.tuple(fc.nat(), fc.boolean()).map(([n]) => new ConfirmCmd(n, false)),
    fc
      .tuple(
        host,
        fc.constantFrom('previous', 'future', 'other-host'),
        fc.constantFrom('confirm', 'leftovers', 'verify'),
      )
      .map(([h, wh, c]) => new StaleTokenCmd(h, wh as 'future', c as 'verify')),
    fc
      .tuple(host, fc.boolean(), fc.constantFrom(false, false, false, true))
      .map(([h, ok, stale]) => new RestoreCmd(h, ok, stale)),
    fc
      .tuple(fc.nat(), fc.constantFrom('cleaned', 'cleaned', 'processes_remain'))
      .map(([n, type]) => new ReportCmd(n, type as 'cleaned')),
    fc
      .tuple(host, fc.constantFrom('adopt', 'unadopt', 'clear-quarantine', 'clear-quarantine'))
      .map(([h, op]) => new OperatorCmd(h, op as 'adopt')),
  ];
}

const HOST_NUMBERS = [1, 2, 3, 4, 9, 10, 12];

/**
 * Fleets and budgets where the rules bind: 2–5 hosts (spark-1 homes Deckard), listed in any
 * order, 1–4 GPUs each, sometimes a second pool, any preference order, budgets often below the
 * fleet's total, queue timeouts short enough for a sequence to reach.
 */
export const configArb: fc.Arbitrary<SparkConfig> = fc
  .record({
    numbers: fc.shuffledSubarray(HOST_NUMBERS, { minLength: 2, maxLength: 5 }),
    gpus: fc.array(fc.constantFrom(1, 1, 1, 2, 4), { minLength: 5, maxLength: 5 }),
    secondPool: fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
    twoPools: fc.boolean(),
    prefer: fc.array(fc.nat({ max: 4 }), { maxLength: 3 }),
    maxPrs: fc.integer({ min: 1, max: 3 }),
    maxGpusPerPr: fc.integer({ min: 1, max: 5 }),
    maxGpusSlack: fc.integer({ min: -4, max: 2 }),
    queueTimeoutS: fc.constantFrom(300, 900, 3600, 6 * 3600),
    devTtlS: fc.constantFrom(600, 3600),
    restoreRetries: fc.integer({ min: 0, max: 2 }),
  })
  .map((x) => {
    const hosts = x.numbers.map((n, i) => ({
      id: `spark-${n}`,
      pool: x.twoPools && i > 0 && x.secondPool[i] ? 'gpu' : 'spark',
      gpus: x.gpus[i]!,
      homeService: n === 1 ? 'deckard' : null,
    }));
    const total = hosts.reduce((n, h) => n + h.gpus, 0);
    const prefer = [...new Set(x.prefer.filter((i) => i < hosts.length).map((i) => hosts[i]!.id))];
    return parseConfig(
      {
        hosts,
        pools: { spark: { runnerLabel: 'spark' }, gpu: { runnerLabel: 'gpu' } },
        preferHosts: prefer,
        budgets: {
          maxPrs: x.maxPrs,
          maxGpusPerPr: x.maxGpusPerPr,
          maxGpus: Math.max(1, total + x.maxGpusSlack),
        },
        timings: {
          heartbeatIntervalS: 10,
          offlineAfterS: 40,
          ciLeaseTtlS: 300,
          devLeaseDefaultTtlS: x.devTtlS,
          queueTimeoutS: x.queueTimeoutS,
          restoreRetries: x.restoreRetries,
        },
      },
      'model config',
    );
  });

/** Every host adopted and heard from once, as an operator brings a fleet up. */
export async function bringUp(w: M.World, sut: Sut): Promise<void> {
  for (const h of w.hosts.values()) {
    M.setManaged(w, h.id, true);
    await sut.setManaged?.(h.id, true);
    const svc: Svc = h.home ? 'serving' : 'none';
    const procs = h.home ? 1 : 0;
    M.heartbeat(w, h.id, procs, svc);
    await sut.heartbeat?.(h.id, M.factsOf(procs, svc));
  }
  await sut.check(w);
}

/** fast-check's report carries the seed and the shrunk command path; fail the test with it. */
export function report<T>(out: fc.RunDetails<T>): void {
  if (!out.failed) return;
  const cause = out.errorInstance instanceof Error ? out.errorInstance.message : String(out.errorInstance);
  throw new Error(`${fc.defaultReportMessage(out) ?? 'property failed'}\nFailure: ${cause}`);
}
