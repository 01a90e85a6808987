import { eq } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readMeta } from '../../functions/github/meta.ts';
import { computeDesiredState } from '../../functions/ledger/desired-state.ts';
import * as t from '../../functions/ledger/schema.ts';
import { example, type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';

/**
 * The controller's side of CI as a dstack task (ADR 0110) against the fake GitHub: no
 * dispatch and no runner for such a repository, one read-only clone token per lease (refused when
 * GitHub grants more), carried to the agent with the task workload in the `run` state.
 */

const REPO = 'Codertocat/Hello-World';
const SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';

function labeled() {
  const p = example('pull_request', 'labeled');
  p.label.name = 'spark-test';
  p.sender.login = 'Codertocat';
  p.pull_request.labels = [{ ...p.label }];
  return p;
}

describe('CI as a dstack task: the controller', () => {
  let h: Harness;
  beforeEach(async () => {
    h = await startHarness({
      config: { repositories: { [REPO]: { executor: 'dstack', ci: 'task' } } },
    });
    h.gh.addRepo(REPO, {
      installationId: 1,
      collaborators: { Codertocat: 'admin' },
      pulls: { 2: { state: 'open', headSha: SHA, headRepo: REPO, labels: ['spark-test'] } },
      headSha: 'b'.repeat(40),
    });
    h.gh.addRepo('Codertocat/Other', {
      installationId: 1,
      collaborators: {},
      pulls: {},
      headSha: 'd'.repeat(40),
    });
    for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
    expect((await h.enable(REPO)).status).toBe(200);
  });
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  async function granted() {
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    await h.until(
      'allocated',
      async () => (await h.c.ledger.getReservation(undefined, 'r-1'))?.status === 'allocated',
    );
    return (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
  }

  const handoffs = () =>
    h.c.ledger.db.select().from(t.jitHandoffs).where(eq(t.jitHandoffs.reservationId, 'r-1'));

  it('no dispatch, no runner: one token for the one repository with contents: read, handed over with the task', async () => {
    const lease = await granted();
    expect(readMeta((await h.c.ledger.getReservation(undefined, 'r-1'))!)?.ci).toBe('task');
    const [row] = await h.until('the clone token stored', async () => {
      await h.drain();
      const rows = await handoffs();
      return rows.length ? rows : null;
    });
    expect(row).toMatchObject({
      runnerName: `spark-${lease.hostId}-r-1-a0`,
      runnerId: null,
      leaseId: lease.id,
    });
    const minted = h.gh.calls('POST', /\/app\/installations\/1\/access_tokens$/).filter((c) => c.body);
    expect(minted.map((c) => [c.auth, c.body])).toEqual([
      ['app', { repositories: ['Hello-World'], permissions: { contents: 'read' } }],
    ]);
    expect(h.gh.tokenScope(row!.jitConfig!)).toEqual({
      repositories: [REPO.toLowerCase()],
      permissions: { contents: 'read' },
    });
    expect(h.gh.dispatches).toEqual([]);
    expect(h.gh.calls('POST', /generate-jitconfig$/)).toEqual([]);
    // the token is in no outbox result and no event
    const outbox = JSON.stringify(await h.c.ledger.db.select().from(t.outbox));
    const events = JSON.stringify(await h.c.ledger.history('reservation', 'r-1'));
    expect(outbox.includes(row!.jitConfig!)).toBe(false);
    expect(events.includes(row!.jitConfig!)).toBe(false);

    // once the host is prepared, the run state carries the workload and (to be handed once) the token
    await h.c.ledger.advanceReservation('r-1', 'preparing', 'every lease reported prepared', 'agent:spark-2');
    await h.c.ledger.write(async (tx, now) => {
      await tx.update(t.leases).set({ preparedAt: now }).where(eq(t.leases.id, lease.id));
    });
    const s = await computeDesiredState(h.c.ledger, h.c.ledger.db, lease.hostId, Date.now());
    expect(s.desired).toMatchObject({
      state: 'run',
      runnerName: row!.runnerName,
      task: {
        repo: REPO,
        headSha: SHA,
        suite: 'smoke',
        script: 'scripts/ci/spark-test.sh',
        cloneUrl: `https://github.com/${REPO}.git`,
        // the token's revoke goes to the configured API (here the fake GitHub), never a fixed host
        revokeUrl: `${h.gh.url}/installation/token`,
        lane: { name: 'spark-test', targetMinutes: 30 },
      },
    });
    expect(s.pendingHandoff?.runnerName).toBe(row!.runnerName);
    expect(JSON.stringify(s.desired).includes(row!.jitConfig!)).toBe(false);
  });

  it('work no longer wanted when its token would be minted (PR head moved) is withdrawn; no token is asked for', async () => {
    // GitHub's view of the PR moved on after the label (the synchronize webhook not yet processed)
    h.gh.repos.get(REPO.toLowerCase())!.pulls[2]!.headSha = 'e'.repeat(40);
    await adoptAll(h.c.ledger);
    expect((await (await h.deliver('pull_request', labeled())).json()).result).toBe('queued r-1');
    const r = await h.until('withdrawn', async () => {
      await h.drain();
      const cur = await h.c.ledger.getReservation(undefined, 'r-1');
      return cur && cur.outcome === 'withdrawn' ? cur : null;
    });
    expect(r.reason).toBe('no longer wanted before dispatch: PR #2 head moved to eeeeeee');
    expect(h.gh.calls('POST', /\/app\/installations\/1\/access_tokens$/).filter((c) => c.body)).toEqual([]);
    expect(await handoffs()).toEqual([]);
  });

  it('a token GitHub answers with more than contents: read on that repository is refused and never stored', async () => {
    h.gh.fail({
      method: 'POST',
      path: /\/app\/installations\/1\/access_tokens$/,
      status: 201,
      body: {
        token: 'ghs_tooBroad0123456789',
        expires_at: new Date(Date.now() + 3_600_000).toISOString(),
        permissions: { contents: 'write', metadata: 'read' },
        repository_selection: 'selected',
      },
    });
    await granted();
    await h.until('the mint attempt answered', async () => {
      await h.drain();
      const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.kind, 'mint-clone-token'));
      return rows.some((r) => r.status === 'failed') ? rows : null;
    });
    expect(await handoffs()).toEqual([]);
    const rows = JSON.stringify(await h.c.ledger.db.select().from(t.outbox));
    expect(rows).toContain('broader than contents: read');
    expect(rows.includes('ghs_tooBroad0123456789')).toBe(false);
  });

  for (const [what, fault] of [
    [
      'every repository of the installation (repository_selection "all", no repositories)',
      { repositories: true, permissions: false },
    ],
    ['every App permission', { repositories: false, permissions: true }],
  ] as const)
    it(`a clone token GitHub really mints broader than asked (${what}) is revoked with itself and refused`, async () => {
      h.gh.ignoreNextTokenNarrowing(fault);
      await granted();
      await h.until('the mint refused', async () => {
        await h.drain();
        const rows = await h.c.ledger.db.select().from(t.outbox).where(eq(t.outbox.kind, 'mint-clone-token'));
        return rows.some((r) => r.status === 'failed') ? rows : null;
      });
      // the broad token GitHub minted was revoked with itself (DELETE /installation/token, 204) and
      // opens nothing any more; it was never stored for the agent
      const minted = h.gh.calls('POST', /\/app\/installations\/1\/access_tokens$/).filter((c) => c.body);
      expect(minted).toHaveLength(1);
      const broad = [...h.gh.tokens.entries()].find(
        ([, tk]) => tk.repositories === null && tk.revokedAt != null,
      );
      const revokes = h.gh.calls('DELETE', /^\/installation\/token$/);
      expect(revokes).toHaveLength(1);
      expect(revokes[0]).toMatchObject({ status: 204 });
      const token = revokes[0]!.token!;
      expect(h.gh.tokenScope(token)).toBeNull();
      if (fault.repositories) expect(broad?.[0]).toBe(token);
      expect(await handoffs()).toEqual([]);
      const rows = JSON.stringify(await h.c.ledger.db.select().from(t.outbox));
      expect(rows).toContain('broader than contents: read');
      expect(rows).toContain('it was revoked');
      expect(rows.includes(token)).toBe(false);
      // the reservation does not run without its credential: no task is handed out
      const lease = (await h.c.ledger.leasesOf(undefined, 'r-1'))[0]!;
      const st = await computeDesiredState(h.c.ledger, h.c.ledger.db, lease.hostId, Date.now());
      expect(st.pendingHandoff ?? null).toBeNull();
    });
});
