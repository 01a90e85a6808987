import { eq } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { parseSparkCommand } from '../../functions/github/commands.ts';
import * as t from '../../functions/ledger/schema.ts';
import { type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';

/** Adopts every configured host; no heartbeat, so no grants (the fleet checks are overridden). */
async function adoptHosts(h: Harness) {
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
}

describe('repository enablement (operator routes)', () => {
  let h: Harness;
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  // the gate itself (every check, its fixes, overrides, nothing changed on refusal):
  // github-enable-gate.test.ts; these scenarios override the fleet checks (FLEET_OVERRIDE)

  it('an App that may write issues gets the three labels created (one already there); disable stops it', async () => {
    h = await startHarness({ manifest: 'scripts/sim/fixtures/github-apps/manifest-issues-write.json' });
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
    const ev = await h.c.ledger.db.select().from(t.events).where(eq(t.events.type, 'repository.enabled'));
    expect(ev[0]).toMatchObject({ subjectId: 'acme/butter', actor: 'api:test-operator' });

    const off = await fetch(`${h.c.url}/api/v1/repositories/acme/butter/disable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await h.operatorToken()}` },
    });
    expect((await off.json()).repository.enabled).toBe(false);
  });

  it('refuses without the operate scope, for the wrong installation, or a malformed body', async () => {
    h = await startHarness();
    h.gh.addRepo('acme/iron', { installationId: 5 });
    await adoptHosts(h);
    const dev = (await createApiToken(h.c.ledger, { name: 'dev', scopes: ['develop'] }, 'test')).token;
    const forbidden = await fetch(`${h.c.url}/api/v1/repositories/acme/iron/enable`, {
      method: 'POST',
      headers: { authorization: `Bearer ${dev}` },
    });
    expect(forbidden.status).toBe(403);
    const doctor = await fetch(`${h.c.url}/api/v1/doctor/github/acme/iron`, {
      headers: { authorization: `Bearer ${dev}` },
    });
    expect(doctor.status).toBe(403);
    const anon = await fetch(`${h.c.url}/api/v1/repositories/acme/iron/enable`, { method: 'POST' });
    expect(anon.status).toBe(401);
    const mismatch = await h.enable('acme/iron', { installationId: 6 });
    expect(mismatch.status).toBe(409);
    expect((await mismatch.json()).readiness.checks[0]).toEqual({
      id: 'installation',
      status: 'fail',
      summary: 'acme/iron is served by App installation 5, not 6',
      fix: 'name installation 5 (or leave installationId out)',
    });
    const bad = await h.enable('acme/iron', { pairEnabled: 'yes' });
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.message).toMatch(/pairEnabled/);
    const badName = await h.enable('acme/iron', { workflow: '../x.yml' });
    expect(badName.status).toBe(400);
    expect(await h.c.ledger.db.select().from(t.repositories)).toEqual([]);
  });
});

describe('schedules (croner, UTC)', () => {
  let h: Harness;
  afterEach(async () => {
    // every call the schedules made matched GitHub's schema
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
