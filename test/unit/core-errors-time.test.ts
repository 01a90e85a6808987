import { describe, expect, it } from 'vitest';
import { EXIT, ExitError, StatusError } from '../../core/errors.ts';
import { isoTime } from '../../core/time.ts';

/**
 * The error family (docs/adr/0207-one-error-family.md) and the one time format
 * (`core/time.ts`): the exit codes are the table of docs/sparkctl.md "Exit codes and errors".
 */
describe('exit codes', () => {
  it('are the documented table', () => {
    expect(EXIT).toEqual({
      ok: 0,
      failed: 1,
      usage: 2,
      unreachable: 3,
      unauthorized: 4,
      forbidden: 5,
      notFound: 6,
      conflict: 7,
      timeout: 8,
      interrupted: 130,
    });
  });
});

describe('error family', () => {
  it('a StatusError carries its status, code, message and name', () => {
    const e = new StatusError(409, 'stale_fencing_token', 'the lease moved on');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('StatusError');
    expect(e.status).toBe(409);
    expect(e.code).toBe('stale_fencing_token');
    expect(e.message).toBe('the lease moved on');
    expect(String(e)).toBe('StatusError: the lease moved on');
  });

  it('an ExitError carries its exit code, message and name', () => {
    const e = new ExitError(EXIT.conflict, 'start Deckard first');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('ExitError');
    expect(e.exitCode).toBe(7);
    expect(e.message).toBe('start Deckard first');
    expect(String(e)).toBe('ExitError: start Deckard first');
  });
});

describe('isoTime', () => {
  it('renders epoch milliseconds as ISO 8601 in UTC', () => {
    expect(isoTime(Date.UTC(2026, 11, 2, 8, 0, 0))).toBe('2026-12-02T08:00:00.000Z');
    expect(isoTime(0)).toBe('1970-01-01T00:00:00.000Z');
  });

  it('converts a bigint (a libSQL integer) first', () => {
    expect(isoTime(BigInt(Date.UTC(2026, 11, 2, 8, 0, 0)))).toBe('2026-12-02T08:00:00.000Z');
  });

  it('keeps no time null', () => {
    expect(isoTime(null)).toBeNull();
    expect(isoTime(undefined)).toBeNull();
  });
});
