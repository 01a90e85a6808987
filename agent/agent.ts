import { mkdirSync } from 'node:fs';
import type { DesiredState, Report } from '../core/protocol/agent.ts';
import { ControllerClient, ControllerRejected, ControllerUnreachable } from './client.ts';
import type { AgentConfig } from './config.ts';
import { createLeaseExecutor } from './executor/by-lease.ts';
import { createDstackExecutor } from './executor/dstack.ts';
import { createJitRunnerExecutor } from './executor/jit-runner.ts';
import { createSlurmExecutor } from './executor/slurm.ts';
import type { Executor } from './executor/types.ts';
import { collectFacts } from './facts.ts';
import { createHostPort, type HostPort } from './host/port.ts';
import type { AgentLogger } from './log.ts';
import { clampDelayMs, clampHeartbeatS } from './loops/backoff.ts';
import { heartbeatLoop } from './loops/heartbeat.ts';
import { pollLoop } from './loops/poll.ts';
import { reportServiceDown, ServiceWatch } from './loops/service-watch.ts';
import { reconcile } from './reconcile.ts';
import type { RunnerAccount } from './runner.ts';
import { loadState, saveState } from './state-file.ts';
import { runStep, type StepContext } from './steps/index.ts';

/** Steps one desired state may take before the agent looks again (a guard against a step loop). */
const MAX_STEPS = 32;

/**
 * The relay agent: two loops — heartbeats with host facts, and poll → converge — around
 * a pure decision function (`reconcile.ts`), one file per step (`steps/`), one executor seam
 * (`executor/`) and one host port (`host/port.ts`). It acts only on a desired state it has just
 * received: with the controller unreachable it starts nothing.
 */
export class Agent {
  private readonly ctx: StepContext;
  private readonly client: ControllerClient;
  private heartbeatS = 10;
  private isStopped = false;
  private pollAbort: AbortController | null = null;
  private readonly sleepers = new Set<() => void>();
  /** The home service's watch outside leases (ADR 0175); null without a home service. */
  private readonly watch: ServiceWatch | null;

  constructor(
    private readonly cfg: AgentConfig,
    token: string,
    private readonly log: AgentLogger,
    opts: {
      port?: HostPort;
      executor?: (ctx: StepContext) => Executor;
      /** The runner user, resolved and checked by the entry (`host/account.ts`); null: the agent's own. */
      account?: RunnerAccount | null;
    } = {},
  ) {
    this.client = new ControllerClient(cfg.controllerUrl, token, cfg.timeouts.requestS * 1000);
    this.watch = cfg.service ? new ServiceWatch(cfg.service.name, cfg.service.unhealthyAfterS * 1000) : null;
    const account = opts.account ?? null;
    // with a runner user the work root is the operator's to create (owned by that user, checked at start)
    if (!account) mkdirSync(cfg.workRoot, { recursive: true });
    const state = loadState(cfg.stateFile);
    const ctx: StepContext = {
      cfg,
      port: opts.port ?? createHostPort(cfg),
      executor: null as unknown as Executor,
      log,
      state,
      save: () => saveState(cfg.stateFile, ctx.state),
      report: (r) => this.report(r),
      collectFacts: (gpu) => collectFacts(this.ctx, gpu),
      sleep: (ms) => this.sleep(ms),
      stopped: () => this.isStopped,
      heartbeatMs: () => this.heartbeatS * 1000,
      interconnect: null,
    };
    // the host's backend, or the one a lease's repository chooses
    ctx.executor =
      opts.executor?.(ctx) ??
      createLeaseExecutor(
        cfg.executor,
        (name) =>
          name === 'slurm'
            ? createSlurmExecutor({ cfg, log, account, save: ctx.save })
            : name === 'dstack'
              ? createDstackExecutor({ cfg, log, save: ctx.save })
              : createJitRunnerExecutor({
                  cfg,
                  log,
                  account,
                  save: ctx.save,
                  onExit: () => this.pollAbort?.abort(),
                }),
        (msg, fields) => log.warn(msg, fields),
      );
    this.ctx = ctx;
  }

  /** Runs until {@link stop}. */
  async run(): Promise<void> {
    this.log.info('agent started', {
      hostId: this.cfg.hostId,
      executor: this.ctx.executor.name,
      maxFencingToken: this.ctx.state.maxFencingToken,
      resumingLease: this.ctx.state.lease?.leaseId ?? null,
    });
    const backoffMaxMs = this.cfg.timeouts.backoffMaxS * 1000;
    const setPeriodS = (s: number) => {
      this.heartbeatS = clampHeartbeatS(s);
    };
    await Promise.all([
      heartbeatLoop({
        log: this.log,
        backoffMaxMs,
        collectFacts: () => this.heartbeatFacts(),
        send: (facts) => this.client.heartbeat(facts),
        periodMs: () => this.heartbeatS * 1000,
        setPeriodS,
        sleep: (ms) => this.sleep(ms),
        stopped: () => this.isStopped,
        stats: () => ({ newConnections: this.client.newConnections }),
      }),
      pollLoop({
        log: this.log,
        longPollMs: this.cfg.timeouts.longPollS * 1000,
        backoffMaxMs,
        poll: (req, signal) => this.client.poll(req, signal),
        converge: (d) => this.converge(d),
        setPeriodS,
        setAbort: (ac) => {
          this.pollAbort = ac;
        },
        sleep: (ms) => this.sleep(ms),
        stopped: () => this.isStopped,
      }),
    ]);
    this.client.close();
  }

  stop(): void {
    this.isStopped = true;
    this.pollAbort?.abort();
    for (const wake of this.sleepers) wake();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.sleepers.delete(done);
        resolve();
      };
      const t = setTimeout(done, clampDelayMs(ms));
      this.sleepers.add(done);
    });
  }

  /**
   * The heartbeat's facts; their look at the home service feeds its watch, which reports a service
   * that stopped by itself outside any lease before the heartbeat goes out (ADR 0175).
   */
  private async heartbeatFacts() {
    const watch = this.watch;
    const facts = await collectFacts(this.ctx, undefined, (probe) =>
      watch?.observe({ at: this.ctx.port.now(), probe }),
    );
    if (watch)
      await reportServiceDown({
        watch,
        now: this.ctx.port.now(),
        fencingToken: this.ctx.state.maxFencingToken,
        send: (r) => this.report(r),
        log: this.log,
      });
    return facts;
  }

  private async report(r: Report): Promise<void> {
    const res = await this.client.report(r);
    this.log.info('reported', { type: r.type, result: res.result });
  }

  /** Observe → reconcile → step, until the step says wait. Errors become a retry, never a crash. */
  private async converge(d: DesiredState): Promise<{ recheckMs: number | null; forget: boolean }> {
    const ctx = this.ctx;
    if (this.watch) this.watch.expectServing = d.state === 'serve';
    try {
      for (let i = 0; i < MAX_STEPS && !this.isStopped; i++) {
        const l = ctx.state.lease;
        const step = reconcile(d, {
          maxFencingToken: ctx.state.maxFencingToken,
          lease: l,
          workload: l ? await ctx.executor.observe(l) : { state: 'none' },
          hasService: this.cfg.service != null,
          heartbeatMs: this.heartbeatS * 1000,
          devEnvironments: ctx.executor.startDevelopment != null,
        });
        this.log.debug('step', { state: d.state, step: step.kind });
        const res = await runStep(ctx, step, d);
        if (res.next === 'wait') return { recheckMs: res.ms, forget: false };
      }
      if (!this.isStopped) this.log.error('no settled step after many; will look again', { state: d.state });
      return { recheckMs: 1000, forget: true };
    } catch (e) {
      if (e instanceof ControllerRejected && e.code === 'stale_fencing_token') {
        // the controller no longer knows this lease; the next desired state tells what is current
        this.log.warn('report refused: fencing token no longer current', { error: e.message });
        return { recheckMs: 0, forget: true };
      }
      if (e instanceof ControllerUnreachable) {
        this.log.warn('report not delivered; will repeat it', { error: e.message });
        return { recheckMs: 1000, forget: true };
      }
      this.log.error('step failed; will retry', { state: d.state, error: (e as Error).message });
      return { recheckMs: 2000, forget: true };
    }
  }
}
