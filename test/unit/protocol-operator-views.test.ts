import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { ReportSchema } from '../../core/protocol/agent.ts';
import { CreateTokenBody, EtaInfo } from '../../core/protocol/api.ts';
import { DeliveryList, DeliveryResponse, DeliveryState, InboxStats } from '../../core/protocol/deliveries.ts';
import { describeIssues } from '../../core/protocol/receipt.ts';

/**
 * Operator-facing shapes sparkctl parses: token lifetimes (refused with what to write instead),
 * a queued request's ETA, and the webhook inbox (`sparkctl deliveries`).
 */

function parse(schema: z.ZodType, value: unknown): string {
  const r = schema.safeParse(value);
  if (!r.success) return describeIssues(r.error);
  expect(r.data).toEqual(value);
  return 'accepted';
}

describe('token lifetimes', () => {
  const body = (expiresInS?: number) => ({ name: 'ci-bot', scopes: ['develop'], expiresInS });
  it('from a minute to ten years, or no expiry', () => {
    for (const s of [60, 3600, 10 * 365 * 86400])
      expect(parse(CreateTokenBody, body(s)), String(s)).toBe('accepted');
    expect(parse(CreateTokenBody, { name: 'ci-bot', scopes: ['develop'] })).toBe('accepted');
    expect(parse(CreateTokenBody, body(59))).toBe('expiresInS: a token must live at least 60 seconds');
    expect(parse(CreateTokenBody, body(10 * 365 * 86400 + 1))).toBe(
      'expiresInS: a token may live at most 10 years; leave expiresInS out for no expiry',
    );
  });
});

describe('queue ETA', () => {
  it('a time range with its words, or why nothing can start the request', () => {
    const eta = {
      startLo: '2026-11-30T09:00:00Z',
      startHi: '2026-11-30T10:00:00Z',
      text: 'starts in ~1 h',
      blocked: null,
    };
    expect(parse(EtaInfo, eta)).toBe('accepted');
    expect(
      parse(EtaInfo, { startLo: null, startHi: null, text: 'no host can run it', blocked: 'pool-too-small' }),
    ).toBe('accepted');
    expect(parse(EtaInfo, { ...eta, text: undefined })).toMatch(/^text: /);
  });
});

describe('webhook inbox views', () => {
  const delivery = {
    id: 'd-1',
    event: 'issue_comment',
    action: 'created',
    state: 'parked',
    receivedAt: '2026-11-30T09:00:00Z',
    processedAt: null,
    attempts: 5,
    nextAttemptAt: null,
    result: 'parked',
    lastError: 'GitHub answered 502',
  };
  const inbox = { pending: 2, parked: 1, oldestPendingAgeMs: 1500 };

  it('a delivery is pending, done or parked', () => {
    expect(DeliveryState.options).toEqual(['pending', 'done', 'parked']);
    for (const state of ['pending', 'done', 'parked'])
      expect(parse(DeliveryResponse, { delivery: { ...delivery, state } })).toBe('accepted');
    expect(parse(DeliveryResponse, { delivery: { ...delivery, state: 'lost' } })).toMatch(
      /^delivery\.state: /,
    );
  });

  it('the list carries the inbox depth and age beside the deliveries', () => {
    expect(parse(DeliveryList, { inbox, deliveries: [delivery] })).toBe('accepted');
    expect(parse(InboxStats, inbox)).toBe('accepted');
    expect(parse(InboxStats, { ...inbox, pending: 1.5 })).toMatch(/^pending: /);
    expect(parse(DeliveryList, { inbox: {}, deliveries: [] })).toMatch(/^inbox\.pending: /);
    expect(parse(DeliveryList, { inbox, deliveries: [{ ...delivery, attempts: undefined }] })).toMatch(
      /^deliveries\.0\.attempts: /,
    );
  });
});

describe('development attach command', () => {
  it('exactly `dstack attach <run>`, since the requester runs it as given', () => {
    const active = (attach: string) => ({ type: 'lease_active', fencingToken: 1, attach });
    for (const ok of ['dstack attach spark-r-12-spark-2-t7-dev', `dstack attach a${'b'.repeat(40)}`]) {
      expect(parse(ReportSchema, active(ok)), ok).toBe('accepted');
    }
    for (const bad of [
      'dstack attach spark-r-12; rm -rf ~',
      'sudo dstack attach spark-r-12',
      'dstack attach 1spark',
      'dstack attach s',
      'dstack attach sPARK',
      `dstack attach a${'b'.repeat(41)}`,
    ]) {
      expect(parse(ReportSchema, active(bad)), bad).toBe(
        'attach: an attach command looks like "dstack attach spark-r-12-spark-2-t7-dev"',
      );
    }
  });
});
