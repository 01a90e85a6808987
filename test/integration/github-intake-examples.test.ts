import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import manifest from '../../docs/github-app-manifest.json' with { type: 'json' };
import { type Harness, labelObject, recordedExamples } from '../../scripts/sim/fake-github/harness.ts';
import { completeWebhook } from '../../scripts/sim/fake-github/webhooks.ts';
import { startHarnessFor } from '../fake-github/harness-for-test.ts';

/**
 * The webhook intake on every community example payload (`@octokit/webhooks-examples`) of every
 * event the App subscribes to (`docs/github-app-manifest.json` `default_events`), each signed and
 * delivered to a real controller (real HTTP port, libSQL file) with the fake GitHub behind it.
 * Each example is delivered twice: as recorded (older payloads, from before GitHub added fields:
 * a controller must take them too) and brought up to GitHub's current webhook description (the
 * recording with the properties the description now requires filled in; checked by the harness).
 * None may get a 5xx, and each has the effect docs/github-app.md documents: a repository that is
 * not enabled gets nothing; on an enabled one the actions the App does not act on are ignored and
 * write nothing, a Spark label queues a reservation, removing it or closing the PR cancels it, a
 * `/spark test` comment queues one, a push to the default branch queues merge CI, and a job asking
 * for a reservation label that was never issued is audited.
 */

const REPO = 'Codertocat/Hello-World';
/** The head commit of the recorded pull request #2. */
const PR_SHA = 'ec26c3e57ca3a959ca5aad62de7213c562f8c821';
/** The recorded push to `refs/heads/master`. */
const PUSH_SHA = '6113728f27ae82c7b1a177c8d03f9e96e0adf246';

// biome-ignore lint/suspicious/noExplicitAny: recorded payloads are edited field by field
type Payload = any;

const EVENTS = manifest.default_events;

/** Every recording of `event`, as recorded and as GitHub sends it today. */
function variants(event: string): { label: string; payload: Payload; asRecorded: boolean }[] {
  return recordedExamples(event).flatMap((p: Payload, i: number) => [
    { label: `${event}[${i}] ${p.action ?? ''} as recorded`, payload: p, asRecorded: true },
    {
      label: `${event}[${i}] ${p.action ?? ''} today`,
      payload: completeWebhook(event, structuredClone(p)),
      asRecorded: false,
    },
  ]);
}

async function count(h: Harness, table: string): Promise<number> {
  const rows = await h.c.ledger.db.all<{ n: number }>(sql.raw(`SELECT count(*) AS n FROM ${table}`));
  return rows[0]!.n;
}

/** What a delivery wrote besides its own inbox row. */
async function written(h: Harness) {
  return {
    reservations: await count(h, 'reservations'),
    outbox: await count(h, 'outbox'),
    events: await count(h, 'events'),
  };
}

async function deliver(h: Harness, event: string, v: { payload: Payload; asRecorded: boolean }) {
  const res = await h.deliver(event, v.payload, { asRecorded: v.asRecorded });
  const body = (await res.json()) as { state?: string; result?: string };
  return { status: res.status, state: body.state, result: body.result ?? '' };
}

async function enabledHarness(ctx: Parameters<typeof startHarnessFor>[0]): Promise<Harness> {
  const h = await startHarnessFor(ctx);
  // the recordings' repository: default branch master, PR #2 open at its recorded head, the
  // recorded sender a maintainer
  h.gh.addRepo(REPO, {
    installationId: 1,
    defaultBranch: 'master',
    collaborators: { Codertocat: 'maintain' },
    pulls: {
      1: { state: 'open', headSha: PR_SHA, headRepo: REPO, labels: [] },
      2: { state: 'open', headSha: PR_SHA, headRepo: REPO, labels: [] },
    },
  });
  // the rollout gate wants every host adopted; without heartbeats they stay offline (no grants)
  for (const host of h.c.ledger.config.hosts) await h.c.ledger.setManaged(host.id, true, 'test');
  expect((await h.enable(REPO)).status).toBe(200);
  await h.drain();
  return h;
}

describe('webhook intake on the community example payloads', () => {
  it('the App subscribes to exactly the events this test covers', () => {
    expect([...EVENTS].sort()).toEqual(['issue_comment', 'pull_request', 'push', 'workflow_job']);
  });

  it('a repository that is not enabled: every example is acknowledged, ignored, and writes nothing', async (ctx) => {
    const h = await startHarnessFor(ctx);
    const before = await written(h);
    let sent = 0;
    for (const event of EVENTS) {
      for (const v of variants(event)) {
        const d = await deliver(h, event, v);
        sent++;
        expect(d.status, v.label).toBe(202);
        expect(d.state, v.label).toBe('done');
        expect(d.result, v.label).toMatch(/^ignored: /);
      }
    }
    expect(await written(h)).toEqual(before);
    expect(await count(h, 'webhook_deliveries')).toBe(sent);
    // nothing was asked of GitHub about them either (the controller's own look at its delivery
    // log on start, ADR 0091, is not about a delivery)
    expect(h.gh.requests.filter((r) => !r.path.startsWith('/app/hook/deliveries'))).toEqual([]);
  });

  it('pull_request on an enabled repository: only a Spark label queues, its removal or the close cancels', async (ctx) => {
    const h = await enabledHarness(ctx);
    const before = await written(h);
    // as recorded (label "bug"): nothing the App acts on
    for (const v of variants('pull_request')) {
      const d = await deliver(h, 'pull_request', v);
      expect(d.status, v.label).toBe(202);
      const action = v.payload.action as string;
      const expected =
        action === 'labeled' || action === 'unlabeled'
          ? 'ignored: not a Spark label'
          : action === 'synchronize'
            ? 'nothing to supersede'
            : action === 'closed'
              ? 'nothing queued'
              : `ignored: pull_request.${action}`;
      expect(d.result, v.label).toBe(expected);
    }
    expect(await written(h)).toEqual(before);

    // the same recordings with the Spark label: the first queues, the rest find it queued
    const spark = (v: { payload: Payload }) => {
      const p = structuredClone(v.payload);
      p.label = labelObject(REPO, 'spark-test', 99);
      p.pull_request.labels = p.action === 'labeled' ? [p.label] : [];
      return p;
    };
    const labeled = variants('pull_request').filter((v) => v.payload.action === 'labeled');
    const results = [];
    for (const v of labeled)
      results.push((await deliver(h, 'pull_request', { ...v, payload: spark(v) })).result);
    expect(results).toEqual(['queued r-1', ...labeled.slice(1).map(() => 'already queued as r-1')]);
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({
      status: 'queued',
      repo: REPO,
      pr: 2,
      headSha: PR_SHA,
      topology: 'single',
      suite: 'smoke',
      requester: 'github:Codertocat',
    });
    const unlabeled = variants('pull_request').find((v) => v.payload.action === 'unlabeled')!;
    expect((await deliver(h, 'pull_request', { ...unlabeled, payload: spark(unlabeled) })).result).toBe(
      'cancelled r-1',
    );
    // labelled again, then the recorded close cancels it
    expect((await deliver(h, 'pull_request', { ...labeled[0]!, payload: spark(labeled[0]!) })).result).toBe(
      'queued r-2',
    );
    const closed = variants('pull_request').find((v) => v.payload.action === 'closed')!;
    expect((await deliver(h, 'pull_request', closed)).result).toBe('cancelled r-2');
    expect((await h.c.ledger.getReservation(undefined, 'r-2'))?.status).toBe('cancelled');
  });

  it('issue_comment on an enabled repository: comments on issues and edits are ignored; /spark test on a PR queues', async (ctx) => {
    const h = await enabledHarness(ctx);
    const before = await written(h);
    for (const v of variants('issue_comment')) {
      const d = await deliver(h, 'issue_comment', v);
      expect(d.status, v.label).toBe(202);
      // every recording is a comment on issue #1, which is not a pull request
      expect(d.result, v.label).toBe(
        v.payload.action === 'created'
          ? 'ignored: comment on an issue, not a PR'
          : `ignored: issue_comment.${v.payload.action}`,
      );
    }
    expect(await written(h)).toEqual(before);
    const created = variants('issue_comment').filter((v) => v.payload.action === 'created');
    const results = [];
    for (const v of created) {
      const p = structuredClone(v.payload);
      p.issue.number = 2;
      p.issue.pull_request = { url: `https://api.github.com/repos/${REPO}/pulls/2` };
      p.comment.body = '/spark test';
      results.push((await deliver(h, 'issue_comment', { ...v, payload: p })).result);
    }
    expect(results).toEqual(['queued r-1', ...created.slice(1).map(() => 'already queued as r-1')]);
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({ pr: 2, headSha: PR_SHA });
  });

  it('push on an enabled repository: tags and deletions are ignored; the default branch queues merge CI once', async (ctx) => {
    const h = await enabledHarness(ctx);
    const before = await written(h);
    const merge: string[] = [];
    for (const v of variants('push')) {
      const d = await deliver(h, 'push', v);
      expect(d.status, v.label).toBe(202);
      if (v.payload.ref === 'refs/heads/master') merge.push(d.result);
      else expect(d.result, v.label).toBe(`ignored: push to ${v.payload.ref}`);
    }
    expect(merge).toEqual([
      'queued r-1',
      'already queued as r-1',
      'already queued as r-1',
      'already queued as r-1',
    ]);
    expect(await count(h, 'reservations')).toBe(before.reservations + 1);
    expect(await h.c.ledger.getReservation(undefined, 'r-1')).toMatchObject({
      kind: 'merge',
      status: 'queued',
      headSha: PUSH_SHA,
      repo: REPO,
    });
  });

  it('workflow_job on an enabled repository: jobs that are not Spark’s are ignored; a never-issued reservation label is audited', async (ctx) => {
    const h = await enabledHarness(ctx);
    const before = await written(h);
    for (const v of variants('workflow_job')) {
      const d = await deliver(h, 'workflow_job', v);
      expect(d.status, v.label).toBe(202);
      expect(d.result, v.label).toBe('ignored: not a Spark job');
    }
    expect(await written(h)).toEqual(before);
    // a recorded queued job that asks for a reservation label nobody issued
    const queued = variants('workflow_job').find((v) => v.payload.action === 'queued' && !v.asRecorded)!;
    const p = structuredClone(queued.payload);
    p.repository.full_name = REPO;
    p.workflow_job.labels = ['self-hosted', 'Linux', 'ARM64', 'spark-r-404-0123456789abcdef'];
    const d = await deliver(h, 'workflow_job', { ...queued, payload: p });
    expect(d.result).toBe('fault: no such reservation label (r-404)');
    const audited = await h.c.ledger.db.all<{ type: string; data: string }>(
      sql`SELECT type, data_json AS data FROM events ORDER BY id DESC LIMIT 1`,
    );
    expect(audited[0]!.data).not.toContain('0123456789abcdef');
    expect(await count(h, 'reservations')).toBe(before.reservations);
  });
});
