import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { parseSparkCommand } from '../../functions/github/commands.ts';
import * as t from '../../functions/ledger/schema.ts';
import { type Harness, startHarness } from '../fake-github/harness.ts';

/** Adopts every configured host (the rollout gate's precondition); no heartbeat, so no grants. */
async function adoptHosts(h: Harness) {
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
}

describe('repository enablement (operator routes)', () => {
  let h: Harness;
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  it('rollout gate: refuses while a host is unknown or unmanaged; --force-rollout enables and is audited', async () => {
    h = await startHarness();
    h.gh.addRepo('acme/butter');
    await h.c.ledger.setManaged('spark-2', true, 'test');
    const refused = await h.enable('acme/butter');
    expect(refused.status).toBe(409);
    expect((await refused.json()).error).toEqual({
      code: 'rollout_not_ready',
      message:
        'rollout gate: spark-1 (unmanaged) is not adopted; adopt every host first (sparkctl host adopt ID), or override with --force-rollout (recorded in the audit trail)',
    });
    // nothing changed: no repository, no labels, not a single GitHub call
    expect(await h.c.ledger.db.select().from(t.repositories)).toEqual([]);
    // (the controller's own read of the App's delivery log at start is not about this request)
    expect(h.gh.requests.filter((r) => !r.path.startsWith('/app/hook/deliveries'))).toEqual([]);
    const forced = await h.enable('acme/butter', { forceRollout: true });
    expect(forced.status).toBe(200);
    expect((await forced.json()).rolloutOverride).toEqual(['spark-1 (unmanaged)']);
    const ev = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'repository.enabled'));
    expect(ev).toHaveLength(1);
    expect(ev[0]!.cause).toBe(
      'enabled by test-operator; rollout gate overridden while spark-1 (unmanaged) not adopted',
    );
    expect(JSON.parse(ev[0]!.dataJson!)).toMatchObject({ rolloutOverride: ['spark-1 (unmanaged)'] });
    // once every host is adopted the gate is open without an override
    await adoptHosts(h);
    const open = await h.enable('acme/butter');
    expect(open.status).toBe(200);
    expect((await open.json()).rolloutOverride).toEqual([]);
  });

  it('checks the installation and runner scope; the documented App may not create labels, so it names them', async () => {
    h = await startHarness();
    h.gh.addRepo('acme/butter', { installationId: 9, defaultBranch: 'trunk' });
    await adoptHosts(h);
    const res = await h.enable('acme/butter', { pairEnabled: true });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      repository: {
        fullName: 'acme/butter',
        installationId: 9,
        defaultBranch: 'trunk',
        pairEnabled: true,
        enabled: true,
      },
      labelsCreated: [],
      labelsFailed: [],
      // Issues: read only (docs/github-app-manifest.json): a maintainer creates them, exactly so
      labelsToCreate: [
        { name: 'spark-test', color: '76b900' },
        { name: 'spark-test-long', color: '4b8b00' },
        { name: 'spark-pair-test', color: '2e5c00' },
      ],
      runnerGroupOk: true,
    });
    // no request the installation cannot serve was sent (GitHub would refuse it with 403)
    expect(h.gh.calls('POST', /\/labels$/)).toEqual([]);
    expect(h.gh.forbidden).toEqual([]);
    // the installation lookup used the App JWT
    expect(h.gh.calls('GET', /\/installation$/)[0]!.auth).toBe('app');
    const ev = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'repository.enabled'));
    expect(ev[0]).toMatchObject({ subjectId: 'acme/butter', actor: 'api:test-operator' });

    const off = await fetch(`${h.c.url}/api/v1/repositories/acme/butter/disable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await h.operatorToken()}` },
    });
    expect((await off.json()).repository.enabled).toBe(false);
  });

  it('an App that may write issues gets the three labels created (one already there)', async () => {
    h = await startHarness({ manifest: 'test/fixtures/github-apps/manifest-issues-write.json' });
    h.gh.addRepo('acme/butter', { installationId: 9 });
    h.gh.repos.get('acme/butter')!.labels.add('spark-test');
    await adoptHosts(h);
    const res = await h.enable('acme/butter');
    expect(await res.json()).toMatchObject({
      labelsCreated: ['spark-test-long', 'spark-pair-test'],
      labelsExisting: ['spark-test'],
      labelsFailed: [],
      labelsToCreate: [],
    });
    expect(h.gh.calls('POST', /\/labels$/).every((r) => r.auth === 'installation')).toBe(true);
    expect(h.gh.forbidden).toEqual([]);
  });

  it('repository runners with an App that lacks Administration: says so without asking GitHub', async () => {
    // runnerScope "repo", but the App was created from the organization-runner manifest
    h = await startHarness({
      config: { github: { runnerScope: 'repo' } },
      manifest: 'docs/github-app-manifest.json',
    });
    h.gh.addRepo('acme/butter', { installationId: 9 });
    await adoptHosts(h);
    const body = await (await h.enable('acme/butter')).json();
    expect(body.runnerGroupOk).toBe(false);
    expect(body.runnerGroupDetail).toMatch(/lacks Repository → "Administration": read and write/);
    expect(h.gh.calls('GET', /\/actions\/runners/)).toEqual([]);
    expect(h.gh.forbidden).toEqual([]);
  });

  it('refuses without the operate scope, for a repository without the App, or the wrong installation', async () => {
    h = await startHarness();
    h.gh.addRepo('acme/iron', { installationId: 5 });
    await adoptHosts(h);
    const dev = (await createApiToken(h.c.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
    const forbidden = await fetch(`${h.c.url}/api/v1/repositories/acme/iron/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${dev}` },
    });
    expect(forbidden.status).toBe(403);
    const anon = await fetch(`${h.c.url}/api/v1/repositories/acme/iron/enable`, { method: 'POST' });
    expect(anon.status).toBe(401);
    const missing = await h.enable('acme/nothing');
    expect(missing.status).toBe(404);
    expect((await missing.json()).error).toMatchObject({ code: 'app_not_installed' });
    const mismatch = await h.enable('acme/iron', { installationId: 6 });
    expect(mismatch.status).toBe(409);
    const bad = await h.enable('acme/iron', { pairEnabled: 'yes' });
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.message).toMatch(/pairEnabled/);
    expect(await h.c.ledger.db.select().from(t.repositories)).toEqual([]);
  });

  it('org runner scope: a selected runner group must include the repository', async () => {
    h = await startHarness({ config: { github: { runnerScope: 'org', runnerGroupId: 3 } } });
    h.gh.addRepo('acme/butter');
    h.gh.runnerGroups.set(3, { name: 'spark', visibility: 'selected', repositories: ['acme/iron'] });
    await adoptHosts(h);
    const no = await (await h.enable('acme/butter')).json();
    expect(no.runnerGroupOk).toBe(false);
    expect(no.runnerGroupDetail).toMatch(/does not include acme\/butter/);
    h.gh.runnerGroups.get(3)!.repositories.push('acme/butter');
    const yes = await (await h.enable('acme/butter')).json();
    expect(yes.runnerGroupOk).toBe(true);
  });
});

describe('schedules (croner, UTC)', () => {
  let h: Harness;
  afterEach(async () => {
    // every call the schedules made matched GitHub's schema (issue 12 item 8)
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  it('queues a benchmark from a cron schedule at the default-branch head, without piling up', async () => {
    h = await startHarness({
      config: { schedules: [{ repo: 'acme/butter', cron: '*/5 * * * *', kind: 'benchmark' }] },
    });
    h.gh.addRepo('acme/butter', { headSha: '9'.repeat(40) });
    await adoptHosts(h);
    expect((await h.enable('acme/butter')).status).toBe(200);
    await h.until('schedule first seen', async () =>
      (await h.c.ledger.db.select().from(t.meta)).some((m) => m.key.startsWith('schedule:')),
    );
    h.clock.advance(5 * 60_000 + 1000);
    const r = await h.until(
      'benchmark queued',
      async () => (await h.c.ledger.getReservation(undefined, 'r-1')) ?? null,
    );
    expect(r).toMatchObject({
      kind: 'benchmark',
      priority: 50,
      headSha: '9'.repeat(40),
      suite: 'performance',
      pr: null,
    });
    h.clock.advance(5 * 60_000 + 1000);
    // the slot is consumed, but r-1 is still queued: no second request
    await h.until('slot consumed', async () => {
      const m = (await h.c.ledger.db.select().from(t.meta)).find((x) => x.key.startsWith('schedule:'));
      return m && Number(m.value) > (r.createdAt ?? 0) + 5 * 60_000;
    });
    expect(await h.c.ledger.getReservation(undefined, 'r-2')).toBeNull();
  });
});

describe('/spark command parsing', () => {
  it('reads the first /spark line only', () => {
    expect(parseSparkCommand('/spark test')).toEqual({ kind: 'test', pair: false, long: false });
    expect(parseSparkCommand('LGTM\n  /spark test --long --pair  ')).toEqual({
      kind: 'test',
      pair: true,
      long: true,
    });
    expect(parseSparkCommand('/spark status')).toEqual({ kind: 'status' });
    expect(parseSparkCommand('/spark cancel')).toEqual({ kind: 'cancel' });
    expect(parseSparkCommand('> /spark test\nquoted')).toBeNull();
    expect(parseSparkCommand('/sparkle test')).toBeNull();
    expect(parseSparkCommand(null)).toBeNull();
    // the option is echoed as one bounded code span (ADR 0030, echoSpan)
    expect(parseSparkCommand('/spark test --force')).toEqual({
      kind: 'invalid',
      message:
        'unknown option `--force`; usage: /spark test [--pair] [--long] | /spark status | /spark cancel',
    });
    expect(parseSparkCommand('/spark')).toMatchObject({ kind: 'invalid' });
  });
});
