import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { mergeCiForRepo, parseConfig } from '../../core/config.ts';
import { example } from '../../scripts/sim/fake-github/harness.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';

/**
 * The per-repository merge CI switch (`repositories."<o/r>".mergeCi`, on by default as the
 * workload table has it: a push to the default branch runs merge correctness CI at priority 70).
 * Off, a push to the default branch writes nothing but the delivery's result, which says why.
 */

const ON = 'Codertocat/Hello-World';
const OFF = 'acme/iron';

function push(repo: string, after: string, sender = 'Codertocat') {
  const p = example('push');
  p.repository.full_name = repo;
  p.repository.name = repo.split('/')[1];
  p.repository.default_branch = 'main';
  p.ref = 'refs/heads/main';
  p.after = after;
  p.deleted = false;
  p.sender.login = sender;
  return p;
}

describe('merge CI per-repository switch', () => {
  it('is on unless a repository entry turns it off; the config schema names it', () => {
    const cfg = parseConfig(
      { repositories: { [OFF]: { mergeCi: false }, 'acme/butter': { executor: 'dstack' } } },
      'test',
    );
    expect(mergeCiForRepo(cfg, OFF)).toBe(false);
    // GitHub compares owner/name without case
    expect(mergeCiForRepo(cfg, 'ACME/Iron')).toBe(false);
    expect(mergeCiForRepo(cfg, 'acme/butter')).toBe(true);
    expect(mergeCiForRepo(cfg, ON)).toBe(true);
    expect(() => parseConfig({ repositories: { [OFF]: { mergeCi: 'no' } } }, 'test')).toThrow(
      /repositories\.acme\/iron\.mergeCi/,
    );
  });

  it('off: a push to the default branch writes nothing and the delivery says why; on: it queues merge CI', async (ctx) => {
    const h = await startHarnessFor(ctx, {
      config: { repositories: { [OFF]: { mergeCi: false } } },
    });
    for (const repo of [ON, OFF])
      h.gh.addRepo(repo, { installationId: 1, collaborators: { Codertocat: 'admin' } });
    for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
    for (const repo of [ON, OFF]) expect((await h.enable(repo)).status).toBe(200);

    const counts = async () =>
      Object.fromEntries(
        await Promise.all(
          ['reservations', 'events', 'outbox'].map(async (table) => {
            const rows = await h.c.ledger.db.all<{ n: number }>(
              sql.raw(`SELECT count(*) AS n FROM ${table}`),
            );
            return [table, rows[0]!.n] as const;
          }),
        ),
      );
    const before = await counts();
    const requestsBefore = h.gh.requests.length;

    const off = await h.deliver('push', push(OFF, '3'.repeat(40)));
    expect(off.status).toBe(202);
    expect(await off.json()).toMatchObject({
      state: 'done',
      result: `ignored: merge CI is off for ${OFF} (repositories."${OFF}".mergeCi is false)`,
    });
    // nothing in the ledger, nothing asked of GitHub (not even the pusher's permission), no check
    expect(await counts()).toEqual(before);
    expect(h.gh.requests.slice(requestsBefore)).toEqual([]);
    // a push by someone who could not run merge CI is not refused either: there is nothing to refuse
    const stranger = await h.deliver('push', push(OFF, '4'.repeat(40), 'outsider'));
    expect((await stranger.json()).result).toMatch(/^ignored: merge CI is off for acme\/iron/);
    await h.drain();
    expect(h.gh.checkRuns).toEqual([]);
    expect(await counts()).toEqual(before);

    const on = await h.deliver('push', push(ON, '5'.repeat(40)));
    expect((await on.json()).result).toBe('queued r-1');
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({
      kind: 'merge',
      priority: 70,
      repo: ON,
      headSha: '5'.repeat(40),
    });
  });
});
