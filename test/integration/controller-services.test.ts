import { afterEach, describe, expect, it } from 'vitest';
import { type Controller, createController } from '../../functions/controller.ts';
import { githubService } from '../../functions/github/service.ts';
import { silentLogger } from '../../functions/log.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { adoptAll, makeTestLedger, type TestLedger } from '../../scripts/sim/ledger.ts';

/**
 * docs/adr/0215-controller-owns-its-services.md: `createController()` builds every service once;
 * two controllers in one process, even on one ledger instance, share none of them.
 */
describe('controller services', () => {
  let tl: TestLedger | null = null;
  const controllers: Controller[] = [];
  afterEach(async () => {
    for (const c of controllers.splice(0)) await c.loop.stop();
    tl?.close();
    tl = null;
  });

  const build = async (ledger: TestLedger['ledger']) => {
    const c = await createController({
      ledger,
      settings: settingsFromEnv({ SPARK_WEBHOOK_SECRET: 's'.repeat(32) }, null),
      log: silentLogger,
      fetch,
      runtime: 'node',
      admissionIntervalMs: null,
    });
    controllers.push(c);
    return c;
  };

  it('gives each controller its own gate, views, caches, metrics and GitHub service', async () => {
    tl = await makeTestLedger({ config: { hosts: [{ id: 'spark-2' }] } });
    await adoptAll(tl.ledger);
    const a = await build(tl.ledger);
    const b = await build(tl.ledger);
    const sa = a.ctx.services;
    const sb = b.ctx.services;
    for (const k of ['gate', 'views', 'publicViews', 'metrics', 'github'] as const)
      expect(sa[k]).not.toBe(sb[k]);
    for (const k of ['outbox', 'inbox', 'redelivery', 'client'] as const)
      expect(sa.github[k]).not.toBe(sb.github[k]);
    // the accessor reads the context; the service holds the controller's own gate and views
    expect(githubService(a.ctx)).toBe(sa.github);
    expect(sa.github.gate).toBe(sa.gate);
    expect(sa.github.views).toBe(sa.views);

    // a request in flight on one controller holds back only that controller's background work
    sa.gate.enter();
    expect(sa.gate.inFlight).toBe(1);
    expect(sb.gate.inFlight).toBe(0);
    sa.gate.leave();

    // each memo computes its own views of the same ledger, and reuses them
    const va = await sa.views.get();
    expect(await sa.views.get()).toBe(va);
    const vb = await sb.views.get();
    expect(vb).not.toBe(va);
    const hosts = (v: typeof va) => v.fleet.hosts.map((h) => [h.id, h.state]);
    expect(hosts(vb)).toEqual(hosts(va));
  });

  it("serves each controller's own process metrics on /metrics", async () => {
    tl = await makeTestLedger();
    const a = await build(tl.ledger);
    const b = await build(tl.ledger);
    // what a's GitHub client reports after a failed call (metrics/github-api.ts)
    a.ctx.services.metrics.github.observe({ status: 502, headers: null });
    const scrape = async (c: Controller) => (await c.app.request('/metrics?scope=process')).text();
    expect(await scrape(a)).toContain('spark_github_api_errors_total{status="502"} 1');
    expect(await scrape(b)).not.toContain('status="502"');
    expect(await scrape(b)).toContain('spark_github_api_requests_total 0');
  });
});
