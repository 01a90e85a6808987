import { describe, expect, it } from 'vitest';
import { dateTime, humanDuration, parseDuration } from '../../cli/format.ts';
import { progressLine } from '../../cli/ops.ts';
import type { ReservationInfo } from '../../core/protocol/api.ts';

describe('sparkctl durations and dates', () => {
  it('rounds before splitting into units, so no unit ever reads 60', () => {
    expect(humanDuration(119.6)).toBe('2m');
    expect(humanDuration(59.6)).toBe('1m');
    expect(humanDuration(3599.7)).toBe('1h');
    expect(humanDuration(86399.9)).toBe('1d');
    expect(humanDuration(3725)).toBe('1h 2m');
    expect(humanDuration(90)).toBe('1m 30s');
    expect(humanDuration(7200)).toBe('2h');
    expect(humanDuration(90_000)).toBe('1d 1h');
    expect(humanDuration(0.4)).toBe('0s');
    expect(humanDuration(-5)).toBe('0s');
  });

  it('never shows a unit at its carry value for any whole or fractional second', () => {
    const bad: string[] = [];
    const check = (s: number) => {
      const text = humanDuration(s);
      if (/\b60s\b|\b60m\b|\b24h\b/.test(text) || !/^\d+[smhd]( \d+[smh])?$/.test(text))
        bad.push(`${s} → ${text}`);
    };
    for (let s = 0; s < 4000; s += 0.1) check(s);
    for (let s = 4000; s < 3 * 86400; s += 7.3) check(s);
    expect(bad).toEqual([]);
  });

  it('prints dates with the day and the zone, not bare times', () => {
    expect(dateTime('2026-11-30T18:03:41.123Z')).toBe('2026-11-30 18:03 UTC');
    expect(dateTime(Date.UTC(2026, 11, 1, 0, 5))).toBe('2026-12-01 00:05 UTC');
  });

  it('parses the duration forms the commands accept', () => {
    expect(parseDuration('1h30m')).toBe(5400);
    expect(parseDuration('99h')).toBe(356_400);
    expect(parseDuration('45')).toBe(45);
    expect(parseDuration('soon')).toBeNull();
    expect(parseDuration('4h ')).toBe(14_400);
  });
});

describe('sparkctl progress lines for ended reservations', () => {
  const base: ReservationInfo = {
    id: 'r-7',
    kind: 'development',
    priority: 100,
    topology: 'single',
    status: 'cancelled',
    position: null,
    reason: 'cancelled by its requester',
    outcome: 'cancelled',
    targetHost: null,
    requester: 'api:dev',
    mine: true,
    repo: null,
    pr: null,
    prUrl: null,
    headSha: null,
    suite: null,
    ttlS: 3600,
    createdAt: '2026-11-30T12:00:00Z',
    grantedAt: null,
    endedAt: '2026-11-30T12:05:00Z',
    queueDeadline: '2026-11-30T18:00:00Z',
    waitingOn: [],
    leases: [],
    ready: false,
  };

  it('does not repeat an outcome that equals the status', () => {
    expect(progressLine(base)).toBe('r-7 cancelled · cancelled by its requester');
  });

  it('shows an outcome that adds to the status, never a wait code', () => {
    expect(progressLine({ ...base, status: 'failed', outcome: 'queue_timeout', reason: null })).toBe(
      'r-7 failed (queue_timeout)',
    );
  });
});
