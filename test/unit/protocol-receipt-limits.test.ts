import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  describeIssues,
  LeaseVerifyResponseSchema,
  laneTiming,
  MAX_RECEIPT_BYTES,
  parseStoredReceipts,
  type Receipt,
  ReceiptSchema,
} from '../../core/protocol/receipt.ts';
import { jobReceipt } from '../helpers/host-evidence.ts';

/**
 * The receipt's limits and whole-value patterns (core/protocol/receipt.ts, docs/architecture.md
 * "In the job"): a runner is not trusted, so every field is bounded and every pattern matches
 * from its first character to its last; a refusal names the field and what to send instead.
 */
const SHA = '7fc2a91d0c7a3e2f5b6a9d8c1e4f3a2b1c0d9e8f';
const base = jobReceipt({ reservationId: 'r-12', hostId: 'spark-2', fencingToken: 3, headSha: SHA });
const failed: Receipt = { ...base, result: 'failed', exitCode: 1 };

function parse(schema: z.ZodType, value: unknown): string {
  const r = schema.safeParse(value);
  return r.success ? 'accepted' : describeIssues(r.error);
}

describe('receipt limits', () => {
  it('a receipt body is at most 32 KiB', () => {
    expect(MAX_RECEIPT_BYTES).toBe(32_768);
  });

  it('the head SHA is 40 lower-case hex digits, nothing before or after', () => {
    expect(parse(ReceiptSchema, base)).toBe('accepted');
    for (const headSha of [`x${SHA}`, `${SHA}x`, `a${SHA}`, SHA.toUpperCase()])
      expect(parse(ReceiptSchema, { ...base, headSha }), headSha).toBe(
        'headSha: expected a full 40-character lower-case commit SHA',
      );
  });

  it('times may carry an offset', () => {
    const r = {
      ...base,
      startedAt: '2026-11-30T09:00:00.000+01:00',
      endedAt: '2026-11-30T09:00:01.200+01:00',
    };
    expect(parse(ReceiptSchema, r)).toBe('accepted');
  });

  it('a repository is owner/name: one slash, no spaces', () => {
    expect(parse(ReceiptSchema, { ...base, repo: 'acme/butter' })).toBe('accepted');
    expect(parse(ReceiptSchema, { ...base, repo: 'a/b' })).toBe('accepted');
    for (const repo of [
      'acme/butter/x',
      'x/acme/butter',
      'acme',
      '/butter',
      'acme/',
      'ac me/butter',
      'acme/but ter',
    ])
      expect(parse(ReceiptSchema, { ...base, repo }), repo).toBe('repo: expected "owner/name"');
  });

  it('short texts are bounded above, never below', () => {
    const ok = {
      ...failed,
      runUrl: 'https://github.com/acme/butter/actions/runs/1',
      reason: 'exit 1',
      lastLines: ['FAIL test/a.test.ts', ''],
      toolchain: { node: 'v20', '': '' },
    };
    expect(parse(ReceiptSchema, ok)).toBe('accepted');
    expect(ReceiptSchema.parse(ok)).toEqual(ok);
    expect(parse(ReceiptSchema, { ...ok, runUrl: `https://github.com/${'a'.repeat(300)}` })).toMatch(
      /^runUrl: /,
    );
    expect(parse(ReceiptSchema, { ...ok, reason: 'r'.repeat(501) })).toMatch(/^reason: /);
    expect(parse(ReceiptSchema, { ...ok, lastLines: ['l'.repeat(401)] })).toMatch(/^lastLines\.0: /);
    expect(parse(ReceiptSchema, { ...ok, lastLines: Array.from({ length: 51 }, () => 'l') })).toMatch(
      /^lastLines: /,
    );
    expect(parse(ReceiptSchema, { ...ok, toolchain: { ['k'.repeat(41)]: 'v' } })).toMatch(/^toolchain\./);
    expect(parse(ReceiptSchema, { ...ok, toolchain: { node: 'v'.repeat(201) } })).toMatch(
      /^toolchain\.node: /,
    );
  });

  it('at most 20 toolchain entries', () => {
    const tools = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`t${i}`, 'v1']));
    expect(parse(ReceiptSchema, { ...base, toolchain: tools(20) })).toBe('accepted');
    expect(parse(ReceiptSchema, { ...base, toolchain: tools(21) })).toBe(
      'toolchain: at most 20 toolchain entries',
    );
  });

  it('one or two phases, each with its suite, exit and duration', () => {
    const phase = { suite: 'smoke', exitCode: 0, durationMs: 1200 };
    for (const phases of [[], [phase], [phase, { ...phase, suite: 'performance', exitCode: null }]]) {
      const r = { ...base, phases };
      expect(parse(ReceiptSchema, r)).toBe('accepted');
      expect(ReceiptSchema.parse(r).phases).toEqual(phases);
    }
    expect(parse(ReceiptSchema, { ...base, phases: [phase, phase, phase] })).toMatch(/^phases: /);
    expect(parse(ReceiptSchema, { ...base, phases: [{ ...phase, extra: 1 }] })).toMatch(/^phases\.0: /);
  });

  it('the log travels as its SHA-256 (64 hex digits, nothing more) and its size', () => {
    const msg = 'log.sha256: expected a SHA-256 hex digest';
    for (const sha256 of [`x${'a'.repeat(64)}`, `${'a'.repeat(64)}x`, 'a'.repeat(65), 'a'.repeat(63)])
      expect(parse(ReceiptSchema, { ...base, log: { ...base.log, sha256 } }), sha256).toBe(msg);
    expect(parse(ReceiptSchema, { ...base, log: { ...base.log, extra: 1 } })).toMatch(/^log: /);
  });
});

describe('the verify answer', () => {
  const answer = {
    ok: true,
    reservation: { id: 'r-12', headSha: SHA, topology: 'single', suite: 'smoke', kind: 'manual' },
    lease: { hostId: 'spark-2', fencingToken: 3, expiresAt: 1_700_000_000_000, lend: false },
  };

  it('binds the reservation, its commit and the lease', () => {
    expect(LeaseVerifyResponseSchema.parse(answer)).toEqual(answer);
    const unbound = {
      ...answer,
      reservation: { ...answer.reservation, headSha: null, suite: null, kind: 'm' },
    };
    expect(LeaseVerifyResponseSchema.parse(unbound)).toEqual(unbound);
  });

  it('anything but ok: true, a kind, and a full SHA fails closed', () => {
    expect(parse(LeaseVerifyResponseSchema, { ...answer, ok: false })).toMatch(/^ok: /);
    expect(
      parse(LeaseVerifyResponseSchema, { ...answer, reservation: { ...answer.reservation, kind: '' } }),
    ).toMatch(/^reservation\.kind: /);
    expect(
      parse(LeaseVerifyResponseSchema, {
        ...answer,
        reservation: { ...answer.reservation, headSha: `${SHA}0` },
      }),
    ).toBe('reservation.headSha: expected a full 40-character lower-case commit SHA');
  });
});

describe('stored receipts and lane timing', () => {
  it('one receipt per host, kept as stored', () => {
    const stored = { byHost: { 'spark-2': base, 'spark-3': { ...base, hostId: 'spark-3' } } };
    expect(parseStoredReceipts(JSON.stringify(stored))).toEqual(stored);
    expect(
      parseStoredReceipts(JSON.stringify({ byHost: { 'spark-2': { ...base, version: 2 } } })),
    ).toBeNull();
  });

  it('a run exactly at its target is within it; a millisecond more is over', () => {
    expect(laneTiming('spark-test', 30, 1_800_000)).toEqual({
      name: 'spark-test',
      targetMinutes: 30,
      elapsedMs: 1_800_000,
      withinTarget: true,
      elapsedSeconds: 1800,
      overTarget: false,
    });
    expect(laneTiming('spark-test', 30, 1_800_001)).toMatchObject({ withinTarget: false, overTarget: true });
  });
});
