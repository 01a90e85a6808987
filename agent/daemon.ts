import { existsSync, mkdirSync, readFileSync, rmSync, statfsSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import type { HostFacts } from '../core/model.ts';
import type { DesiredState, LeaseRef, Report } from '../core/protocol/agent.ts';
import { ControllerClient, ControllerRejected, ControllerUnreachable } from './client.ts';
import type { AgentConfig } from './config.ts';
import { describeFailure, runCommand } from './exec.ts';
import { describeProcesses, queryGpu } from './gpu.ts';
import type { AgentLogger } from './log.ts';
import {
  isRunnerAlive,
  processStartTicks,
  readExitCode,
  redactLines,
  startRunner,
  stopRunner,
  tailLines,
} from './runner.ts';
import { probeHealth, waitHealthy } from './service.ts';
import { type AgentState, type LeaseState, loadState, type RunnerState, saveState } from './state-file.ts';

type RunDesired = Extract<DesiredState, { state: 'run' }>;
type RestoreDesired = Extract<DesiredState, { state: 'restore' }>;
type HoldDesired = Extract<DesiredState, { state: 'hold' }>;

/** Full-jitter exponential backoff (AWS architecture blog): uniform in [0, min(cap, base·2^n)]. */
export function backoffMs(failures: number, capMs: number, baseMs = 500): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(failures, 16));
  return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
}

/**
 * The relay agent (issue 4). Two loops: heartbeats with host facts, and poll → reconcile. The
 * reconcile is level-triggered: it compares the controller's desired state with the local state
 * file and takes the next step, so repeating it after a crash is safe. It acts only on a desired
 * state it just received: with the controller unreachable it starts nothing.
 */
export class Agent {
  private state: AgentState;
  private version: string | null = null;
  private heartbeatS = 10;
  private stopped = false;
  private pollAbort: AbortController | null = null;
  private sleepers = new Set<() => void>();
  /** The current runner's secrets, in memory only, to redact them from evidence. */
  private secrets: string[] = [];
  private interconnect: { ok: boolean; at: number } | null = null;
  private readonly client: ControllerClient;

  constructor(
    private readonly cfg: AgentConfig,
    token: string,
    private readonly log: AgentLogger,
  ) {
    this.state = loadState(cfg.stateFile);
    this.client = new ControllerClient(cfg.controllerUrl, token, cfg.timeouts.requestS * 1000);
    mkdirSync(cfg.workRoot, { recursive: true });
  }

  /** Runs until {@link stop}. */
  async run(): Promise<void> {
    this.log.info('agent started', {
      hostId: this.cfg.hostId,
      maxFencingToken: this.state.maxFencingToken,
      resumingLease: this.state.lease?.leaseId ?? null,
    });
    await Promise.all([this.heartbeatLoop(), this.pollLoop()]);
  }

  stop(): void {
    this.stopped = true;
    this.pollAbort?.abort();
    for (const wake of this.sleepers) wake();
  }

  /** Ends the current long-poll early (a local event, e.g. the runner exited). */
  private wake(): void {
    this.pollAbort?.abort();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.sleepers.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }

  private save(): void {
    saveState(this.cfg.stateFile, this.state);
  }

  // ------------------------------------------------------------ loops

  private async heartbeatLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        const t0 = Date.now();
        const facts = await this.collectFacts();
        const t1 = Date.now();
        // the controller sets the period: the first sleep must already use it, or a host
        // whose default period exceeds the controller's offline limit would flap offline
        this.heartbeatS = (await this.client.heartbeat(facts)).heartbeatIntervalS;
        this.log.debug('heartbeat sent', { factsMs: t1 - t0, sendMs: Date.now() - t1 });
        failures = 0;
      } catch (e) {
        failures++;
        this.log.warn('heartbeat failed', { error: (e as Error).message, failures });
      }
      const base = this.heartbeatS * 1000;
      await this.sleep(
        failures ? Math.max(base, backoffMs(failures, this.cfg.timeouts.backoffMaxS * 1000)) : base,
      );
    }
  }

  private async pollLoop(): Promise<void> {
    let failures = 0;
    let recheckMs: number | null = null;
    while (!this.stopped) {
      const ac = new AbortController();
      this.pollAbort = ac;
      const maxWaitMs = Math.min(this.cfg.timeouts.longPollS * 1000, recheckMs ?? Number.POSITIVE_INFINITY);
      let desired: DesiredState;
      try {
        const res = await this.client.poll({ since: this.version, maxWaitMs }, ac.signal);
        failures = 0;
        this.heartbeatS = res.heartbeatIntervalS;
        this.version = res.version;
        desired = res.desired;
      } catch (e) {
        if (this.stopped) break;
        if (ac.signal.aborted) {
          // woken by a local event: ask again at once
          this.version = null;
          continue;
        }
        failures++;
        const wait = Math.max(
          (e as ControllerUnreachable).retryAfterMs ?? 0,
          backoffMs(failures, this.cfg.timeouts.backoffMaxS * 1000),
        );
        if (e instanceof ControllerRejected) {
          this.log.error('controller refused the poll', { status: e.status, code: e.code, error: e.message });
        } else {
          this.log.warn('controller unreachable; starting nothing new', {
            error: (e as Error).message,
            failures,
            retryInMs: wait,
          });
        }
        await this.sleep(wait);
        continue;
      } finally {
        this.pollAbort = null;
      }
      recheckMs = await this.safeReconcile(desired);
    }
  }

  private async safeReconcile(d: DesiredState): Promise<number | null> {
    try {
      return await this.reconcile(d);
    } catch (e) {
      if (e instanceof ControllerRejected && e.code === 'stale_fencing_token') {
        // the controller no longer knows this lease; the next desired state tells what is current
        this.log.warn('report refused: fencing token no longer current', { error: e.message });
        this.version = null;
        return 0;
      }
      if (e instanceof ControllerUnreachable) {
        this.log.warn('report not delivered; will repeat it', { error: e.message });
        this.version = null;
        return 1000;
      }
      this.log.error('step failed; will retry', { state: d.state, error: (e as Error).message });
      this.version = null;
      return 2000;
    }
  }

  // ------------------------------------------------------------ reconcile

  private async reconcile(d: DesiredState): Promise<number | null> {
    const lease = 'lease' in d ? d.lease : undefined;
    const token = lease ? lease.fencingToken : d.state === 'restore' ? d.fencingToken : null;
    if (token != null) {
      if (token < this.state.maxFencingToken) {
        this.log.warn('refusing a command with a stale fencing token', {
          state: d.state,
          fencingToken: token,
          highestSeen: this.state.maxFencingToken,
        });
        return null;
      }
      if (token > this.state.maxFencingToken) {
        this.state.maxFencingToken = token;
        this.save();
      }
    }
    const local = this.state.lease;
    if (local && local.fencingToken !== lease?.fencingToken && d.state !== 'hold') {
      // the controller shows no trace of our lease any more: undo only what we did ourselves
      await this.dropLocalLease(local, `lease ${local.leaseId} is no longer current (now: ${d.state})`);
    }
    switch (d.state) {
      case 'idle':
      case 'serve':
        return null;
      case 'prepare':
        return this.prepare(d.lease);
      case 'wait':
        this.adopt(d.lease);
        return null;
      case 'run':
        return this.runStep(d);
      case 'develop':
        return this.develop(d.lease);
      case 'clean':
        return this.clean(d.lease);
      case 'restore':
        return this.restore(d);
      case 'hold':
        return this.hold(d);
    }
  }

  private async report(r: Report): Promise<void> {
    const res = await this.client.report(r);
    this.log.info('reported', { type: r.type, result: res.result });
  }

  /** The local record of `lease`, created on first sight. */
  private adopt(lease: LeaseRef): LeaseState {
    const cur = this.state.lease;
    if (cur && cur.fencingToken === lease.fencingToken) return cur;
    const l: LeaseState = {
      leaseId: lease.leaseId,
      reservationId: lease.reservationId,
      fencingToken: lease.fencingToken,
      kind: lease.kind,
      topology: lease.topology,
      lend: lease.lend,
      workDir: join(this.cfg.workRoot, `${lease.reservationId}-${this.cfg.hostId}-t${lease.fencingToken}`),
      lendStep: 'none',
      phase: 'preparing',
      failure: null,
      runner: null,
      activeReported: false,
      remainReported: false,
    };
    this.state.lease = l;
    this.save();
    return l;
  }

  private removeWorkDir(l: LeaseState): void {
    const rel = relative(this.cfg.workRoot, l.workDir);
    // never remove anything outside the work volume, whatever the state file says
    if (!rel || rel.startsWith('..') || resolve(this.cfg.workRoot, rel) !== l.workDir) {
      throw new Error(`refusing to remove ${l.workDir}: not under ${this.cfg.workRoot}`);
    }
    rmSync(l.workDir, { recursive: true, force: true });
  }

  private async dropLocalLease(l: LeaseState, why: string): Promise<void> {
    this.log.info('cleaning up local work of an ended lease', { leaseId: l.leaseId, why });
    if (l.runner) await this.stopOwnRunner(l, l.runner);
    this.removeWorkDir(l);
    if (l.runner) rmSync(l.runner.runDir, { recursive: true, force: true });
    this.state.lease = null;
    this.secrets = [];
    this.save();
  }

  // ------------------------------------------------------------ prepare

  private async fail(l: LeaseState, reason: string): Promise<null> {
    l.phase = 'prepare_failed';
    l.failure = reason;
    if (l.lend && l.lendStep !== 'lent') l.lendStep = 'failed';
    this.save();
    this.log.warn('preparation failed', { leaseId: l.leaseId, reason });
    await this.report({ type: 'prepare_failed', fencingToken: l.fencingToken, reason });
    return null;
  }

  private async prepare(lease: LeaseRef): Promise<number | null> {
    const l = this.adopt(lease);
    if (l.phase === 'prepare_failed') {
      await this.report({
        type: 'prepare_failed',
        fencingToken: l.fencingToken,
        reason: l.failure ?? 'failed',
      });
      return null;
    }
    if (l.phase !== 'prepared') {
      const svc = this.cfg.service;
      if (lease.lend) {
        if (!svc)
          return this.fail(
            l,
            `lease lends the home service but the agent of ${this.cfg.hostId} has none configured`,
          );
        const timeoutMs = svc.commandTimeoutS * 1000;
        if (l.lendStep === 'none' || l.lendStep === 'draining') {
          l.lendStep = 'draining';
          this.save();
          this.log.info('draining the home service', { service: svc.name, leaseId: l.leaseId });
          const r = await runCommand(svc.drain, { timeoutMs });
          if (r.code !== 0) return this.fail(l, `${svc.name} drain failed: ${describeFailure(svc.drain, r)}`);
        }
        if (l.lendStep === 'draining' || l.lendStep === 'stopping') {
          l.lendStep = 'stopping';
          this.save();
          this.log.info('stopping the home service', { service: svc.name, leaseId: l.leaseId });
          const r = await runCommand(svc.stop, { timeoutMs });
          if (r.code !== 0) return this.fail(l, `${svc.name} stop failed: ${describeFailure(svc.stop, r)}`);
          l.lendStep = 'verifying';
          this.save();
        }
        if (l.lendStep === 'verifying') {
          // a stopped service must also be gone from the GPU: a paused container is not a release
          const deadline = Date.now() + svc.releaseVerifyTimeoutS * 1000;
          for (;;) {
            const q = await queryGpu(this.cfg.nvidiaSmi, this.cfg.timeouts.gpuQueryS * 1000);
            if (!q.ok)
              return this.fail(l, `GPU could not be verified after stopping ${svc.name}: ${q.error}`);
            if (q.processes.length === 0) break;
            if (Date.now() >= deadline || this.stopped) {
              return this.fail(
                l,
                `GPU still busy after stopping ${svc.name}: ${q.processes.length} process(es) (${describeProcesses(q.processes)}); not lent`,
              );
            }
            await this.sleep(250);
          }
          l.lendStep = 'lent';
          this.save();
        }
      } else {
        const q = await queryGpu(this.cfg.nvidiaSmi, this.cfg.timeouts.gpuQueryS * 1000);
        if (!q.ok) return this.fail(l, `GPU state unknown: ${q.error}`);
        if (q.processes.length) {
          return this.fail(
            l,
            `GPU busy: ${q.processes.length} process(es) outside the lease (${describeProcesses(q.processes)})`,
          );
        }
      }
      if (lease.topology === 'pair' && this.cfg.interconnectCheck) {
        const r = await runCommand(this.cfg.interconnectCheck, { timeoutMs: 60_000 });
        this.interconnect = { ok: r.code === 0, at: Date.now() };
        if (r.code !== 0)
          return this.fail(l, `interconnect check failed: ${describeFailure(this.cfg.interconnectCheck, r)}`);
      }
      this.removeWorkDir(l);
      mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
      l.phase = 'prepared';
      this.save();
    }
    await this.report({
      type: 'prepared',
      fencingToken: l.fencingToken,
      serviceLent: l.lend && l.lendStep === 'lent',
      evidence: { gpuProcesses: 0, interconnectOk: this.interconnect?.ok ?? null },
    });
    return null;
  }

  // ------------------------------------------------------------ run

  private resolvePid(r: RunnerState): void {
    if (r.pid != null) return;
    const f = join(r.runDir, 'pid');
    if (!existsSync(f)) return;
    const pid = Number(readFileSync(f, 'utf8').trim());
    if (Number.isInteger(pid) && pid > 0) {
      r.pid = pid;
      r.startTicks = processStartTicks(pid);
      this.save();
    }
  }

  private runnerAlive(r: RunnerState): boolean {
    this.resolvePid(r);
    return r.pid != null && isRunnerAlive(r.pid, r.startTicks);
  }

  private async stopOwnRunner(l: LeaseState, r: RunnerState): Promise<void> {
    if (!this.runnerAlive(r)) return;
    r.stoppedByAgent = true;
    this.save();
    this.log.info('stopping the runner this agent started', { leaseId: l.leaseId, runnerName: r.runnerName });
    await stopRunner(r.pid!, r.startTicks, this.cfg.runner.stopGraceS * 1000);
  }

  private async runStep(d: RunDesired): Promise<number | null> {
    const l = this.adopt(d.lease);
    const cur = l.runner;
    if (cur && cur.runnerName !== d.runnerName) {
      // the controller replaced the runner (not picked up in time): ours goes, the new one starts
      this.log.info('runner replaced by the controller', { old: cur.runnerName, new: d.runnerName });
      await this.stopOwnRunner(l, cur);
      rmSync(cur.runDir, { recursive: true, force: true });
      l.runner = null;
      this.save();
    }
    if (!l.runner) {
      if (!d.jitConfig) {
        this.log.warn(
          'runner config was handed over but no runner of it runs here; waiting for a replacement',
          {
            runnerName: d.runnerName,
          },
        );
        return null;
      }
      this.startRunnerFor(l, d);
    }
    const r = l.runner!;
    if (this.runnerAlive(r)) {
      if (!r.startReported) {
        await this.report({ type: 'runner_started', fencingToken: l.fencingToken, runnerName: r.runnerName });
        r.startReported = true;
        this.save();
      }
      // a runner adopted after a restart is not our child: look at it every second
      return 1000;
    }
    await this.reportExit(l, r);
    return null;
  }

  private startRunnerFor(l: LeaseState, d: RunDesired): void {
    const runDir = join(dirname(this.cfg.stateFile), 'runs', d.runnerName);
    rmSync(runDir, { recursive: true, force: true });
    if (!existsSync(l.workDir)) mkdirSync(l.workDir, { recursive: true, mode: 0o700 });
    // written before the spawn: a crash right after still finds the run dir (and its pid file)
    l.runner = {
      runnerName: d.runnerName,
      runDir,
      pid: null,
      startTicks: null,
      startedAt: Date.now(),
      startReported: false,
      stoppedByAgent: false,
      exitReported: false,
    };
    l.phase = 'running';
    this.save();
    const env: NodeJS.ProcessEnv = {
      // the job runs PR code: it gets a minimal environment, never the agent's own
      ...baseRunnerEnv(process.env, this.cfg.runner.passEnv),
      ...(this.cfg.service
        ? { SPARK_HOME_SERVICE: this.cfg.service.name, SPARK_SERVICE_HEALTH_URL: this.cfg.service.healthUrl }
        : {}),
      ...(this.cfg.interconnectCheck
        ? { SPARK_INTERCONNECT_CHECK: shellJoin(this.cfg.interconnectCheck) }
        : {}),
      ACTIONS_RUNNER_INPUT_JITCONFIG: d.jitConfig,
      SPARK_CONTROLLER_URL: this.cfg.controllerUrl,
      SPARK_RESERVATION_ID: l.reservationId,
      SPARK_HOST_ID: this.cfg.hostId,
      SPARK_FENCING_TOKEN: String(l.fencingToken),
      SPARK_LEASE_TOKEN: d.jobToken ?? '',
      SPARK_TOPOLOGY: l.topology,
      SPARK_WORK_DIR: l.workDir,
      SPARK_MODEL_CACHE: this.cfg.modelCacheDir,
    };
    const started = startRunner({ runDir, command: this.cfg.runner.command, cwd: l.workDir, env });
    l.runner.pid = started.pid;
    l.runner.startTicks = started.startTicks;
    this.save();
    this.secrets = [d.jitConfig!, d.jobToken ?? ''];
    this.log.info('runner started', { leaseId: l.leaseId, runnerName: d.runnerName, pid: started.pid });
    void started.exited.then(() => this.wake());
  }

  private async reportExit(l: LeaseState, r: RunnerState): Promise<void> {
    if (r.exitReported) return;
    if (r.exitCode === undefined) {
      r.exitCode = readExitCode(r.runDir);
      this.save();
    }
    const lastLines = redactLines(tailLines(r.runDir, 30), this.secrets);
    await this.report({
      type: 'runner_exited',
      fencingToken: l.fencingToken,
      runnerName: r.runnerName,
      exitCode: r.exitCode ?? null,
      lastLines,
    });
    r.exitReported = true;
    this.save();
  }

  // ------------------------------------------------------------ develop, clean, hold

  private async develop(lease: LeaseRef): Promise<number | null> {
    const l = this.adopt(lease);
    if (!l.activeReported) {
      await this.report({ type: 'lease_active', fencingToken: l.fencingToken });
      l.activeReported = true;
      this.save();
    }
    // the controller's own expiry pass normally acts first (release, or release-required from the
    // heartbeat facts); this report is the fallback if it has not within two heartbeats
    const graceMs = 2 * this.heartbeatS * 1000;
    if (lease.expiresInMs > -graceMs) return lease.expiresInMs + graceMs + 250;
    // expired: report the processes that outlived it; kill nothing
    const q = await queryGpu(this.cfg.nvidiaSmi, this.cfg.timeouts.gpuQueryS * 1000);
    if (q.ok && q.processes.length && !l.remainReported) {
      await this.report({ type: 'processes_remain', fencingToken: l.fencingToken, processes: q.processes });
      l.remainReported = true;
      this.save();
    }
    return this.heartbeatS * 1000;
  }

  /** GPU processes that count against the release (the home service's own, if never lent, do not). */
  private remaining(l: LeaseState, processes: HostFacts['gpuProcesses']) {
    if (l.lend && l.lendStep !== 'lent') return [];
    return processes ?? [];
  }

  private async clean(lease: LeaseRef): Promise<number | null> {
    const l = this.adopt(lease);
    if (l.phase !== 'cleaning') {
      l.phase = 'cleaning';
      this.save();
    }
    const r = l.runner;
    if (r) {
      await this.stopOwnRunner(l, r);
      if (!r.exitReported) {
        try {
          await this.reportExit(l, r);
        } catch (e) {
          // evidence is best effort once the release has begun; cleanup goes on
          if (!(e instanceof ControllerRejected)) throw e;
          r.exitReported = true;
          this.save();
        }
      }
    }
    this.removeWorkDir(l);
    const q = await queryGpu(this.cfg.nvidiaSmi, this.cfg.timeouts.gpuQueryS * 1000);
    if (!q.ok) {
      this.log.warn('cannot confirm cleanup: GPU state unknown', { error: q.error });
      return 1000;
    }
    const left = this.remaining(l, q.processes);
    if (left.length) {
      if (!l.remainReported) {
        this.log.warn('processes remain after cleanup; nothing is killed', {
          processes: describeProcesses(left),
        });
        await this.report({ type: 'processes_remain', fencingToken: l.fencingToken, processes: left });
        l.remainReported = true;
        this.save();
      }
      return this.heartbeatS * 1000;
    }
    await this.report({ type: 'cleaned', fencingToken: l.fencingToken });
    if (r) rmSync(r.runDir, { recursive: true, force: true });
    this.state.lease = null;
    this.secrets = [];
    this.save();
    return null;
  }

  private async hold(d: HoldDesired): Promise<number | null> {
    if (!d.lease) return null;
    const l = this.adopt(d.lease);
    if (l.runner && this.runnerAlive(l.runner)) return this.heartbeatS * 1000;
    const q = await queryGpu(this.cfg.nvidiaSmi, this.cfg.timeouts.gpuQueryS * 1000);
    if (!q.ok || this.remaining(l, q.processes).length) return this.heartbeatS * 1000;
    // the processes that outlived the lease are gone on their own: confirm, having killed nothing
    return this.clean(d.lease);
  }

  // ------------------------------------------------------------ restore

  private async restore(d: RestoreDesired): Promise<number | null> {
    const svc = this.cfg.service;
    if (d.waitMs > 0) return d.waitMs;
    if (!svc) {
      await this.report({
        type: 'restored',
        fencingToken: d.fencingToken,
        ok: false,
        detail: `the agent of ${this.cfg.hostId} has no home service configured`,
      });
      return null;
    }
    this.state.restore = { fencingToken: d.fencingToken, attempt: d.attempt, startedAt: Date.now() };
    this.save();
    this.log.info('restoring the home service', { service: svc.name, attempt: d.attempt });
    const start = await runCommand(svc.start, { timeoutMs: svc.commandTimeoutS * 1000 });
    let ok = false;
    let detail: string;
    if (start.code !== 0) {
      detail = `${svc.name} start failed: ${describeFailure(svc.start, start)}`;
    } else {
      const h = await waitHealthy(
        svc.healthUrl,
        d.healthTimeoutS * 1000,
        svc.healthPollMs,
        () => this.stopped,
      );
      ok = h.ok;
      detail = h.ok
        ? `${svc.name} model-ready: ${h.detail}`
        : `${svc.name} model-ready check did not pass within ${d.healthTimeoutS} s: ${h.detail}`;
    }
    if (this.stopped) return null;
    await this.report({ type: 'restored', fencingToken: d.fencingToken, ok, detail });
    this.state.restore = null;
    this.save();
    return null;
  }

  // ------------------------------------------------------------ facts

  private async serviceState(): Promise<HostFacts['serviceState']> {
    const svc = this.cfg.service;
    if (!svc) return 'none';
    if (this.state.restore) return 'starting';
    const l = this.state.lease;
    if (l?.lend) {
      if (l.lendStep === 'draining') return 'draining';
      if (l.lendStep === 'stopping' || l.lendStep === 'verifying' || l.lendStep === 'lent') return 'stopped';
    }
    const h = await probeHealth(svc.healthUrl, 2000);
    return h.ok ? 'serving' : h.status == null ? 'stopped' : 'failed';
  }

  private async interconnectOk(): Promise<boolean | null> {
    const check = this.cfg.interconnectCheck;
    if (!check) return null;
    if (!this.interconnect || Date.now() - this.interconnect.at > 30_000) {
      const r = await runCommand(check, { timeoutMs: 30_000 });
      this.interconnect = { ok: r.code === 0, at: Date.now() };
    }
    return this.interconnect.ok;
  }

  /** Host facts for a heartbeat: a GPU that cannot be read is `null` with the reason, never "idle". */
  async collectFacts(): Promise<HostFacts> {
    const q = await queryGpu(this.cfg.nvidiaSmi, this.cfg.timeouts.gpuQueryS * 1000);
    let freeDiskBytes: number | null = null;
    try {
      const s = statfsSync(this.cfg.workRoot);
      freeDiskBytes = s.bavail * s.bsize;
    } catch {
      freeDiskBytes = null;
    }
    const r = this.state.lease?.runner;
    return {
      gpuProcesses: q.ok ? q.processes : null,
      gpuError: q.ok ? null : q.error,
      freeDiskBytes,
      serviceState: await this.serviceState(),
      runnerState: r ? (this.runnerAlive(r) ? 'running' : 'exited') : 'none',
      interconnectOk: await this.interconnectOk(),
    };
  }
}

/** Variables a runner legitimately needs from the host; everything else of the agent's stays out. */
const RUNNER_ENV_KEEP = ['PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'TZ', 'TMPDIR'];

/** The part of the agent's environment a job may see: the basics, locale, and what the config passes. */
export function baseRunnerEnv(from: NodeJS.ProcessEnv, passEnv: readonly string[] = []): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(from)) {
    if (v !== undefined && (RUNNER_ENV_KEEP.includes(k) || k.startsWith('LC_') || passEnv.includes(k)))
      env[k] = v;
  }
  return env;
}

/** An argv as one POSIX shell command line (the preflight runs it with `/bin/sh -c`). */
export function shellJoin(argv: readonly string[]): string {
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}
