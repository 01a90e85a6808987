import type { ChildProcess } from 'node:child_process';
import type { SparkSystem } from '../sim/harness/index.ts';
import { ROWS, type Row, type RowKey, storyContext } from './failure-context.ts';
import { controllerUnavailable, hostFailures } from './failures-hosts.ts';
import { cancellationsAndPushes, pairNodeLost } from './failures-work.ts';
import { bold, dim, green, line, printTable, red } from './ui.ts';

export { FAILURE_STORY_TIMINGS, failureStoryPlans } from './failure-context.ts';

/**
 * `npm run demo -- --story failures`: every failure and cancellation behaviour
 * the seed names, played against the same simulated fleet as the demo (real controller and agent
 * processes, simulated GitHub). Each row's "observed" is read back from the running system — the
 * ledger (reservations, leases, hosts, event history), the check runs on the simulated GitHub, the
 * public fleet and queue views, the agents' output and the runner processes — and a row matches
 * only when those facts are what the seed says. Nothing here writes the ledger: the story acts
 * as GitHub, a maintainer, a developer or an operator would, or on the processes themselves.
 */

/** The rows the failure story observed. */
export interface FailureStory {
  rows: Row[];
  /** Every row matched. */
  ok: boolean;
}

/** Plays every row; never throws for a behaviour that did not happen (that row just does not match). */
export async function playFailureStory(s: SparkSystem): Promise<FailureStory> {
  const rows = new Map<RowKey, Row>(
    (Object.keys(ROWS) as RowKey[]).map((k) => [k, { ...ROWS[k], observed: null, ok: false }]),
  );
  const note = (k: RowKey, observed: string, ok: boolean) => {
    const r = rows.get(k)!;
    r.observed = observed;
    r.ok = ok;
    line('observed', `${ok ? green('✓') : red('✗')} ${r.behaviour}: ${dim(observed)}`);
  };
  const sleepers: ChildProcess[] = [];
  const ctx = await storyContext(s, sleepers);
  const groups: [string, RowKey[], () => Promise<void>][] = [
    [
      'cancellation and new commits',
      ['unlabelQueued', 'closeQueued', 'pushQueued', 'unlabelActive', 'closeActive', 'pushActive'],
      () => cancellationsAndPushes(ctx, note),
    ],
    ['pair node lost', ['pairLost'], () => pairNodeLost(ctx, note)],
    // these three hand over state: spark-1 stays quarantined until the lease-expiry step clears it
    [
      'Deckard restore failing, heartbeat stale, lease expiry',
      ['restoreFails', 'stale', 'leaseExpiry'],
      () => hostFailures(ctx, note),
    ],
    ['controller unavailable', ['controllerDown'], () => controllerUnavailable(ctx, note)],
  ];
  let stopped: string | null = null;
  try {
    for (const [name, keys, play] of groups) {
      if (stopped) {
        for (const k of keys) note(k, `not played: ${stopped}`, false);
        continue;
      }
      try {
        await play();
      } catch (e) {
        const msg = (e as Error).message.split('\n')[0]!;
        for (const k of keys) if (rows.get(k)!.observed == null) note(k, `did not happen: ${msg}`, false);
        stopped = `the fleet did not recover after "${name}"`;
        console.error(`\n${red('story step failed')}: ${(e as Error).message}\n${await s.diagnostics()}`);
      }
    }
  } finally {
    for (const p of sleepers) p.kill('SIGKILL');
  }
  const list = [...rows.values()];
  return { rows: list, ok: list.every((r) => r.ok) };
}

/** Prints `behaviour | the seed says | observed | match` and the count. */
export function printFailureTable(story: FailureStory): void {
  console.log(`\n${bold('Failure and cancellation behaviour: the seed vs the running system')}`);
  printTable(
    ['behaviour', 'the seed says', 'observed', 'match'],
    story.rows.map((r) => [r.behaviour, r.seed, r.observed ?? 'not observed', r.ok ? 'yes' : 'NO']),
    [35, 48, 72, 5],
  );
  const n = story.rows.filter((r) => r.ok).length;
  console.log(`\n  ${n}/${story.rows.length} behaviours match the seed`);
}
