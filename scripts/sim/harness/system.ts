import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createApiToken } from '../../../functions/auth/tokens.ts';
import { silentLogger } from '../../../functions/log.ts';
import { openNodeLedger } from '../../../functions/node-server.ts';
import { settingsFromEnv } from '../../../functions/settings.ts';
import { agentBundle } from '../doubles/fleet.ts';
import { sandboxedTestDir, setUpHostSandbox } from '../doubles/host-sandbox.ts';
import {
  FakeDeckard,
  FakeGpu,
  freePort,
  REPO_ROOT,
  simulatedAgentConfig,
  waitFor,
} from '../doubles/index.ts';
import { createTestUser, type TestUser } from '../doubles/runner-user.ts';
import { SECRET, SPARK_RUNNER_GROUP } from '../fake-github/harness.ts';
import { tempDir } from '../ledger.ts';
import { controllerEntry } from '../load/controllers.ts';
import { type Delivery, type GitHubSim, REPO, startGitHubSim } from './github-sim.ts';
import { type LedgerReader, openLedgerReader } from './ledger-reader.ts';
import { baseEnv, killGroup, type ProcessHandle, sweepProcessesUnder, track } from './processes.ts';
import {
  type AgentRoute,
  type SparkSystem,
  SYSTEM_ADMISSION_INTERVAL_MS,
  type SystemOptions,
} from './system-api.ts';

export * from './system-api.ts';

/**
 * The whole system on loopback, for `npm run demo` and the system tests: the real
 * controller (`functions/node.ts`; under vitest its bundle, ../load/controllers.ts `controllerEntry`) and
 * one relay agent per host (the shipped agent bundle) as
 * separate processes, the agent test doubles (fake nvidia-smi, fake Deckard), and, in this
 * process, GitHub (./github-sim.ts). The harness reads the ledger with plain SQL
 * (./ledger-reader.ts) and changes it only through the controller's HTTP API.
 */

export const SIM_RUNNER = join(REPO_ROOT, 'scripts', 'sim', 'harness', 'sim-runner.mjs');

/**
 * Thresholds a loaded machine cannot trip: the offline threshold is production's (40 s, core/config.ts)
 * and a Deckard restore waits 10 s for health (a fake Deckard is a fresh node process, slow to
 * start under load), so a story's outcome never depends on how promptly the scheduler runs a
 * heartbeat. A story about losing a host or a failing restore sets its own short timings
 * (system-faults, failures-pair-lost; docs/performance.md, "Test wall time").
 */
const DEFAULT_TIMINGS = {
  heartbeatIntervalS: 1,
  offlineAfterS: 40,
  ciLeaseTtlS: 60,
  runnerPickupTimeoutS: 600,
  restoreRetries: 1,
  restoreBackoffS: 1,
  restoreHealthTimeoutS: 10,
};

/** Starts everything; the fleet is adopted, agents heartbeat and {@link REPO} is enabled (pairs too). */
export async function startSystem(opts: SystemOptions = {}): Promise<SparkSystem> {
  const parts: Parts = { agents: {} };
  try {
    return await buildSystem(opts, parts);
  } catch (e) {
    // a failed or interrupted start leaves nothing running and no temp dir behind
    await teardown(parts);
    throw e;
  }
}

/** What a (possibly half-started) system has running, so it can always be torn down. */
interface Parts {
  dir?: string;
  cleanup?: () => void;
  github?: GitHubSim;
  controller?: ProcessHandle;
  agents: Record<string, ProcessHandle>;
  deckard?: FakeDeckard | null;
  reader?: LedgerReader;
  runnerUsers?: TestUser[];
}

async function teardown(p: Parts): Promise<void> {
  await Promise.all(Object.values(p.agents).map((a) => a.stop('SIGKILL')));
  // runners are detached from their agents on purpose (they survive an agent crash)
  for (const j of p.github?.jobs ?? []) killGroup(j.pid, j.seenAt);
  p.deckard?.kill();
  // whatever else runs from this system's dir: a runner not yet given a job, a Deckard a
  // restore was starting, a service command cut short when its agent was killed
  if (p.dir) await sweepProcessesUnder(p.dir);
  // what still runs as a runner user (a job's leftovers) ends with the user
  for (const u of p.runnerUsers ?? []) await u.remove();
  await p.controller?.stop('SIGTERM');
  p.reader?.close();
  try {
    // fails the caller on any violation of GitHub's description the fake recorded (server.ts)
    await p.github?.close();
  } finally {
    p.cleanup?.();
  }
}

/**
 * The first operate token, written into the ledger file as the controller's admin bootstrap
 * (`npm run admin -- token create`) does, before any token exists to ask the API with.
 */
async function bootstrapOperatorToken(
  ledgerUrl: string,
  config: unknown,
  configPath: string,
): Promise<{ operate: string; emergency: string }> {
  const settings = settingsFromEnv(
    { SPARK_LEDGER_URL: ledgerUrl },
    { text: JSON.stringify(config), source: configPath },
  );
  const ledger = await openNodeLedger(settings, { log: silentLogger });
  try {
    const operate = (
      await createApiToken(ledger, { name: 'demo-operator', scopes: ['operate'] }, 'demo bootstrap')
    ).token;
    const emergency = (
      await createApiToken(ledger, { name: 'demo-emergency', scopes: ['emergency'] }, 'demo bootstrap')
    ).token;
    return { operate, emergency };
  } finally {
    ledger.store.close();
  }
}

async function buildSystem(opts: SystemOptions, parts: Parts): Promise<SparkSystem> {
  const interrupted = () => {
    if (opts.signal?.aborted) throw new Error('interrupted while starting');
  };
  const withUsers = opts.runnerUsers ?? false;
  const { dir, cleanup } = withUsers ? sandboxedTestDir('system-') : tempDir('spark-system-');
  parts.dir = dir;
  parts.cleanup = cleanup;
  // shared by every job (any runner user; sticky, so no job removes another's files): the doubles'
  // markers, and GitHub's store of job logs
  const markerDir = join(dir, 'markers');
  const logStore = join(dir, 'job-logs');
  for (const d of [markerDir, logStore]) {
    mkdirSync(d);
    chmodSync(d, 0o1777);
  }
  const runnerUsers: Record<string, TestUser> = {};
  parts.runnerUsers = [];
  const hosts = opts.hosts ?? [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }];

  const controllerPort = await freePort();
  const controllerUrl = `http://127.0.0.1:${controllerPort}`;
  const github = await startGitHubSim({
    controllerUrl,
    ...(opts.plan ? { plan: opts.plan } : {}),
    ...(opts.onNote ? { onNote: opts.onNote } : {}),
  });
  parts.github = github;
  const { gh } = github;
  const baseConfig = {
    listen: { host: '127.0.0.1', port: controllerPort },
    hosts: hosts.map((h) => ({ id: h.id, homeService: h.homeService ?? null })),
    preferHosts: hosts.some((h) => h.id === 'spark-2') ? ['spark-2'] : [],
    timings: { ...DEFAULT_TIMINGS, ...(opts.timings ?? {}) },
    // organization runners in the group restricted to the enabled repositories (docs/github-app.md)
    github: { apiUrl: gh.url, runnerGroupId: SPARK_RUNNER_GROUP },
  };
  const config = opts.controllerConfig ? opts.controllerConfig(baseConfig, gh) : baseConfig;
  const configPath = join(dir, 'spark.config.json');
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  const ledgerUrl = `file:${join(dir, 'spark.db')}`;

  // ------------------------------------------------------------ controller process

  const controllerEnv = {
    ...baseEnv(),
    SPARK_CONFIG: configPath,
    SPARK_LEDGER_URL: ledgerUrl,
    SPARK_WEBHOOK_SECRET: SECRET,
    SPARK_GITHUB_APP_ID: String(gh.appId),
    SPARK_GITHUB_PRIVATE_KEY: gh.privateKey,
    SPARK_PUBLIC_URL: controllerUrl,
    SPARK_AGENT_LONG_POLL_S: '5',
    SPARK_TICK_MS: String(opts.tickMs ?? 1000),
    SPARK_ADMISSION_INTERVAL_MS: String(SYSTEM_ADMISSION_INTERVAL_MS),
    SPARK_LOG_LEVEL: 'info',
  };
  const bootController = async (): Promise<ProcessHandle> => {
    const h = track(
      spawn(process.execPath, controllerEntry(), {
        cwd: REPO_ROOT,
        env: controllerEnv,
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
      join(dir, 'controller.log'),
    );
    const ready = waitFor(
      'the controller to answer /healthz',
      async () => (await fetch(`${controllerUrl}/healthz`).catch(() => null))?.ok,
      30_000,
      100,
    );
    const died = h.exited.then((code) => {
      throw new Error(`the controller exited with ${code} before answering /healthz`);
    });
    await Promise.race([ready, died]).catch((e) => {
      h.proc.kill('SIGKILL');
      throw new Error(`${(e as Error).message}\ncontroller output:\n${h.output().slice(-3000)}`);
    });
    died.catch(() => undefined);
    return h;
  };
  // the agent bundle builds while the controller boots
  const bundleP = agentBundle();
  interrupted();
  let controller = await bootController();
  parts.controller = controller;
  const reader = openLedgerReader(ledgerUrl);
  parts.reader = reader;
  const { operate: operatorToken, emergency: emergencyToken } = await bootstrapOperatorToken(
    ledgerUrl,
    config,
    configPath,
  );

  const api = async <T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    token: string | null = operatorToken,
  ): Promise<{ status: number; body: T }> => {
    const res = await fetch(`${controllerUrl}${path}`, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
      signal: AbortSignal.timeout(15_000),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // HTML or plain text (dashboard, metrics)
    }
    return { status: res.status, body: parsed as T };
  };
  github.processed = async (id) => {
    const r = await api<{ delivery?: { state: string; result: string } }>('GET', `/api/v1/deliveries/${id}`);
    return r.status === 200 && r.body.delivery ? r.body.delivery : null;
  };
  const must = async (what: string, p: Promise<{ status: number; body: unknown }>) => {
    const r = await p;
    if (r.status >= 300) throw new Error(`${what} failed: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };

  // ------------------------------------------------------------ agents with simulated hosts

  const bundle = await bundleP;
  const gpu: Record<string, FakeGpu> = {};
  const agents = parts.agents;
  const configPaths: Record<string, string> = {};
  const routes: Record<string, AgentRoute | null> = {};
  let deckard: FakeDeckard | null = null;
  for (const h of hosts) {
    const hd = join(dir, h.id);
    mkdirSync(hd, { recursive: true });
    gpu[h.id] = new FakeGpu(join(hd, 'gpu'));
    const created = (await must(
      `agent token for ${h.id}`,
      api('POST', `/api/v1/hosts/${h.id}/agent-tokens`),
    )) as { token: string };
    writeFileSync(join(hd, 'agent.token'), `${created.token}\n`, { mode: 0o600 });
    let service: Record<string, unknown> | null = null;
    if (h.homeService) {
      interrupted();
      deckard = new FakeDeckard(
        join(hd, 'deckard'),
        gpu[h.id]!,
        await freePort(),
        opts.deckardReadyDelayMs ?? 0,
      );
      parts.deckard = deckard;
      await deckard.start();
      service = deckard.service(h.homeService);
    }
    configPaths[h.id] = join(hd, 'agent.json');
    interrupted();
    const route = (await opts.agentRoute?.(h.id, { controllerPort, actionsUrl: github.actionsUrl })) ?? null;
    routes[h.id] = route;
    // the runner installed on the host: its work folder is `<runner dir>/_work` (ADR 0160)
    const install = (runnerDir: string) => symlinkSync(SIM_RUNNER, join(runnerDir, 'run.mjs'));
    let sandbox: { user: string; dir: string; helper: string[] } | null = null;
    if (withUsers) {
      interrupted();
      const user = await createTestUser();
      parts.runnerUsers.push(user);
      runnerUsers[h.id] = user;
      // a job may write the doubles' shared dirs besides its own
      sandbox = setUpHostSandbox(hd, user, { writable: [markerDir, logStore], install }).runner;
    } else {
      mkdirSync(join(hd, 'runner'), { recursive: true });
      install(join(hd, 'runner'));
    }
    const runnerDir = sandbox?.dir ?? join(hd, 'runner');
    const agentConfig = simulatedAgentConfig({
      controllerUrl: route?.controllerUrl ?? controllerUrl,
      hostId: h.id,
      runnerCommand: [
        process.execPath,
        join(runnerDir, 'run.mjs'),
        route?.actionsUrl ?? github.actionsUrl,
        logStore,
      ],
      service,
      logLevel: 'info',
      runnerUser: sandbox?.user ?? null,
    });
    agentConfig.runner.dir = runnerDir;
    agentConfig.runner.passEnv.push(...(route?.passEnv ?? []));
    if (sandbox) Object.assign(agentConfig.runner, { helper: sandbox.helper });
    const finalConfig = opts.agentConfig ? opts.agentConfig(h.id, agentConfig) : agentConfig;
    // 0600 like every file the agent keeps (docs/agent.md); an agent with a runner user checks it
    writeFileSync(configPaths[h.id]!, JSON.stringify(finalConfig, null, 2), { mode: 0o600 });
  }
  const startAgent = (hostId: string): ProcessHandle => {
    const route = routes[hostId] ?? null;
    const argv = [...(route?.launch ?? []), process.execPath, bundle, '--config', configPaths[hostId]!];
    const h = track(
      spawn(argv[0]!, argv.slice(1), {
        cwd: join(dir, hostId),
        env: ((env) => opts.agentEnv?.(hostId, env) ?? env)({
          ...baseEnv(),
          ...gpu[hostId]!.env(),
          ...(route?.env ?? {}),
        }),
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
      join(dir, hostId, 'agent.log'),
    );
    agents[hostId] = h;
    return h;
  };
  interrupted();
  for (const h of hosts) startAgent(h.id);
  for (const h of hosts) await must(`adopt ${h.id}`, api('POST', `/api/v1/hosts/${h.id}/adopt`));
  // the agents have only just started and Deckard was never lent and restored: the fleet's
  // readiness checks are overridden, as an operator may (docs/adr/0165-enable-is-a-gate.md); the
  // GitHub checks run against the simulated GitHub
  await must(
    `enable ${REPO}`,
    api('POST', `/api/v1/repositories/${REPO}/enable`, {
      pairEnabled: hosts.length > 1,
      override: ['hosts', 'deckard', 'dstack'],
    }),
  );

  const sys: SparkSystem = {
    dir,
    gh,
    controllerUrl,
    emergencyToken,
    reader,
    operatorToken,
    markerDir,
    runnerUsers,
    jobLog(jobId) {
      const f = join(logStore, `job-${jobId}.log`);
      return existsSync(f) ? readFileSync(f, 'utf8') : '';
    },
    gpu,
    deckard,
    agents,
    get controller() {
      return controller;
    },
    jobs: github.jobs,
    deliveries: github.deliveries,
    jitConfigsSeen: github.jitConfigsSeen,
    api,
    openPr: github.openPr,
    label: github.label,
    unlabel: github.unlabel,
    closePr: github.closePr,
    push: github.push,
    deliver: github.deliver,
    redeliverFailed: github.redeliverFailed,
    openGate: github.openGate,
    checkRun: github.checkRun,
    waitCheck: github.waitCheck,
    waitJob: github.waitJob,
    async reservation(id) {
      const r = await reader.reservation(id);
      if (!r) throw new Error(`no reservation ${id}`);
      return r;
    },
    leases: (id) => reader.leases(id),
    async host(id) {
      const h = await reader.host(id);
      if (!h) throw new Error(`no host ${id}`);
      return h;
    },
    async history(id) {
      return (await reader.history(id)).map((e) => ({ type: e.type, cause: e.cause }));
    },
    waitReservation(id, statuses, timeoutMs = 60_000) {
      return waitFor(
        `reservation ${id} to be ${statuses.join('|')}`,
        async () => {
          const r = await reader.reservation(id).catch(() => null);
          return r && statuses.includes(r.status) ? r : null;
        },
        timeoutMs,
        100,
      );
    },
    async waitHostPhase(id, phases, timeoutMs = 60_000) {
      await waitFor(
        `host ${id} to be ${phases.join('|')}`,
        async () => phases.includes((await sys.host(id)).phase),
        timeoutMs,
        100,
      );
    },
    startAgent,
    async diagnostics() {
      const out: string[] = [];
      for (const h of hosts) {
        const row = await sys.host(h.id);
        out.push(`${h.id}: phase ${row.phase}, note ${row.note ?? '-'}`);
      }
      const all = await reader.reservations();
      for (const r of all.slice(-8))
        out.push(
          `${r.id} ${r.kind} ${r.status} ${r.outcome ?? ''} ${r.reason ?? ''} check: ${github.checkRun(r.id)?.output.title ?? '-'}`,
        );
      const tail = (text: string, n: number) => text.trimEnd().split('\n').slice(-n).join('\n');
      out.push('--- controller (warnings and errors)');
      out.push(
        tail(
          controller
            .output()
            .split('\n')
            .filter((l) => /"level":"(warn|error)"/.test(l))
            .join('\n'),
          20,
        ),
      );
      for (const [id, a] of Object.entries(agents)) out.push(`--- agent ${id}`, tail(a.output(), 25));
      return out.join('\n');
    },
    async stopController(signal: NodeJS.Signals = 'SIGKILL') {
      await controller.stop(signal);
    },
    async startController() {
      controller = await bootController();
      parts.controller = controller;
    },
    async close() {
      await teardown(parts);
    },
  };
  await waitFor(
    'every agent to heartbeat',
    async () => {
      if (opts.signal?.aborted) return true;
      for (const h of hosts) if ((await sys.host(h.id)).lastHeartbeatAt == null) return false;
      return true;
    },
    30_000,
    100,
  );
  interrupted();
  return sys;
}

/** `queued r-3` → `r-3` (the intake's answer to a delivery that queued work). */
export function queuedId(d: Delivery): string {
  const m = /queued (r-\d+)/.exec(d.result ?? '');
  if (!m) throw new Error(`delivery ${d.id} (${d.event}) queued nothing: ${d.status} ${d.result}`);
  return m[1]!;
}
