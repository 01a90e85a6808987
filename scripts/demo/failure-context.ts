import type { ChildProcess } from 'node:child_process';
import type { z } from 'zod';
import type { QueueResponse } from '../../core/protocol/api.ts';
import {
  type JobPlan,
  queuedId,
  type ReservationRow,
  type SparkSystem,
  SYSTEM_ADMISSION_INTERVAL_MS,
  type SystemOptions,
  waitFor,
} from '../sim/harness/index.ts';
import { sparkctl } from './ui.ts';

/**
 * What the failure story's chapters share (failures.ts plays them): the rows the seed names, the
 * story's timings, and a context over the running system with the checks each chapter reads.
 */

/** Short timings so the whole story takes a few minutes (seconds where production has minutes). */
export const FAILURE_STORY_TIMINGS = {
  offlineAfterS: 4,
  // a CI lease lives 10 s past its host's last heartbeat, so its expiry plays in seconds
  ciLeaseTtlS: 10,
  restoreRetries: 1,
  restoreHealthTimeoutS: 2,
} as const satisfies NonNullable<SystemOptions['timings']>;
/** The demo controller's admission pass interval (SPARK_ADMISSION_INTERVAL_MS, set by the harness). */
export const PASS_MS = SYSTEM_ADMISSION_INTERVAL_MS;

export type QueueView = z.infer<typeof QueueResponse>;

export interface Row {
  behaviour: string;
  seed: string;
  observed: string | null;
  ok: boolean;
}

export const ROWS = {
  controllerDown: {
    behaviour: 'controller unavailable',
    seed: 'fail closed: no new work starts; the active job finishes; nothing is lost once it is back',
  },
  stale: {
    behaviour: 'heartbeat stale',
    seed: 'the host is offline, never inferred idle, and is never granted',
  },
  leaseExpiry: {
    behaviour: 'lease expiry with processes present',
    seed: 'release-required: nothing killed, nothing admitted; freed only after the agent confirms termination',
  },
  pairLost: {
    behaviour: 'pair node lost',
    seed: 'within the offline threshold plus one pass the pair fails as a unit ("spark-1 lost contact during a pair run — pair failed as a unit"); the healthy runner is stopped, evidence kept; the dark node is release-required until its agent returns and confirms cleanup',
  },
  restoreFails: {
    behaviour: 'Deckard restore failing',
    seed: 'bounded retries, then spark-1 quarantined with an alert and kept out of CI until an operator clears it',
  },
  unlabelQueued: {
    behaviour: 'label removed while queued',
    seed: 'the queued request is cancelled; it never starts',
  },
  closeQueued: {
    behaviour: 'PR closed while queued',
    seed: 'the queued request is cancelled; it never starts',
  },
  unlabelActive: {
    behaviour: 'label removed while active',
    seed: 'cancels only queued work: the active run finishes and reports its result',
  },
  closeActive: {
    behaviour: 'PR closed while active',
    seed: 'cancels only queued work: the active run finishes and reports its result',
  },
  pushQueued: {
    behaviour: 'new SHA while queued',
    seed: 'the queued request for the old SHA is superseded; the new SHA is queued',
  },
  pushActive: {
    behaviour: 'new SHA while active',
    seed: 'the active run is untouched and keeps reporting the SHA it actually tested',
  },
} as const;
export type RowKey = keyof typeof ROWS;

export const sha = (pair: string) => pair.repeat(20);
export const short = (s: string | null | undefined) => (s ?? '—').slice(0, 7);
export const quote = (s: string | null | undefined) => (s == null ? 'none' : `"${s}"`);

/** Plans of the story's jobs by commit: a gate holds a job so the next part happens while it runs. */
export const failureStoryPlans = new Map<string, Partial<JobPlan>>();

// ------------------------------------------------------------------ shared

export type Note = (k: RowKey, observed: string, ok: boolean) => void;

export interface Ctx {
  s: SparkSystem;
  developToken: string;
  sleepers: ChildProcess[];
  nextPr(): number;
  /** Opens a PR at `headSha`, labels it and returns the queued reservation. */
  labelNew(headSha: string, label?: string, plan?: Partial<JobPlan>): Promise<{ n: number; rid: string }>;
  /** Waits until `done(row)` or `ms` passed, then returns the reservation as it is (never throws). */
  settle(rid: string, done: (r: ReservationRow) => boolean, ms: number): Promise<ReservationRow>;
  queueReason(rid: string, ms?: number): Promise<string | null>;
  /** Both hosts back at rest: spark-1 serving Deckard, spark-2 idle. */
  baseline(): Promise<void>;
  dispatched(rid: string): boolean;
  /** The host's STATE and NOTE columns in the operator's `sparkctl fleet` (the real CLI, as a child). */
  operatorView(host: string): Promise<{ state: string; note: string }>;
}

export async function storyContext(s: SparkSystem, sleepers: ChildProcess[]): Promise<Ctx> {
  const dev = await s.api<{ token: string }>('POST', '/api/v1/tokens', {
    name: 'dev-laptop',
    scopes: ['develop'],
  });
  if (dev.status !== 201) throw new Error(`could not create a develop token: ${JSON.stringify(dev.body)}`);
  let pr = 100;
  const ctx: Ctx = {
    s,
    developToken: dev.body.token,
    sleepers,
    nextPr: () => ++pr,
    async labelNew(headSha, label = 'spark-test', plan) {
      const n = ++pr;
      if (plan) failureStoryPlans.set(headSha, plan);
      s.openPr(n, { sha: headSha });
      return { n, rid: queuedId(await s.label(n, label)) };
    },
    async settle(rid, done, ms) {
      await waitFor(
        `${rid} to settle`,
        async () => {
          const r = await s.reader.reservation(rid);
          return r && done(r);
        },
        ms,
        100,
      ).catch(() => undefined);
      return s.reservation(rid);
    },
    async queueReason(rid, ms = 20_000) {
      const item = await waitFor(
        `${rid} to show why it waits`,
        async () =>
          (await s.api<QueueView>('GET', '/api/v1/queue', undefined, null)).body.queued.find(
            (q) => q.id === rid && q.reason,
          ),
        ms,
        200,
      ).catch(() => null);
      return item?.reason ?? null;
    },
    async baseline() {
      await s.waitHostPhase('spark-1', ['service'], 90_000);
      await s.waitHostPhase('spark-2', ['idle'], 90_000);
    },
    dispatched: (rid) => s.gh.dispatches.some((d) => d.inputs.reservation_id === rid),
    async operatorView(host) {
      const out = await sparkctl(s, dev.body.token, ['fleet']).catch((e: Error) => e.message);
      const lines = out.split('\n');
      const head = lines.find((l) => l.startsWith('HOST '));
      const row = lines.find((l) => l.startsWith(`${host} `));
      if (!head || !row) return { state: 'not listed', note: lines[0] ?? '' };
      // columns are padded to the header's offsets (cli/format.ts table)
      const at = (name: string) => head.indexOf(name);
      return { state: row.slice(at('STATE'), at('ADOPTED')).trim(), note: row.slice(at('NOTE')).trim() };
    },
  };
  await ctx.baseline();
  return ctx;
}

/** What GitHub shows of a check run at this moment (the fake updates its objects in place). */
export interface CheckSnapshot {
  title: string | null;
  status: string;
  conclusion: string | null;
  headSha: string;
  summary: string | null;
}
export const snapshot = (c: ReturnType<SparkSystem['checkRun']>): CheckSnapshot | undefined =>
  c && {
    title: c.output.title,
    status: c.status,
    conclusion: c.conclusion ?? null,
    headSha: c.head_sha,
    summary: c.output.summary,
  };

/** The check run once GitHub shows it completed (or as it is after `ms`). */
export async function finalCheck(s: SparkSystem, rid: string, ms = 30_000) {
  await waitFor(
    `the check of ${rid} to complete`,
    () => s.checkRun(rid)?.status === 'completed',
    ms,
    100,
  ).catch(() => undefined);
  return snapshot(s.checkRun(rid));
}

/** The check run once its title matches (or as it is after `ms`). */
export async function checkWhen(s: SparkSystem, rid: string, title: RegExp, ms = 20_000) {
  await s.waitCheck(rid, title, ms).catch(() => undefined);
  return snapshot(s.checkRun(rid));
}

export const checkText = (c: CheckSnapshot | undefined) =>
  c ? `check "${c.title}" (${c.conclusion ?? c.status})` : 'no check run';

/** The line of a queued check's summary that carries the start estimate (its title never does). */
export const estimateOf = (c: CheckSnapshot | undefined) =>
  /^Estimate: ([^\n]*?)(?:, from the finished work[^\n]*)?$/m.exec(c?.summary ?? '')?.[1] ?? null;

/**
 * A queued check (title "Spark test queued — position N", as docs/github-app.md words it) once its estimate line
 * matches `estimate` (or as it is after `ms`).
 */
export async function queuedCheckWhen(s: SparkSystem, rid: string, estimate: RegExp, ms = 20_000) {
  await waitFor(
    `the queued check of ${rid} to estimate ${String(estimate)}`,
    () => {
      const c = snapshot(s.checkRun(rid));
      return (
        /^Spark test queued( — position \d+)?$/.test(c?.title ?? '') && estimate.test(estimateOf(c) ?? '')
      );
    },
    ms,
    100,
  ).catch(() => undefined);
  return snapshot(s.checkRun(rid));
}

export const queuedCheckText = (c: CheckSnapshot | undefined) =>
  c ? `${checkText(c)}, estimate ${quote(estimateOf(c))}` : 'no check run';

/** Whether a queued check keeps the seed's title and names `why` on its estimate line. */
export const queuedCheckSays = (c: CheckSnapshot | undefined, why: string) =>
  /^Spark test queued( — position \d+)?$/.test(c?.title ?? '') && (estimateOf(c) ?? '').includes(why);
