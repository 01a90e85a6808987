import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, asc, eq, inArray } from 'drizzle-orm';
import type { SparkConfigInput } from '../../../core/config.ts';
import { agentApiModule } from '../../../functions/agent-api/index.ts';
import { createAgentToken } from '../../../functions/auth/tokens.ts';
import type { NewReservation } from '../../../functions/ledger/ledger.ts';
import * as t from '../../../functions/ledger/schema.ts';
import { silentLogger } from '../../../functions/log.ts';
import { type RunningController, startController } from '../../../functions/node-server.ts';
import { settingsFromEnv } from '../../../functions/settings.ts';
import { buildTarget, targetNamed } from '../../build.ts';
import type { GitHubLatency } from '../fake-github/latency.ts';
import { killGroup } from '../harness/processes.ts';
import { tempDir } from '../ledger.ts';
import { type FleetGitHub, startFleetGitHub } from './fleet-github.ts';
import { jitStandInModule } from './fleet-jit-stand-in.ts';
import {
  type HostSandbox,
  helperThroughSudo,
  SANDBOX_HELPER,
  sandboxedTestDir,
  setUpHostSandbox,
} from './host-sandbox.ts';
import {
  FAKE_RUNNER,
  FakeDeckard,
  FakeGpu,
  type FakeRunnerBehavior,
  fakeJitConfig,
  freePort,
  REPO_ROOT,
  readRunnerMarkers,
  simulatedAgentConfig,
  waitFor,
} from './index.ts';
import { canCreateUsers, createTestUser, type TestUser } from './runner-user.ts';

/**
 * A whole fleet on loopback for agent tests and benches: the controller (in this process, real
 * HTTP on an ephemeral port, real libSQL file) and one agent per host as separate processes, each
 * with its own fake GPU; the service host also runs a fake Deckard.
 *
 * GitHub cannot be reached here; two ways to play it (`github`):
 * - `jit-stand-in` (default, ./fleet-jit-stand-in.ts): no GitHub part at all; a small module
 *   inserts each granted lease's JIT config `handoffLatencyMs` after the grant, for stories about
 *   the host. Reservations are written straight into the ledger.
 * - `fake-github` (./fleet-github.ts): the controller's real GitHub module against the fake GitHub
 *   and its Actions service, optionally at GitHub's modelled pace (`githubLatency`): a grant goes
 *   through the outbox, the dispatch, the run's identification and `generate-jitconfig`, and the
 *   runner gets its job from GitHub Actions. Reservations come from a labelled PR.
 * Either way the controller hands a JIT config to the agent only once every node of the
 * reservation is prepared.
 */

export interface FleetHost {
  id: string;
  homeService?: string | null;
}

export interface FleetOptions {
  hosts?: FleetHost[];
  timings?: NonNullable<SparkConfigInput['timings']>;
  /** Behaviour of the runner for a reservation on a host (default: exit 0 after 300 ms). */
  runner?: (reservationId: string, hostId: string, attempt: number) => FakeRunnerBehavior;
  /** Extra agent config per host (merged over the defaults). */
  agentConfig?: (hostId: string) => Record<string, unknown>;
  /** How GitHub is played (see {@link startFleet}); default `jit-stand-in`. */
  github?: 'jit-stand-in' | 'fake-github';
  /** `fake-github` only: GitHub's modelled time (scripts/sim/fake-github/latency.ts); default none. */
  githubLatency?: GitHubLatency;
  /**
   * `jit-stand-in` only: the job result GitHub would report (`workflow_job` completed →
   * reservations.outcome); set here as soon as the reservation runs. Default: none, as when the
   * webhook has not arrived. (With `fake-github` the job's own webhooks report it.)
   */
  githubOutcome?: (reservationId: string) => 'passed' | 'failed' | null;
  /** `jit-stand-in` only: the JIT config arrives this long after the grant (default 0). */
  handoffLatencyMs?: number;
  /** The controller's module tick (outbox, sweeps), ms; default 1,000 as `npm start`. */
  tickMs?: number;
  /** The controller's safety-net admission pass, ms; default 500. */
  admissionIntervalMs?: number;
  /** Deckard model-ready delay after start. */
  deckardReadyDelayMs?: number;
  controllerEnv?: Record<string, string>;
  /** Per-repository controller settings (e.g. a repository's executor). */
  repositories?: SparkConfigInput['repositories'];
  /** Run the agent from the bundle `npm run build -- agent` makes (default), or from source with tsx. */
  agentFrom?: 'bundle' | 'source';
  /**
   * Run each host's runner as its own real unprivileged user, created with `useradd`
   * and removed at close, as an operator sets up `spark-runner`, through the real lease sandbox
   * helper (agent/host/spark-lease-sandbox.sh, ADR 0155), invoked directly since the agent runs as
   * root here (through sudo with `helperThroughSudo`). Default: when this process is root (here
   * and in CI); otherwise the runner runs as the agent (development mode).
   */
  runnerUsers?: boolean;
  /**
   * With runner users: the agents run the helper through the real sudo and the sudoers drop-in
   * docs/agent.md shows, as on a host (./host-sandbox.ts `helperThroughSudo`), not directly.
   */
  helperThroughSudo?: boolean;
}

export { SANDBOX_HELPER };

/** Fleets with runner users live outside /tmp, as a host's dirs do (./host-sandbox.ts). */
function fleetDir(withUsers: boolean): { dir: string; cleanup: () => void } {
  return withUsers ? sandboxedTestDir('fleet-') : tempDir('spark-fleet-');
}

export interface AgentHandle {
  hostId: string;
  proc: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  /** Sends `signal` (default SIGKILL) and waits for the process to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export interface Fleet {
  dir: string;
  /** The fake GitHub world (`github: 'fake-github'` only). */
  github: FleetGitHub | null;
  markerDir: string;
  /** The runner user of each host, when the fleet runs runners as their own users. */
  runnerUsers: Record<string, TestUser>;
  controller: RunningController;
  gpu: Record<string, FakeGpu>;
  deckard: FakeDeckard | null;
  agents: Record<string, AgentHandle>;
  agentConfigPath(hostId: string): string;
  startAgent(hostId: string): AgentHandle;
  stopController(): Promise<void>;
  startControllerAgain(): Promise<void>;
  reserve(input?: Partial<NewReservation>): Promise<string>;
  reservation(id: string): Promise<typeof t.reservations.$inferSelect>;
  leases(reservationId: string): Promise<(typeof t.leases.$inferSelect)[]>;
  host(id: string): Promise<typeof t.hosts.$inferSelect>;
  bindingLeases(): Promise<(typeof t.leases.$inferSelect)[]>;
  eventTypes(subjectId: string): Promise<string[]>;
  waitReservation(
    id: string,
    statuses: string[],
    timeoutMs?: number,
  ): Promise<typeof t.reservations.$inferSelect>;
  waitHostPhase(id: string, phases: string[], timeoutMs?: number): Promise<void>;
  /** Replaces a lease's runner as the GitHub part does after a pickup timeout (`jit-stand-in` only). */
  replaceRunner(leaseId: string, behavior?: FakeRunnerBehavior): Promise<string>;
  close(): Promise<void>;
}

/**
 * The fleet's timings. The offline threshold is production's (40 s, `timings.offlineAfterS` in
 * core/config.ts), not a short one: a story's outcome must not depend on how promptly a loaded
 * machine schedules a heartbeat. At 4 s, a heartbeat delayed by a load average of 9 on two cores
 * marked a healthy host offline and failed a pair with `pair_node_lost`. A story about losing a
 * host stops its agent and sets a short `timings.offlineAfterS` of its own
 * (docs/performance.md, "Test wall time").
 */
const DEFAULT_TIMINGS = {
  heartbeatIntervalS: 1,
  offlineAfterS: 40,
  ciLeaseTtlS: 60,
  restoreRetries: 1,
  restoreBackoffS: 1,
  // generous: a fake Deckard is a fresh node process, slow to start on a loaded machine
  restoreHealthTimeoutS: 10,
};

/** What a story that does not test liveness gets by default (kept for the files that say so). */
export const NO_LIVENESS_TIMINGS = { offlineAfterS: DEFAULT_TIMINGS.offlineAfterS } as const;

let bundle: Promise<string> | null = null;

/**
 * The agent bundle (the file that ships): the one the vitest global setup built for this test run
 * (`SPARK_TEST_AGENT_BUNDLE`), else built once per process into a temp dir.
 */
export function agentBundle(): Promise<string> {
  const prebuilt = process.env.SPARK_TEST_AGENT_BUNDLE;
  if (prebuilt) return Promise.resolve(prebuilt);
  bundle ??= (async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'spark-agent-bundle-')), 'spark-agent.mjs');
    await buildTarget(targetNamed('agent'), out);
    return out;
  })();
  return bundle;
}

/** Starts the controller and an agent per host; nothing is reserved yet. */
export async function startFleet(opts: FleetOptions = {}): Promise<Fleet> {
  const hosts = opts.hosts ?? [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }];
  const agentMain = opts.agentFrom === 'source' ? null : await agentBundle();
  const withUsers = opts.runnerUsers ?? canCreateUsers();
  const { dir, cleanup } = fleetDir(withUsers);
  const runnerUsers: Record<string, TestUser> = {};
  // runner users pass through (not list) the fleet and host dirs to their work dirs and the fake GPU
  chmodSync(dir, 0o711);
  const markerDir = join(dir, 'markers');
  // fake runners (any runner user) record what they saw here
  mkdirSync(markerDir, { recursive: true });
  chmodSync(markerDir, 0o1777);
  const runner = opts.runner ?? (() => ({ exitCode: 0, sleepMs: 300 }));
  const config: SparkConfigInput = {
    hosts: hosts.map((h) => ({ id: h.id, homeService: h.homeService ?? null })),
    preferHosts: hosts.some((h) => h.id === 'spark-2') ? ['spark-2'] : [],
    timings: { ...DEFAULT_TIMINGS, ...(opts.timings ?? {}) },
    ...(opts.repositories ? { repositories: opts.repositories } : {}),
  };
  const ledgerUrl = `file:${join(dir, 'spark.db')}`;
  let port = 0;
  let github: FleetGitHub | null = null;
  if (opts.github === 'fake-github') {
    if (opts.githubOutcome || opts.handoffLatencyMs != null)
      throw new TypeError('githubOutcome and handoffLatencyMs belong to the jit stand-in');
    // webhooks go to the controller's port, chosen before it starts
    port = await freePort();
    github = await startFleetGitHub({
      controllerPort: port,
      runner,
      markerDir,
      ...(opts.githubLatency ? { latency: opts.githubLatency } : {}),
    });
    config.github = github.config as SparkConfigInput['github'];
  }
  const modules = github
    ? [agentApiModule, ...github.modules]
    : [agentApiModule, jitStandInModule(markerDir, runner, opts.githubOutcome, opts.handoffLatencyMs ?? 0)];
  const boot = async () => {
    const settings = settingsFromEnv(
      {
        SPARK_LEDGER_URL: ledgerUrl,
        SPARK_AGENT_LONG_POLL_S: '5',
        ...(github?.env ?? {}),
        ...(opts.controllerEnv ?? {}),
      },
      { text: JSON.stringify({ ...config, listen: { host: '127.0.0.1', port } }), source: 'fleet config' },
    );
    const c = await startController({
      settings,
      modules,
      log: silentLogger,
      tickMs: opts.tickMs ?? 1000,
      admissionIntervalMs: opts.admissionIntervalMs ?? 500,
    });
    port = c.port;
    github?.attach(c.ledger, c.url);
    return c;
  };
  let controller: RunningController;
  try {
    controller = await boot();
  } catch (e) {
    await github?.close().catch(() => undefined);
    throw e;
  }

  const gpu: Record<string, FakeGpu> = {};
  let deckard: FakeDeckard | null = null;
  const agents: Record<string, AgentHandle> = {};
  const configPaths: Record<string, string> = {};
  const sudoRules: (() => void)[] = [];

  for (const h of hosts) {
    const hd = join(dir, h.id);
    mkdirSync(hd, { recursive: true, mode: 0o711 });
    chmodSync(hd, 0o711);
    gpu[h.id] = new FakeGpu(join(hd, 'gpu'));
    // like a real GPU, a job's process shows in nvidia-smi: fake runners (any user) add themselves
    chmodSync(gpu[h.id]!.dir, 0o1777);
    const user = withUsers ? await createTestUser() : null;
    let sandbox: HostSandbox['runner'] | Record<string, never> = {};
    if (user) {
      runnerUsers[h.id] = user;
      // a job may write the doubles' shared dirs besides its own: markers and the fake GPU's state
      const hs = setUpHostSandbox(hd, user, {
        writable: [markerDir, gpu[h.id]!.dir],
        install: (runnerDir) =>
          writeFileSync(
            join(runnerDir, 'run.sh'),
            '#!/bin/sh\n# the runner install a lease sees copy-on-write\n',
            { mode: 0o755 },
          ),
      });
      sandbox = hs.runner;
      if (opts.helperThroughSudo) {
        const viaSudo = helperThroughSudo(hs.conf);
        sudoRules.push(viaSudo.remove);
        sandbox = { ...sandbox, helper: viaSudo.helper };
      }
    }
    const { token } = await createAgentToken(controller.ledger, h.id, 'test');
    writeFileSync(join(hd, 'agent.token'), `${token}\n`, { mode: 0o600 });
    let service: Record<string, unknown> | null = null;
    if (h.homeService) {
      deckard = new FakeDeckard(
        join(hd, 'deckard'),
        gpu[h.id]!,
        await freePort(),
        opts.deckardReadyDelayMs ?? 0,
      );
      service = deckard.service(h.homeService);
    }
    const base = simulatedAgentConfig({
      controllerUrl: controller.url,
      hostId: h.id,
      // with GitHub, the runner connects to GitHub Actions for its job (fake-runner.mjs)
      runnerCommand: [process.execPath, FAKE_RUNNER, ...(github ? [github.actionsUrl] : [])],
      service,
      logLevel: 'debug',
      runnerUser: user?.name ?? null,
    });
    const agentCfg = {
      ...base,
      runner: { ...base.runner, ...sandbox },
      ...(opts.agentConfig?.(h.id) ?? {}),
    };
    configPaths[h.id] = join(hd, 'agent.json');
    writeFileSync(configPaths[h.id]!, JSON.stringify(agentCfg, null, 2), { mode: 0o600 });
    await controller.ledger.setManaged(h.id, true, 'test');
  }

  const startAgent = (hostId: string): AgentHandle => {
    const proc = spawn(
      process.execPath,
      [
        ...(agentMain ? [agentMain] : ['--import', 'tsx', join(REPO_ROOT, 'agent/main.ts')]),
        '--config',
        configPaths[hostId]!,
      ],
      {
        cwd: REPO_ROOT,
        env: { ...process.env, ...gpu[hostId]!.env() },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let out = '';
    proc.stderr!.on('data', (b: Buffer) => {
      out += b.toString('utf8');
      if (out.length > 400_000) out = out.slice(-200_000);
    });
    const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
    const handle: AgentHandle = {
      hostId,
      proc,
      output: () => out,
      exited,
      async kill(signal: NodeJS.Signals = 'SIGKILL') {
        if (proc.exitCode == null && proc.signalCode == null) proc.kill(signal);
        await exited;
      },
    };
    agents[hostId] = handle;
    return handle;
  };

  const db = () => controller.ledger.db;
  const fleet: Fleet = {
    dir,
    github,
    markerDir,
    runnerUsers,
    get controller() {
      return controller;
    },
    gpu,
    deckard,
    agents,
    agentConfigPath: (hostId) => configPaths[hostId]!,
    startAgent,
    async stopController() {
      await controller.close();
    },
    async startControllerAgain() {
      controller = await boot();
    },
    async reserve(input = {}) {
      if (github) return github.reserve(input);
      const r = await controller.ledger.createReservation(
        {
          kind: 'manual',
          topology: 'single',
          repo: 'acme/butter',
          pr: 7,
          headSha: '7fc2a91c0ffee00000000000000000000000000a',
          suite: 'smoke',
          requester: 'test',
          ...input,
        },
        'test',
      );
      return r.id;
    },
    async reservation(id) {
      return (await db().select().from(t.reservations).where(eq(t.reservations.id, id)))[0]!;
    },
    async leases(reservationId) {
      return db()
        .select()
        .from(t.leases)
        .where(eq(t.leases.reservationId, reservationId))
        .orderBy(asc(t.leases.hostId));
    },
    async host(id) {
      return (await db().select().from(t.hosts).where(eq(t.hosts.id, id)))[0]!;
    },
    async bindingLeases() {
      return db()
        .select()
        .from(t.leases)
        .where(inArray(t.leases.status, ['active', 'expired', 'releasing']));
    },
    async eventTypes(subjectId) {
      const rows = await db()
        .select()
        .from(t.events)
        .where(eq(t.events.subjectId, subjectId))
        .orderBy(asc(t.events.id));
      return rows.map((r) => r.type);
    },
    async waitReservation(id, statuses, timeoutMs = 30_000) {
      return waitFor(
        `reservation ${id} to be ${statuses.join('|')}`,
        async () => {
          const r = await fleet.reservation(id);
          return statuses.includes(r.status) ? r : null;
        },
        timeoutMs,
      );
    },
    async waitHostPhase(id, phases, timeoutMs = 30_000) {
      await waitFor(
        `host ${id} to be ${phases.join('|')}`,
        async () => phases.includes((await fleet.host(id)).phase),
        timeoutMs,
      );
    },
    async replaceRunner(leaseId, behavior = { exitCode: 0, sleepMs: 300 }) {
      if (github) throw new TypeError('with fake-github the GitHub part replaces runners itself');
      return controller.ledger.write(async (tx, now, changed) => {
        const cur = (
          await tx
            .select()
            .from(t.jitHandoffs)
            .where(eq(t.jitHandoffs.leaseId, leaseId))
            .orderBy(asc(t.jitHandoffs.attempt))
        ).at(-1)!;
        await tx
          .update(t.jitHandoffs)
          .set({ deletedAt: now })
          .where(and(eq(t.jitHandoffs.runnerName, cur.runnerName)));
        const attempt = cur.attempt + 1;
        const runnerName = `spark-${cur.hostId}-${cur.reservationId}-a${attempt}`;
        await tx.insert(t.jitHandoffs).values({
          runnerName,
          leaseId,
          reservationId: cur.reservationId,
          hostId: cur.hostId,
          attempt,
          jitConfig: fakeJitConfig(runnerName, markerDir, behavior),
          createdAt: now,
        });
        changed.add(`host:${cur.hostId}`);
        return runnerName;
      });
    },
    async close() {
      await Promise.all(Object.values(agents).map((a) => a.kill('SIGKILL')));
      // a marker's pid may belong to another process by now (pid reuse): killGroup checks
      for (const m of readRunnerMarkers(markerDir)) killGroup(m.pid, m.startedAt);
      deckard?.kill();
      await controller.close().catch(() => undefined);
      for (const u of Object.values(runnerUsers)) await u.remove();
      for (const remove of sudoRules) remove();
      cleanup();
      // fails the caller on any violation of GitHub's description the fake recorded (server.ts)
      await github?.close();
    },
  };
  return fleet;
}
