import { describe, expect, it } from 'vitest';
import * as t from '../../functions/ledger/schema.ts';
import { createViewsMemo, redactText, toEventView } from '../../functions/views.ts';
import { adoptAll, makeTestLedger } from '../../scripts/sim/ledger.ts';

describe('redactText (public free text)', () => {
  it('keeps the words people need', () => {
    for (const s of [
      'spark-2 draining: spark-2 allocated to r-1; active job finishing',
      'budget: acme/butter#12 holds 4 of 4 GPUs per PR',
      'holding spark-1; waiting for a second host in pool spark',
      'queue timeout: waited 360 min (limit 360 min); last reason: none',
      'superseded by 7fc2a91e0b4d3c2f1a9e8d7c6b5a4f3e2d1c0b9a at 08:09:19',
    ]) {
      expect(redactText(s)).toBe(s);
    }
  });

  it('scrubs addresses, paths, accounts, credentials, environment values and raw log lines', () => {
    const cases: [string, string][] = [
      ['failed at 10.0.3.7:8000', 'failed at [address]'],
      ['host spark1.lab.example.net down', 'host [address] down'],
      ['fe80::1ff:fe23:4567:890a unreachable', '[address] unreachable'],
      ['ssh sparkuser@spark1 refused', 'ssh [account] refused'],
      ['model /srv/models/llama-70b missing', 'model [path] missing'],
      ['cache ~/models/x and ./work/y', 'cache [path] and [path]'],
      ['HF_TOKEN=hf_abc123 set', 'HF_TOKEN=[redacted] set'],
      ['auth Bearer abc.def.ghi failed', 'auth [credential] failed'],
      ['token ghs_16C7e42F292c6912E7710c838347Ae178B4a leaked', '[credential] leaked'],
      ['key spk_api_AAAABBBB used', 'key [credential] used'],
      ['see http://10.1.1.1:9/health', 'see [url]'],
      ['opaque Zx81mQ02pLr77Tq0aaBBccDDeeFFgg99hh00 value', 'opaque [secret] value'],
      [
        'restore failed: health 503\nTraceback (most recent call last):\n  File "/opt/x.py"',
        'restore failed: health 503',
      ],
    ];
    for (const [input, want] of cases) expect(redactText(input), input).toBe(want);
    expect(redactText('x'.repeat(500), 50)).toHaveLength(50);
  });

  it('shows a lease event by reservation and host, never by its fencing-token id', () => {
    const row = {
      id: 1,
      at: 0,
      subjectType: 'lease',
      subjectId: 'l-spark-2-987655',
      type: 'lease.granted',
      fromState: null,
      toState: 'active',
      cause: 'admission granted r-1',
      actor: 'github:octocat',
      dataJson: JSON.stringify({ reservationId: 'r-1', hostId: 'spark-2', fencingToken: 987655 }),
    };
    const pub = toEventView(row, { publicView: true });
    // actor classes only (maintainer, operator, agent, GitHub, controller)
    expect(pub).toMatchObject({ subjectId: 'r-1 on spark-2', actor: 'maintainer' });
    expect(JSON.stringify(pub)).not.toContain('987655');
    expect(toEventView(row, { publicView: false }).actor).toBe('github:octocat');
    expect(toEventView({ ...row, dataJson: 'nope' }, { publicView: true }).subjectId).toBe('lease');
  });

  it('shows a grant row (ADR 0100) without its leases’ ids or fencing tokens, in either view', async () => {
    // a real pass writes the row: one `reservation.allocated` per grant, listing its leases
    const tl = await makeTestLedger();
    try {
      const { ledger } = tl;
      await adoptAll(ledger);
      // tokens no other number in the row could be mistaken for
      await ledger.store.db.update(t.hosts).set({ fencingToken: 987654 });
      const r = await ledger.createReservation(
        { kind: 'development', topology: 'pair', requester: 'api:alice-laptop' },
        'api:alice-laptop',
      );
      const granted = (await ledger.admissionPass('test')).granted[0]!.leases;
      expect(granted.map((l) => [l.hostId, l.fencingToken]).sort()).toEqual([
        ['spark-1', 987655],
        ['spark-2', 987655],
      ]);
      const rows = (await ledger.history('reservation', r.id)).filter(
        (e) => e.type === 'reservation.allocated',
      );
      expect(rows).toHaveLength(1);
      expect(rows[0]!.dataJson).toContain('987655');
      for (const publicView of [true, false]) {
        const text = JSON.stringify(toEventView(rows[0]!, { publicView }));
        expect(text).not.toContain('987655');
        for (const l of granted) expect(text).not.toContain(l.leaseId);
      }
      // the private view keeps the words: which hosts, from which phase
      expect(toEventView(rows[0]!, { publicView: false }).cause).toMatch(
        /^granted spark-2 \(idle → allocated\) \+ spark-1 \(service → allocated, lending its home service\)$/,
      );
    } finally {
      tl.close();
    }
  });

  it('public causes come from templates with actor classes only: no login, token name or private repo', () => {
    // (the stored causes below are what main showed publicly before)
    const seeded = [
      { type: 'reservation.cancelled', cause: 'PR #2 closed by @octocat', actor: 'github:octocat' },
      {
        type: 'reservation.superseded',
        cause: 'pushed by @mallory to acme/secret-repo',
        actor: 'github:mallory',
      },
      { type: 'reservation.released', cause: 'released by api:alice-laptop', actor: 'api:alice-laptop' },
      { type: 'host.restored', cause: 'restore ok on 10.0.0.7 as deckard@spark-1', actor: 'agent:spark-1' },
      { type: 'reservation.queued', cause: 'merge request acme/secret-repo', actor: 'github' },
    ];
    const classes: string[] = [];
    for (const [i, e] of seeded.entries()) {
      const v = toEventView(
        {
          id: i,
          at: 0,
          subjectType: 'reservation',
          subjectId: 'r-1',
          fromState: 'queued',
          toState: 'cancelled',
          dataJson: null,
          ...e,
        },
        { publicView: true },
      );
      const text = JSON.stringify(v);
      for (const secret of ['octocat', 'mallory', 'alice', 'secret-repo', '10.0.0.7', 'deckard@'])
        expect(text).not.toContain(secret);
      classes.push(v.actor);
      expect(v.cause).toMatch(
        / by (a maintainer|an operator|an agent|the GitHub integration|the controller)$/,
      );
    }
    expect(classes).toEqual(['maintainer', 'maintainer', 'operator', 'agent', 'GitHub']);
    // the authenticated API keeps the full, scrubbed cause for audits
    expect(
      toEventView(
        {
          id: 9,
          at: 0,
          subjectType: 'reservation',
          subjectId: 'r-1',
          fromState: null,
          toState: null,
          dataJson: null,
          ...seeded[2]!,
        },
        { publicView: false },
      ).cause,
    ).toBe('released by api:alice-laptop');
  });

  it('a queued merge CI of an aliased repository: its budget wait names the alias, not the repository@commit', async () => {
    // merge CI takes its budget slot by `repo@sha` (core/admission.ts budgetSlot), so the per-PR
    // GPU reason quoted the full commit of the aliased repository on the public queue
    const sha = 'feedface00112233445566778899aabbccddeeff';
    const tl = await makeTestLedger({
      config: { repoAliases: { 'acme/secret-engine': 'project A' }, budgets: { maxGpusPerPr: 1 } },
    });
    try {
      const { ledger } = tl;
      await adoptAll(ledger);
      const merge = (suite: 'smoke' | 'performance') =>
        ledger.createReservation(
          {
            kind: 'merge',
            topology: 'single',
            suite,
            requester: 'github:push',
            repo: 'acme/secret-engine',
            pr: null,
            headSha: sha,
          },
          'github',
        );
      await merge('smoke');
      await ledger.admissionPass('test');
      const waiting = await merge('performance');
      await ledger.admissionPass('test');
      const views = await createViewsMemo(ledger).get();
      const item = views.queue.queued.find((q) => q.id === waiting.id)!;
      // operators read it as before (redactText takes `name@commit` for an account)
      expect(views.operatorReasons.get(waiting.id)).toBe('budget: acme/[account] holds 1 of 1 GPUs per PR');
      expect(item).toMatchObject({ repo: 'project A', pr: null, headSha: null, prUrl: null });
      expect(item.reason).toBe('budget: project A holds 1 of 1 GPUs per PR');
      const text = JSON.stringify({ fleet: views.fleet, queue: views.queue });
      for (const s of [sha.slice(0, 7), 'secret-engine', 'acme']) expect(text).not.toContain(s);
    } finally {
      tl.close();
    }
  });
});
