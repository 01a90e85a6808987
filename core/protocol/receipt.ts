import * as z from 'zod';
import { CI_MODES, EXECUTOR_NAMES, SUITES, TOPOLOGIES } from '../model.ts';

/**
 * The in-job protocol (docs/architecture.md "In the job"): what a runner sends to the controller's
 * lease endpoints and what it gets back. Shared by `functions/leases-api` (server) and
 * `agent/preflight` + `actions/spark-test` (clients), so both ends validate the same shapes.
 */

/** Largest receipt body the controller accepts; logs stay on the runner, only their hash travels. */
export const MAX_RECEIPT_BYTES = 32 * 1024;
/** At most this many trailing log lines ride along, and only when the run did not pass. */
export const MAX_RECEIPT_LAST_LINES = 50;
export const MAX_RECEIPT_LINE_CHARS = 400;

const id = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'expected an id like "r-12" or "spark-2"');
const sha40 = z.string().regex(/^[0-9a-f]{40}$/, 'expected a full 40-character lower-case commit SHA');
const isoTime = z.iso.datetime({ offset: true });

/** Body of `POST /api/v1/leases/:reservationId/verify` (Bearer = the per-lease job token). */
export const LeaseVerifyRequestSchema = z
  .object({
    hostId: id,
    fencingToken: z.number().int().positive(),
  })
  .strict();
export type LeaseVerifyRequest = z.infer<typeof LeaseVerifyRequestSchema>;

/** 200 answer of the verify endpoint; anything else (or a body not matching this) fails closed. */
export const LeaseVerifyResponseSchema = z.object({
  ok: z.literal(true),
  reservation: z.object({
    id,
    headSha: sha40.nullable(),
    topology: z.enum(TOPOLOGIES),
    suite: z.enum(SUITES).nullable(),
    kind: z.string().min(1),
  }),
  lease: z.object({
    hostId: id,
    fencingToken: z.number().int().positive(),
    /** Epoch ms; renewed by the agent's heartbeats. */
    expiresAt: z.number().int(),
    /** True when the host's home service (Deckard) was lent for this lease. */
    lend: z.boolean(),
  }),
});
export type LeaseVerifyResponse = z.infer<typeof LeaseVerifyResponseSchema>;

export const RECEIPT_RESULTS = ['passed', 'failed', 'cancelled'] as const;
export type ReceiptResult = (typeof RECEIPT_RESULTS)[number];

/**
 * The compact evidence receipt of one host's run (step 3). It carries hashes and short
 * facts, never the log itself; `lastLines` only when the run did not pass.
 */
export const ReceiptSchema = z
  .object({
    version: z.literal(1),
    reservationId: id,
    hostId: id,
    fencingToken: z.number().int().positive(),
    headSha: sha40,
    repo: z
      .string()
      .regex(/^[^/\s]+\/[^/\s]+$/, 'expected "owner/name"')
      .optional(),
    runUrl: z.url().max(300).optional(),
    suite: z.enum(SUITES),
    topology: z.enum(TOPOLOGIES),
    /** The backend that ran the work, from the agent's `SPARK_EXECUTOR`. */
    executor: z.enum(EXECUTOR_NAMES).optional(),
    /**
     * How the work ran: `runner` (the spark-test action in a GitHub job) or `task`
     * (the agent ran spark-test.sh as a dstack task and built this receipt from its exit and logs).
     */
    mode: z.enum(CI_MODES).optional(),
    /**
     * One entry per run of the repository's scripts/ci/spark-test.sh: the lane's suite, whose
     * script runs correctness first when the suite is performance (the spec: "the performance
     * lane always runs correctness first"). Receipts of earlier actions ran smoke, then
     * performance: two entries.
     */
    phases: z
      .array(
        z
          .object({
            suite: z.enum(SUITES),
            exitCode: z.number().int().nullable(),
            durationMs: z.number().int().nonnegative(),
          })
          .strict(),
      )
      .max(2),
    startedAt: isoTime,
    endedAt: isoTime,
    result: z.enum(RECEIPT_RESULTS),
    exitCode: z.number().int().nullable(),
    reason: z.string().max(500).optional(),
    log: z
      .object({
        sha256: z.string().regex(/^[0-9a-f]{64}$/, 'expected a SHA-256 hex digest'),
        bytes: z.number().int().nonnegative(),
        lines: z.number().int().nonnegative(),
      })
      .strict(),
    lastLines: z.array(z.string().max(MAX_RECEIPT_LINE_CHARS)).max(MAX_RECEIPT_LAST_LINES).optional(),
    /**
     * The spec's lane and its time target (spark-test 30 min, spark-test-long 60 min): how long
     * the run took and whether it went over. A target is not a limit: a run over it is not
     * stopped and passes or fails on its results; the job's hard limit is the workflow's
     * `timeout-minutes` (120). `elapsedSeconds` and `overTarget` are absent from receipts of
     * earlier actions and agents (`withinTarget` says the same there).
     */
    lane: z
      .object({
        name: z.enum(['spark-test', 'spark-test-long']),
        targetMinutes: z
          .number()
          .positive()
          .max(24 * 60),
        elapsedMs: z.number().int().nonnegative(),
        withinTarget: z.boolean(),
        elapsedSeconds: z.number().int().nonnegative().optional(),
        overTarget: z.boolean().optional(),
      })
      .strict()
      .optional(),
    /** Short toolchain/source revision strings printed at the start (name → one line). */
    toolchain: z
      .record(z.string().max(40), z.string().max(200))
      .refine((r) => Object.keys(r).length <= 20, 'at most 20 toolchain entries'),
  })
  .strict()
  .superRefine((r, ctx) => {
    if (r.result === 'passed' && r.lastLines?.length) {
      ctx.addIssue({
        code: 'custom',
        path: ['lastLines'],
        message: 'a passed receipt carries no log lines (they are evidence of failure only)',
      });
    }
    if (Date.parse(r.endedAt) < Date.parse(r.startedAt)) {
      ctx.addIssue({ code: 'custom', path: ['endedAt'], message: 'endedAt is before startedAt' });
    }
  });
export type Receipt = z.infer<typeof ReceiptSchema>;

/**
 * A receipt's `lane` from how long the run took: over target when the elapsed time passed the
 * target (the run was never stopped for it; see `ReceiptSchema` `lane`).
 */
export function laneTiming(
  name: NonNullable<Receipt['lane']>['name'],
  targetMinutes: number,
  elapsedMs: number,
): NonNullable<Receipt['lane']> {
  const elapsed = Math.max(0, Math.round(elapsedMs));
  const overTarget = elapsed > targetMinutes * 60_000;
  return {
    name,
    targetMinutes,
    elapsedMs: elapsed,
    withinTarget: !overTarget,
    elapsedSeconds: Math.floor(elapsed / 1000),
    overTarget,
  };
}

/**
 * What `reservations.receipt_json` holds: one receipt per host (a pair has two), so a pair's
 * evidence is complete only when every leased host has reported.
 */
export const StoredReceiptsSchema = z.object({
  byHost: z.record(z.string(), ReceiptSchema),
});
export type StoredReceipts = z.infer<typeof StoredReceiptsSchema>;

/** Parses `reservations.receipt_json`; null when absent or not in the stored shape. */
export function parseStoredReceipts(json: string | null): StoredReceipts | null {
  if (!json) return null;
  try {
    const parsed = StoredReceiptsSchema.safeParse(JSON.parse(json));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** The overall result of stored receipts: any failure fails, all passed passes. */
export function overallResult(receipts: readonly Receipt[]): ReceiptResult | null {
  if (receipts.length === 0) return null;
  if (receipts.some((r) => r.result === 'failed')) return 'failed';
  if (receipts.some((r) => r.result === 'cancelled')) return 'cancelled';
  return 'passed';
}

/** Renders zod issues as `path: message` lines, for error messages that say what to fix. */
export function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(body)'}: ${i.message}`).join('; ');
}
