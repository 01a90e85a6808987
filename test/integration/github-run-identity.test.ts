import { sql } from 'drizzle-orm';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { fleetLabelOf, parseConfig } from '../../core/config.ts';
import { readMeta } from '../../functions/github/meta.ts';
import { parseReservationLabel, reservationLabel } from '../../functions/github/run-identity.ts';
import { newRunnerNonce } from '../../functions/ledger/runner-nonce.ts';
import { example, type Harness, startHarness } from '../../scripts/sim/fake-github/harness.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';

/**
 * Unguessable per-reservation labels: the nonce is 128 random bits from Web
 * Crypto, two reservations never share a label, and the label names exactly one reservation.
 */

const rid = fc.integer({ min: 1, max: 10 ** 15 - 1 }).map((n) => `r-${n}`);

describe('runner label nonce (pure)', () => {
  it('a nonce is 32 lower-case hex digits (≥ 16 asked for)', () => {
    for (let i = 0; i < 50; i++) expect(newRunnerNonce()).toMatch(/^[0-9a-f]{32}$/);
  });

  it('property: reservations never share a label, and a label names its own reservation', () => {
    fc.assert(
      fc.property(fc.uniqueArray(rid, { minLength: 2, maxLength: 40 }), (ids) => {
        // each reservation draws its own nonce, as the GitHub hook does at `preparing`
        const labels = ids.map((id) => reservationLabel(id, newRunnerNonce()));
        expect(new Set(labels.map((l) => l.toLowerCase())).size).toBe(ids.length);
        for (const [i, l] of labels.entries()) expect(parseReservationLabel(l)?.reservationId).toBe(ids[i]);
      }),
    );
  });

  it('property: the same nonce on two reservations still gives two labels (the id is part of it)', () => {
    fc.assert(
      fc.property(rid, rid, fc.stringMatching(/^[0-9a-f]{16,64}$/), (a, b, nonce) => {
        fc.pre(a !== b);
        expect(reservationLabel(a, nonce)).not.toBe(reservationLabel(b, nonce));
        // `spark-r-1-…` can never be read as `r-12` and the other way round
        expect(parseReservationLabel(reservationLabel(a, nonce))).toEqual({ reservationId: a, nonce });
      }),
    );
  });

  it('the fleet label is configurable (github.fleetLabel, default waffuru-spark); a pool may set its own', () => {
    expect(fleetLabelOf(parseConfig({}), 'spark')).toBe('waffuru-spark');
    const cfg = parseConfig({
      hosts: [
        { id: 'a-1', pool: 'a' },
        { id: 'b-1', pool: 'b' },
      ],
      preferHosts: [],
      pools: { a: {}, b: { runnerLabel: 'gpu-b' } },
      github: { fleetLabel: 'lab-fleet' },
    });
    expect(fleetLabelOf(cfg, 'a')).toBe('lab-fleet');
    expect(fleetLabelOf(cfg, 'b')).toBe('gpu-b');
    expect(() => parseConfig({ github: { fleetLabel: 'has space' } })).toThrow(
      /github\.fleetLabel: a runner label is/,
    );
  });

  it('labels without a nonce, with a short one, or of another shape name no reservation', () => {
    for (const l of [
      'spark-r-1',
      `spark-r-1-${'a'.repeat(15)}`,
      'spark-single',
      'waffuru-spark',
      'spark-r-x-0123456789abcdef',
    ])
      expect(parseReservationLabel(l)).toBeNull();
  });
});

describe('runner label nonce (controller + fake GitHub)', () => {
  let h: Harness;
  afterEach(async () => {
    expect(h.gh.violations).toEqual([]);
    await h.close();
  });

  it('two granted reservations get different nonces, runners and runs; the nonce is on no public surface', async () => {
    const REPO = 'Codertocat/Hello-World';
    h = await startHarness();
    h.gh.addRepo(REPO, {
      installationId: 1,
      collaborators: { Codertocat: 'admin' },
      pulls: {
        2: { state: 'open', headSha: '1'.repeat(40), headRepo: REPO, labels: ['spark-test'] },
        3: { state: 'open', headSha: '2'.repeat(40), headRepo: REPO, labels: ['spark-test'] },
      },
    });
    await adoptAll(h.c.ledger);
    expect((await h.enable(REPO)).status).toBe(200);
    for (const [pr, sha] of [
      [2, '1'.repeat(40)],
      [3, '2'.repeat(40)],
    ] as const) {
      const p = example('pull_request', 'labeled');
      p.label.name = 'spark-test';
      p.pull_request.labels = [{ ...p.label }];
      p.pull_request.number = pr;
      p.number = pr;
      p.pull_request.head.sha = sha;
      expect((await (await h.deliver('pull_request', p)).json()).result).toMatch(/^queued r-\d$/);
    }
    for (const id of ['r-1', 'r-2']) {
      await h.until(
        `${id} allocated`,
        async () => (await h.c.ledger.getReservation(undefined, id))?.status === 'allocated',
      );
      await h.c.ledger.advanceReservation(id, 'preparing', 'every lease reported prepared', 'agent');
    }
    await h.until('two runners registered', () => h.gh.runners.length === 2, 20_000);
    const metas = await Promise.all(
      ['r-1', 'r-2'].map(async (id) => readMeta((await h.c.ledger.getReservation(undefined, id))!)!),
    );
    const [n1, n2] = metas.map((m) => m.nonce!);
    expect(n1).not.toBe(n2);
    expect(metas[0]!.runId).not.toBe(metas[1]!.runId);
    const nonceLabels = h.gh.runners.map((r) => r.labels.filter((l) => parseReservationLabel(l)));
    expect(nonceLabels.sort()).toEqual([[`spark-r-1-${n1}`], [`spark-r-2-${n2}`]].sort());

    // public and operator surfaces: dashboard, queue, fleet, metrics, events, check runs
    const token = await h.operatorToken();
    const texts: Record<string, string> = {};
    for (const path of [
      '/',
      '/dashboard/live',
      '/api/v1/queue',
      '/api/v1/fleet',
      '/metrics',
      '/api/v1/reservations?status=all',
      '/api/v1/reservations/r-1',
      '/api/v1/reservations/r-1/history',
    ]) {
      for (const auth of [false, true]) {
        const res = await fetch(
          `${h.c.url}${path}`,
          auth ? { headers: { authorization: `Bearer ${token}` } } : {},
        );
        texts[`${path}${auth ? ' (operator)' : ''}`] = await res.text();
      }
    }
    texts.checkRuns = JSON.stringify(h.gh.checkRuns);
    texts.events = JSON.stringify(await h.c.ledger.db.all(sql`SELECT * FROM events`));
    texts.outbox = JSON.stringify(
      await h.c.ledger.db.all(sql`SELECT payload_json, result_json, last_error FROM outbox`),
    );
    for (const [where, text] of Object.entries(texts)) {
      expect(text.length, `${where} answered`).toBeGreaterThan(0);
      for (const n of [n1!, n2!]) expect(text.includes(n), `${where} shows a runner nonce`).toBe(false);
    }
    // the only places it exists: the ledger's integration meta, the dispatch and the runner labels
    expect(h.gh.dispatches.map((d) => d.inputs.nonce).sort()).toEqual([n1, n2].sort());
  });
});
