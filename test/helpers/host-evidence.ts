import type { HostEvidence } from '../../core/protocol/host-evidence.ts';
import type { Receipt } from '../../core/protocol/receipt.ts';

/**
 * The host's evidence of a run as an agent reports it (ADR 0160): by default a clean pass of
 * `acme/butter` at `sha` — preflight passed, the runner printed Succeeded, the checkout at the SHA.
 */
export function hostEvidence(sha: string, over: Partial<HostEvidence> = {}): HostEvidence {
  return {
    version: 1,
    mode: 'runner',
    preflight: {
      ok: true,
      at: 1_000,
      checks: [
        { name: 'gpu', ok: true, fatal: true, detail: 'no GPU compute process' },
        { name: 'disk', ok: true, fatal: true, detail: '900 GB free under the work root' },
      ],
    },
    runner: {
      result: 'Succeeded',
      job: 'spark-test',
      exitCode: 0,
      stoppedByAgent: false,
      detail: 'runner console: job spark-test Succeeded',
    },
    workTrees: [{ path: 'butter/butter', sha, detail: 'detached HEAD' }],
    observedAt: 2_000,
    ...over,
  };
}

/** A receipt as a job (or a forger holding its token) posts it. */
export function jobReceipt(
  a: { reservationId: string; hostId: string; fencingToken: number; headSha: string },
  over: Partial<Receipt> = {},
): Receipt {
  return {
    version: 1,
    reservationId: a.reservationId,
    hostId: a.hostId,
    fencingToken: a.fencingToken,
    headSha: a.headSha,
    repo: 'acme/butter',
    suite: 'smoke',
    topology: 'single',
    phases: [{ suite: 'smoke', exitCode: 0, durationMs: 1200 }],
    startedAt: '2026-11-30T08:00:00.000Z',
    endedAt: '2026-11-30T08:00:01.200Z',
    result: 'passed',
    exitCode: 0,
    log: { sha256: 'a'.repeat(64), bytes: 2048, lines: 40 },
    toolchain: { node: 'v20.20.2', source: a.headSha },
    ...over,
  };
}
