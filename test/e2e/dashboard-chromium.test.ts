import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { type BrowserContext, chromium } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAgentToken } from '../../functions/auth/tokens.ts';
import * as t from '../../functions/ledger/schema.ts';
import { repoRoot } from '../../functions/node-server.ts';
import { idleFacts, servingFacts, tempDir } from '../../scripts/sim/ledger.ts';
import {
  agentCleaned,
  agentPrepared,
  bringOnline,
  heardAnHourAgo,
  startApiController,
  until,
} from '../integration/cli-harness.ts';

/**
 * The control room in real Debian Chromium (scripts/setup-test-deps.sh installs it): renders the
 * fleet and queue, refreshes live when the ledger changes, and never shows what it must not.
 */

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = join(repoRoot, 'test', 'artifacts');

let ctl: Awaited<ReturnType<typeof startApiController>> | null = null;
let browser: BrowserContext | null = null;
let profile: { dir: string; cleanup: () => void };

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  profile = tempDir('spark-chromium-');
  browser = await chromium.launchPersistentContext(profile.dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-background-networking',
      '--disable-gpu',
      '--no-first-run',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1440, height: 1000 },
  });
});
afterAll(async () => {
  await browser?.close();
  profile.cleanup();
});
afterEach(async () => {
  await ctl?.c.close();
  ctl = null;
});

/** A lively fleet: Deckard serving, a merge CI run, a pair waiting, a benchmark behind it. */
async function seedFleet() {
  const { c, call, tokens } = ctl!;
  await bringOnline(c.ledger);
  const merge = await c.ledger.createReservation(
    {
      kind: 'merge',
      topology: 'single',
      repo: 'acme/butter',
      pr: 412,
      headSha: '7fc2a91e0b4d3c2f1a9e8d7c6b5a4f3e2d1c0b9a',
      suite: 'smoke',
      requester: 'github:push',
    },
    'github',
  );
  await until(
    'merge granted',
    async () => (await c.ledger.getReservation(undefined, merge.id))?.status === 'allocated',
  );
  await agentPrepared(c.ledger, merge.id);
  await c.ledger.advanceReservation(merge.id, 'running', 'runner started', 'agent:spark-2');
  await call(tokens.dev, 'POST', '/api/v1/reservations', { topology: 'pair' });
  await c.ledger.createReservation(
    {
      kind: 'manual',
      topology: 'single',
      repo: 'acme/iron',
      pr: 77,
      headSha: 'b3d1f0a9c8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3',
      suite: 'performance',
      requester: 'github:maintainer',
    },
    'github',
  );
  await c.loop.runNow();
  return { merge: merge.id };
}

describe('control-room dashboard in Chromium', () => {
  it('renders hosts and queue, updates live when a reservation is added, and saves a screenshot', async () => {
    ctl = await startApiController();
    await seedFleet();
    const page = await browser!.newPage();
    try {
      await page.goto(ctl.c.url);
      expect(await page.title()).toBe('Spark control room');
      for (const id of ['spark-1', 'spark-2']) await page.locator(`[data-host="${id}"]`).waitFor();
      // the waiting pair keeps spark-1 (held) and needs spark-2 next (draining)
      expect(await page.locator('[data-host="spark-2"]').getAttribute('data-state')).toBe('draining');
      expect(await page.locator('[data-host="spark-1"]').getAttribute('data-state')).toBe('held');
      expect(await page.locator('[data-host="spark-1"] dd.h-serving').textContent()).toBe('serving');
      const activeRow = page.locator('#active tr[data-reservation="r-1"]');
      expect(await activeRow.textContent()).toMatch(/merge CI.*running.*spark-2.*acme\/butter#412.*7fc2a91/s);
      expect(await activeRow.locator('a').getAttribute('href')).toBe(
        'https://github.com/acme/butter/pull/412',
      );
      const queueRows = page.locator('#queue tbody tr');
      expect(await queueRows.count()).toBe(2);
      expect(await queueRows.nth(0).textContent()).toMatch(/^1r-2development.*pair/s);
      expect(await queueRows.nth(1).locator('td.why').last().textContent()).not.toBe('—');
      expect(await page.locator('#history tr').count()).toBeGreaterThan(5);
      await page.locator('#live-badge.live-on').waitFor({ timeout: 10_000 });

      // a new request arrives: the page shows it without a reload (SSE-triggered refresh)
      const added = await ctl.call(ctl.tokens.dev2, 'POST', '/api/v1/reservations', { host: 'spark-2' });
      const id = added.body.reservation.id as string;
      // well inside the 5 s poll fallback: the change stream triggers the refresh
      const row = page.locator(`#queue tr[data-reservation="${id}"]`);
      await row.waitFor({ timeout: 4_000 });
      // priority 100 queues ahead of the PR test (80), behind the earlier pair (FIFO)
      expect(await row.textContent()).toMatch(new RegExp(`^2${id}development`));
      expect(await queueRows.count()).toBe(3);
      await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
    } finally {
      await page.close();
    }
  });

  it('never shows addresses, users, paths, credentials, raw logs, JIT configs or fencing tokens', async () => {
    ctl = await startApiController();
    const { c, call, tokens } = ctl;
    const secrets = {
      ip: '10.77.12.34',
      fqdn: 'spark1.lab.internal.example.net',
      user: 'sparkadmin',
      modelPath: '/srv/models/llama-70b-instruct/weights',
      hfToken: 'hf_Zq8sd7SECRETtokenValue0000000000',
      ghToken: 'ghs_16C7e42F292c6912E7710c838347Ae178B4a',
      envValue: 'WANDB_API_KEY=0123456789abcdefSECRET',
      rawLog: 'Traceback SECRET-RAW-LOG-LINE-4242',
      jit: 'JITCONFIG-SECRET-BLOB-eyJhbGciOiJIUzI1NiJ9',
      command: '/usr/bin/python3 -m vllm.entrypoints --api-key sk-SECRETCMD',
      fencing: '987655',
    };
    // host facts: an agent that reports far too much
    await bringOnline(c.ledger);
    await c.ledger.write(async (tx) => {
      await tx.update(t.hosts).set({ fencingToken: 987654 }).where(eq(t.hosts.id, 'spark-2'));
    });
    const chatty = {
      ...servingFacts(),
      gpuProcesses: null,
      gpuError: `nvidia-smi failed on ${secrets.fqdn} (${secrets.ip}) as ${secrets.user}@${secrets.fqdn}: ${secrets.modelPath} ${secrets.envValue}`,
      hostname: secrets.fqdn,
      address: secrets.ip,
      user: secrets.user,
      command: secrets.command,
    };
    await c.ledger.recordHeartbeat('spark-1', chatty as never);
    await c.ledger.recordHeartbeat('spark-2', idleFacts());
    // a reservation whose GitHub meta holds credentials, and its lease's evidence holds raw logs
    const r = await c.ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/butter',
        pr: 9,
        headSha: 'a'.repeat(40),
        suite: 'smoke',
        requester: 'github:maintainer',
        meta: { installationToken: secrets.ghToken, env: secrets.envValue, cmd: secrets.command },
      },
      'github',
    );
    await until(
      'granted',
      async () => (await c.ledger.getReservation(undefined, r.id))?.status === 'allocated',
    );
    const lease = (await c.ledger.leasesOf(undefined, r.id))[0]!;
    expect(lease.fencingToken).toBe(Number(secrets.fencing));
    await c.ledger.write(async (tx, now) => {
      await tx
        .update(t.leases)
        .set({
          evidenceJson: JSON.stringify({ lastLines: [secrets.rawLog, secrets.envValue, secrets.modelPath] }),
          jobTokenHash: 'f'.repeat(64),
        })
        .where(eq(t.leases.id, lease.id));
      await tx
        .update(t.reservations)
        .set({ receiptJson: JSON.stringify({ log: secrets.rawLog, cache: secrets.modelPath }) })
        .where(eq(t.reservations.id, r.id));
      await tx.insert(t.jitHandoffs).values({
        runnerName: `spark-spark-2-${r.id}-a0`,
        leaseId: lease.id,
        reservationId: r.id,
        hostId: 'spark-2',
        jitConfig: secrets.jit,
        createdAt: now,
      });
    });
    // a failed Deckard restore whose detail quotes paths, addresses and a user
    await c.ledger.beginRelease(r.id, 'failed', `runner exited 1 on ${secrets.fqdn}`, 'agent:spark-2');
    await agentCleaned(c.ledger, r.id);
    await c.ledger.write(async (tx, now) => {
      const host = (await c.ledger.getHost(tx, 'spark-1'))!;
      await c.ledger.setHostPhase(tx, now, host, 'allocated', 'test: lent', 'test');
      await c.ledger.setHostPhase(tx, now, host, 'cleaning', 'test: cleaned', 'test');
      await c.ledger.setHostPhase(tx, now, host, 'restoring', 'test: restoring', 'test');
    });
    for (let i = 0; i < 4; i++) {
      await c.ledger.recordRestore(
        'spark-1',
        false,
        `deckard health failed at http://${secrets.ip}:8000/health\n${secrets.rawLog}\nmodel ${secrets.modelPath} user ${secrets.user}@${secrets.fqdn} ${secrets.envValue}`,
        'agent:spark-1',
      );
    }
    expect((await c.ledger.getHost(undefined, 'spark-1'))?.phase).toBe('quarantined');
    const agent = await createAgentToken(c.ledger, 'spark-2', 'test');
    const dev = await call(tokens.dev, 'POST', '/api/v1/reservations', { ttlS: 3600 });

    const texts: Record<string, string> = {};
    for (const path of ['/', '/dashboard/live', '/api/v1/fleet', '/api/v1/queue', '/metrics']) {
      const res = await fetch(`${c.url}${path}`);
      expect(res.status, path).toBe(200);
      texts[path] = await res.text();
    }
    for (const path of [
      '/api/v1/reservations?status=all',
      `/api/v1/reservations/${r.id}`,
      `/api/v1/reservations/${r.id}/history`,
      `/api/v1/reservations/${dev.body.reservation.id}`,
    ]) {
      const res = await call(tokens.ops, 'GET', path);
      expect(res.status, path).toBe(200);
      texts[path] = res.text;
    }
    const page = await browser!.newPage();
    try {
      await page.goto(c.url);
      await page.locator('[data-host="spark-1"][data-state="quarantined"]').waitFor();
      texts['chromium DOM'] = await page.content();
      texts['chromium text'] = (await page.locator('body').textContent()) ?? '';
    } finally {
      await page.close();
    }
    const forbidden = [
      ...Object.values(secrets),
      'SECRET',
      '/srv/models',
      tokens.dev,
      tokens.ops,
      tokens.em,
      agent.token,
      'f'.repeat(64),
    ];
    for (const [where, body] of Object.entries(texts)) {
      for (const s of forbidden) expect(body.includes(s), `"${s}" leaked through ${where}`).toBe(false);
    }
    // the facts that matter still show, in words
    expect(texts['/api/v1/fleet']).toContain('quarantined');
    expect(texts['chromium text']).toMatch(/quarantined: restore failed; operator must clear/);
    expect(texts[`/api/v1/reservations/${r.id}/history`]).toMatch(/\[address\]/);
  });

  it('with every host offline says why nothing starts and where to begin, and estimates nothing', async () => {
    // hosts configured but no agent ever heartbeated or was adopted: nothing can start
    ctl = await startApiController();
    const page = await browser!.newPage();
    try {
      await page.goto(ctl.c.url);
      const blocker = page.locator('#start-blocker');
      await blocker.waitFor();
      const text = (await blocker.textContent()) ?? '';
      expect(text).toMatch(
        /^Nothing is waiting\. No host can start work: every host is offline or not adopted\./,
      );
      expect(text).toMatch(/Install the relay agent.*sparkctl host adopt/s);
      expect(await page.locator('body').textContent()).not.toMatch(/New work starts as soon as it arrives/);

      // a request arrives anyway: it queues, and its estimate says why it cannot start. A
      // development request needs a host known to run dstack (ADR 0176), so the agents were heard
      // from once, an hour ago: still offline, still not adopted
      await heardAnHourAgo(ctl.c.ledger);
      const added = await ctl.call(ctl.tokens.dev, 'POST', '/api/v1/reservations', {});
      const row = page.locator(`#queue tr[data-reservation="${added.body.reservation.id}"]`);
      await row.waitFor({ timeout: 4_000 });
      expect(await row.locator('td.starts').textContent()).toBe(
        'no host is online: install or adopt an agent',
      );
      expect(await page.locator('#start-blocker').textContent()).toMatch(/^No host can start work/);
      await page.screenshot({ path: join(ARTIFACTS, 'dashboard-offline.png'), fullPage: true });
    } finally {
      await page.close();
    }
  });

  it('shows a development lease end with its zone and holder class, a targeted request and its ETA', async () => {
    ctl = await startApiController();
    const { c, call, tokens } = ctl;
    await bringOnline(c.ledger);
    const held = (await call(tokens.dev, 'POST', '/api/v1/reservations', { host: 'spark-2', ttlS: 7200 }))
      .body.reservation.id as string;
    await until(
      'granted',
      async () => (await c.ledger.getReservation(undefined, held))?.status === 'allocated',
    );
    await agentPrepared(c.ledger, held);
    const next = (await call(tokens.dev2, 'POST', '/api/v1/reservations', { host: 'spark-2' })).body
      .reservation.id as string;
    await c.loop.runNow();
    const lease = (await c.ledger.leasesOf(undefined, held))[0]!;
    const endsAt = new Date(lease.expiresAt).toISOString();
    const page = await browser!.newPage();
    try {
      await page.goto(c.url);
      const card = page.locator('[data-host="spark-2"] dd.lease');
      await card.waitFor();
      // "until 15:30 UTC · in 1h 59m", held by an API token (its class, never its name)
      expect(await card.textContent()).toMatch(
        new RegExp(`^until ${endsAt.slice(11, 16)} UTC · in (1h 5\\dm|2h 0m)held by api$`),
      );
      expect(await card.locator('time').getAttribute('datetime')).toBe(endsAt);
      const active = page.locator(`#active tr[data-reservation="${held}"]`);
      expect(await active.textContent()).toMatch(new RegExp(`held by api.*${endsAt.slice(11, 16)} UTC`, 's'));
      const queued = page.locator(`#queue tr[data-reservation="${next}"]`);
      expect(await queued.textContent()).toMatch(/development.*wants spark-2/s);
      // the queued request waits for the development lease: an estimate no later than its end
      const eta = (await queued.locator('td.starts').textContent()) ?? '';
      // no development history yet: the long end of the range is the lease's end
      expect(eta).toMatch(/^in ~[\d.]+( min| h)?(–[\d.]+)? (min|h)\d\d:\d\d UTC – \d\d:\d\d$/);
      expect(eta.endsWith(endsAt.slice(11, 16))).toBe(true);
      expect(await page.locator('#history td.t').first().textContent()).toMatch(/^\d\d:\d\d:\d\d UTC$/);
      await page.screenshot({ path: join(ARTIFACTS, 'dashboard-lease.png'), fullPage: true });
    } finally {
      await page.close();
    }
  });

  it('shows an aliased repository by its alias alone: no PR number, commit or link that points back at it', async () => {
    ctl = await startApiController({
      config: { repoAliases: { 'acme/secret-engine': 'project A' }, budgets: { maxGpusPerPr: 1 } },
    });
    const { c } = ctl;
    await bringOnline(c.ledger);
    const sha = {
      running: 'c0ffee15a1e5b0a7d2c3e4f5061728394a5b6c7d',
      queued: 'badc0de5a1e5b0a7d2c3e4f5061728394a5b6c7e',
    };
    const request = (headSha: string) =>
      c.ledger.createReservation(
        {
          kind: 'manual',
          topology: 'single',
          repo: 'acme/secret-engine',
          pr: 4711,
          headSha,
          suite: 'smoke',
          requester: 'github:maintainer',
        },
        'github',
      );
    const running = await request(sha.running);
    await until(
      'granted',
      async () => (await c.ledger.getReservation(undefined, running.id))?.status === 'allocated',
    );
    await agentPrepared(c.ledger, running.id);
    await c.ledger.advanceReservation(running.id, 'running', 'runner started', 'agent:spark-2');
    const queued = await request(sha.queued);
    await c.loop.runNow();
    const page = await browser!.newPage();
    try {
      await page.goto(c.url);
      const activeRow = page.locator(`#active tr[data-reservation="${running.id}"]`);
      const queuedRow = page.locator(`#queue tr[data-reservation="${queued.id}"]`);
      await activeRow.waitFor();
      await queuedRow.waitFor();
      expect(await activeRow.textContent()).toContain('project A');
      expect(await queuedRow.textContent()).toMatch(/project A.*budget: project A holds 1 of 1 GPUs per PR/s);
      // nothing on the page links to GitHub for it, and the page's text and markup name none of it
      expect(await page.locator('a[href*="github.com"]').count()).toBe(0);
      const dom = await page.content();
      const text = (await page.locator('body').textContent()) ?? '';
      for (const s of ['4711', sha.running.slice(0, 7), sha.queued.slice(0, 7), 'secret-engine'])
        for (const [where, body] of [
          ['DOM', dom],
          ['text', text],
        ] as const)
          expect(body.includes(s), `"${s}" in the page ${where}`).toBe(false);
      await page.screenshot({ path: join(ARTIFACTS, 'dashboard-alias.png'), fullPage: true });
    } finally {
      await page.close();
    }
  });
});
