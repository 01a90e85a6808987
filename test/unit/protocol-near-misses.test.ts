import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { DesiredStateSchema, PollResponseSchema, ReportSchema } from '../../core/protocol/agent.ts';
import {
  describeIssues,
  LeaseVerifyRequestSchema,
  type Receipt,
  ReceiptSchema,
} from '../../core/protocol/receipt.ts';

/**
 * The agent trusts nothing the controller says and the controller trusts no
 * runner: every id, name and token the other side sends must match its whole pattern, not just a
 * part of it. Each case below is a value that looks right at one end and is wrong at the other
 * (a prefix like `../`, a suffix like `/..` or a trailing newline), and a refusal names the field
 * and says what the value should look like.
 */

function parse(schema: z.ZodType, value: unknown): string {
  const r = schema.safeParse(value);
  return r.success ? 'accepted' : describeIssues(r.error);
}

const lease = {
  leaseId: 'l-spark-2-7',
  reservationId: 'r-12',
  fencingToken: 7,
  kind: 'manual',
  topology: 'single',
  lend: false,
  expiresInMs: 0,
};
const poll = (over: Record<string, unknown>) => ({
  hostId: 'spark-2',
  version: 'v1',
  heartbeatIntervalS: 10,
  desired: { state: 'idle' },
  ...over,
});
const prepare = (over: Record<string, unknown>) => ({ state: 'prepare', lease: { ...lease, ...over } });
const run = (over: Record<string, unknown>) => ({
  state: 'run',
  lease,
  runnerName: 'spark-spark-2-r-12-a0',
  ...over,
});

describe('agent protocol: whole-value patterns', () => {
  it('host ids: lower-case letters, digits and dashes, starting with a letter or digit', () => {
    expect(parse(PollResponseSchema, poll({}))).toBe('accepted');
    expect(parse(PollResponseSchema, poll({ hostId: `a${'-'.repeat(62)}` }))).toBe('accepted');
    for (const hostId of [
      '-spark-2',
      '../spark-2',
      'spark-2/..',
      'spark-2\n',
      'Spark-2',
      `a${'b'.repeat(63)}`,
    ]) {
      expect(parse(PollResponseSchema, poll({ hostId })), hostId).toBe(
        'hostId: host ids look like "spark-2"',
      );
    }
  });

  it('desired-state versions: a short fingerprint of letters, digits, _ and -', () => {
    expect(parse(PollResponseSchema, poll({ version: 'A_b-9' }))).toBe('accepted');
    for (const version of ['!v1', 'v1!', 'v 1', '', 'v'.repeat(129)]) {
      expect(parse(PollResponseSchema, poll({ version })), version).toBe(
        'version: a version is a short fingerprint',
      );
    }
  });

  it('lease and reservation ids: l-<host>-<token> and r-<number>, nothing before or after', () => {
    expect(parse(DesiredStateSchema, prepare({}))).toBe('accepted');
    for (const leaseId of ['xl-spark-2-7', '/l-spark-2-7', 'l-spark-2-7/..', 'l-spark-2-7\n', 'l--7']) {
      expect(parse(DesiredStateSchema, prepare({ leaseId })), leaseId).toBe(
        'lease.leaseId: lease ids look like "l-spark-2-7"',
      );
    }
    for (const reservationId of ['xr-12', 'r-12x', 'r-12/..', 'r-', `r-${'1'.repeat(16)}`]) {
      expect(parse(DesiredStateSchema, prepare({ reservationId })), reservationId).toBe(
        'lease.reservationId: reservation ids look like "r-12"',
      );
    }
  });

  it('a lease names its kind from the reservation kinds, and says which ones exist', () => {
    expect(parse(DesiredStateSchema, prepare({ kind: 'background' }))).toBe('accepted');
    expect(parse(DesiredStateSchema, prepare({ kind: 'pirate' }))).toBe(
      'lease.kind: kind is one of development, deckard, manual, merge, benchmark, background',
    );
  });

  it('lease expiry: up to a year either way by the controller clock (clocks may differ), no further', () => {
    const day = 86_400_000;
    for (const expiresInMs of [-365 * day, 365 * day, -366 * day, 366 * day]) {
      expect(parse(DesiredStateSchema, prepare({ expiresInMs })), String(expiresInMs)).toBe('accepted');
    }
    expect(parse(DesiredStateSchema, prepare({ expiresInMs: 366 * day + 1 }))).toMatch(
      /^lease\.expiresInMs: /,
    );
    expect(parse(DesiredStateSchema, prepare({ expiresInMs: -366 * day - 1 }))).toMatch(
      /^lease\.expiresInMs: /,
    );
  });

  it('a runner is one plain name, a JIT config printable ASCII, a job token spk_job_ and 16–128 characters', () => {
    expect(
      parse(DesiredStateSchema, run({ jitConfig: 'eyJ!~', jobToken: `spk_job_${'a'.repeat(16)}` })),
    ).toBe('accepted');
    expect(parse(DesiredStateSchema, run({ runnerName: '../x' }))).toBe(
      'runnerName: runner names are one plain name like "spark-spark-2-r-12-a0"',
    );
    expect(parse(DesiredStateSchema, run({ jitConfig: 'ab cd' }))).toBe(
      'jitConfig: a JIT config is printable ASCII without spaces',
    );
    for (const jobToken of [
      `xspk_job_${'a'.repeat(16)}`,
      `spk_job_${'a'.repeat(16)} `,
      `spk_job_${'a'.repeat(16)}\n`,
      `spk_job_${'a'.repeat(15)}`,
      `spk_job_${'a'.repeat(129)}`,
    ]) {
      expect(parse(DesiredStateSchema, run({ jobToken })), jobToken).toBe(
        'jobToken: job tokens look like "spk_job_…"',
      );
    }
  });

  it('a started runner reports its full name (runner names are longer than one character)', () => {
    for (const type of ['runner_started', 'runner_exited']) {
      const extra = type === 'runner_exited' ? { exitCode: 0, lastLines: [] } : {};
      expect(
        parse(ReportSchema, { type, fencingToken: 1, runnerName: 'spark-spark-2-r-12-a0', ...extra }),
      ).toBe('accepted');
      expect(parse(ReportSchema, { type, fencingToken: 1, runnerName: '', ...extra })).toMatch(
        /^runnerName: /,
      );
    }
  });
});

const receipt: Receipt = {
  version: 1,
  reservationId: 'r-12',
  hostId: 'spark-2',
  fencingToken: 4,
  headSha: 'f'.repeat(40),
  suite: 'smoke',
  topology: 'single',
  phases: [{ suite: 'smoke', exitCode: 0, durationMs: 0 }],
  startedAt: '2026-11-30T08:00:00Z',
  endedAt: '2026-11-30T08:10:00Z',
  result: 'passed',
  exitCode: 0,
  log: { sha256: 'a'.repeat(64), bytes: 0, lines: 0 },
  toolchain: {},
};

describe('in-job protocol: whole-value ids and the seed lane', () => {
  it('a host or reservation id from a runner matches from its first to its last character', () => {
    expect(parse(LeaseVerifyRequestSchema, { hostId: 'spark-2.a_b', fencingToken: 1 })).toBe('accepted');
    for (const hostId of ['spark-2/..', 'spark-2\n', '.spark', 'x'.repeat(65)]) {
      expect(parse(LeaseVerifyRequestSchema, { hostId, fencingToken: 1 }), hostId).toBe(
        'hostId: expected an id like "r-12" or "spark-2"',
      );
    }
  });

  it('a receipt may carry its lane (spark-test 30 min, spark-test-long 60 min) and how long it took', () => {
    const lane = { name: 'spark-test', targetMinutes: 30, elapsedMs: 600_000, withinTarget: true };
    for (const l of [
      lane,
      { ...lane, name: 'spark-test-long', targetMinutes: 60 },
      { ...lane, targetMinutes: 1440 },
    ]) {
      const value = { ...receipt, lane: l };
      expect(parse(ReceiptSchema, value)).toBe('accepted');
      expect(ReceiptSchema.parse(value).lane).toEqual(l);
    }
    expect(parse(ReceiptSchema, { ...receipt, lane: { ...lane, targetMinutes: 0.5 } })).toBe('accepted');
    expect(parse(ReceiptSchema, { ...receipt, lane: { ...lane, name: 'nightly' } })).toMatch(/^lane\.name: /);
    expect(parse(ReceiptSchema, { ...receipt, lane: { ...lane, name: '' } })).toMatch(/^lane\.name: /);
    expect(parse(ReceiptSchema, { ...receipt, lane: { ...lane, targetMinutes: 0 } })).toMatch(
      /^lane\.targetMinutes: /,
    );
    expect(parse(ReceiptSchema, { ...receipt, lane: { ...lane, targetMinutes: 1441 } })).toMatch(
      /^lane\.targetMinutes: /,
    );
  });

  it('nested issues name their full path', () => {
    expect(parse(ReceiptSchema, { ...receipt, log: { ...receipt.log, sha256: 'x' } })).toBe(
      'log.sha256: expected a SHA-256 hex digest',
    );
  });
});
