import { afterEach, describe, expect, it } from 'vitest';
import * as t from '../../functions/ledger/schema.ts';
import { makeTestLedger, type TestLedger, testClock } from '../../scripts/sim/ledger.ts';

/**
 * The GitHub sweeps' small commands, by name (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md):
 * each is one write transaction over a ledger mark or the queue, shared by every controller
 * process through the ledger. The sweeps that call them are covered end to end in
 * test/integration/github-redelivery.test.ts, background-schedule.test.ts, github-not-run.test.ts
 * and github-lifecycle.test.ts.
 */

const HOUR = 3_600_000;
let tl: TestLedger | null = null;
afterEach(() => {
  tl?.close();
  tl = null;
});

async function open() {
  const clock = testClock(Date.UTC(2026, 11, 2, 10, 30, 0));
  tl = await makeTestLedger({ clock });
  return { ledger: tl.ledger, clock };
}

const mark = async (l: TestLedger['ledger'], key: string) => l.getMark(undefined, key);

describe('takeJitRegistration: the App-wide hourly JIT bucket', () => {
  it('takes until the hour is used up, then names when it refills; a new hour starts empty', async () => {
    const { ledger, clock } = await open();
    expect(await ledger.github.takeJitRegistration(2)).toBeNull();
    expect(await ledger.github.takeJitRegistration(2)).toBeNull();
    const hour = Math.floor(clock() / HOUR);
    expect(JSON.parse((await mark(ledger, 'github:jit_bucket'))!)).toEqual({ hour, used: 2 });
    // used up: nothing taken, the refill is the next hour's start
    expect(await ledger.github.takeJitRegistration(2)).toBe((hour + 1) * HOUR);
    expect(JSON.parse((await mark(ledger, 'github:jit_bucket'))!)).toEqual({ hour, used: 2 });
    clock.advance(HOUR);
    expect(await ledger.github.takeJitRegistration(2)).toBeNull();
    expect(JSON.parse((await mark(ledger, 'github:jit_bucket'))!)).toEqual({ hour: hour + 1, used: 1 });
  });
});

describe('claimRedeliverySweep: one sweep per interval across processes (ADR 0091)', () => {
  it('is due the first time, not again within the interval, again when forced or an interval later', async () => {
    const { ledger, clock } = await open();
    const first = clock();
    expect(await ledger.github.claimRedeliverySweep(600_000, false)).toEqual({ due: true, sweptAt: first });
    clock.advance(599_999);
    // not due: the last sweep's time, and the mark is left as it was
    expect(await ledger.github.claimRedeliverySweep(600_000, false)).toEqual({ due: false, sweptAt: first });
    expect(await mark(ledger, 'github:redelivery_swept_at')).toBe(String(first));
    expect(await ledger.github.claimRedeliverySweep(600_000, true)).toEqual({ due: true, sweptAt: clock() });
    const forced = clock();
    clock.advance(600_000);
    expect(await ledger.github.claimRedeliverySweep(600_000, false)).toEqual({ due: true, sweptAt: clock() });
    expect(Number(await mark(ledger, 'github:redelivery_swept_at'))).toBe(forced + 600_000);
  });
});

describe('startSchedule and fireSchedule: a slot fires once, never piles up', () => {
  const key = 'schedule:0:acme/widgets:0 3 * * *';
  const input = {
    kind: 'background' as const,
    topology: 'single' as const,
    repo: 'acme/widgets',
    headSha: 'a'.repeat(40),
    suite: 'smoke' as const,
    requester: 'schedule:0 3 * * *',
    meta: { installationId: 1, trigger: 'schedule', defaultBranch: 'main', workflow: 'spark-pr-test.yml' },
  };

  it('starts counting at first sight and keeps the first mark', async () => {
    const { ledger } = await open();
    await ledger.github.startSchedule(key, 1000);
    await ledger.github.startSchedule(key, 2000);
    expect(await mark(ledger, key)).toBe('1000');
  });

  it('fires for the mark it saw: queues the work and moves the mark; a second firing of that slot does nothing', async () => {
    const { ledger, clock } = await open();
    await ledger.github.startSchedule(key, 1000);
    const id = await ledger.github.fireSchedule(key, '1000', input);
    expect(id).toMatch(/^r-/);
    expect(await mark(ledger, key)).toBe(String(clock()));
    const rows = await ledger.db.select().from(t.reservations);
    expect(rows).toMatchObject([{ id, kind: 'background', status: 'queued', repo: 'acme/widgets' }]);
    // another process saw the old mark: it fired already, nothing is written
    expect(await ledger.github.fireSchedule(key, '1000', input)).toBeNull();
    expect(await ledger.db.select().from(t.reservations)).toHaveLength(1);
    expect(await mark(ledger, key)).toBe(String(clock()));
  });

  it('marks the slot fired but queues nothing while work of its kind still waits for the repository', async () => {
    const { ledger, clock } = await open();
    await ledger.github.startSchedule(key, 1000);
    expect(await ledger.github.fireSchedule(key, '1000', input)).not.toBeNull();
    clock.advance(HOUR);
    const seen = (await mark(ledger, key))!;
    expect(await ledger.github.fireSchedule(key, seen, input)).toBeNull();
    expect(await mark(ledger, key)).toBe(String(clock()));
    expect(await ledger.db.select().from(t.reservations)).toHaveLength(1);
  });
});
