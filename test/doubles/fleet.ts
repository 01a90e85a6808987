import { type ChildProcess, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, asc, eq, inArray } from 'drizzle-orm';
import type { SparkConfigInput } from '../../core/config.ts';
import { leaseGrantsOfData } from '../../core/events.ts';
import { isReleasableStatus } from '../../core/model.ts';
import { agentApiModule } from '../../functions/agent-api/index.ts';
import type { AppModule } from '../../functions/app.ts';
import { createAgentToken } from '../../functions/auth/tokens.ts';
import type { NewReservation } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { silentLogger } from '../../functions/log.ts';
import { type RunningController, startController } from '../../functions/node-server.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { buildTarget, targets } from '../../scripts/build.ts';
import { killGroup } from '../harness/processes.ts';
import { tempDir } from '../helpers/ledger.ts';
import { type HostSandbox, SANDBOX_HELPER, sandboxedTestDir, setUpHostSandbox } from './host-sandbox.ts';
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
 * GitHub cannot be reached here, so a small module stands in for the GitHub part: when a lease
 * is granted it inserts the lease's `jit_handoffs` row `handoffLatencyMs` later in a transaction of
 * its own, which is what the GitHub outbox does in production once GitHub returns the JIT config
 * (asked for at grant, ADR 0070). The controller hands it to the agent only once every node of the
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
  /**
   * The job result GitHub would report (`workflow_job` completed → reservations.outcome); set
   * here as soon as the reservation runs. Default: none, as when the webhook has not arrived.
   */
  githubOutcome?: (reservationId: string) => 'passed' | 'failed' | null;
  /**
   * GitHub's latency on the JIT hand-off: the runner's JIT config arrives this long after the
   * grant (default 0: just after the granting transaction).
   */
  handoffLatencyMs?: number;
  /** Deckard model-ready delay after start. */
  deckardReadyDelayMs?: number;
  controllerEnv?: Record<string, string>;
  /** Per-repository controller settings (e.g. a repository's executor, issue 15 item 1). */
  repositories?: SparkConfigInput['repositories'];
  /** Run the agent from the bundle `npm run build -- agent` makes (default), or from source with tsx. */
  agentFrom?: 'bundle' | 'source';
  /**
   * Run each host's runner as its own real unprivileged user (issue 11), created with `useradd`
   * and removed at close, as an operator sets up `spark-runner`, through the real lease sandbox
   * helper (agent/host/spark-lease-sandbox.sh, ADR 0155), invoked directly since the agent runs as
   * root here. Default: when this process is root (here and in CI); otherwise the runner runs as
   * the agent (development mode).
   */
  runnerUsers?: boolean;
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
  /** Replaces the runner of a lease like the GitHub part does after a pickup timeout. */
  replaceRunner(leaseId: string, behavior?: FakeRunnerBehavior): Promise<string>;
  close(): Promise<void>;
}

/**
 * Timings for a story that does not test liveness: production's offline threshold (40 s,
 * `timings.offlineAfterS` in core/config.ts) instead of the harness's 4 s. At 4 s a heartbeat
 * delayed by a loaded machine (a load average of 9 on two cores does it) marks a host offline and
 * fails a pair with `pair_node_lost`; a story about losing a host keeps the short default.
 */
export const NO_LIVENESS_TIMINGS = { offlineAfterS: 40 } as const;

const DEFAULT_TIMINGS = {
  heartbeatIntervalS: 1,
  offlineAfterS: 4,
  ciLeaseTtlS: 60,
  restoreRetries: 1,
  restoreBackoffS: 1,
  // generous: a fake Deckard is a fresh node process, slow to start on a loaded machine
  restoreHealthTimeoutS: 10,
};

function handoffModule(
  markerDir: string,
  runner: NonNullable<FleetOptions['runner']>,
  outcome: FleetOptions['githubOutcome'],
  latencyMs: number,
): AppModule {
  return {
    name: 'test-fake-github-handoffs',
    hooks: ({ ledger }) => [
      async (tx, ev) => {
        if (ev.type === 'reservation.running' && outcome) {
          const o = outcome(ev.subjectId);
          if (o)
            await tx.update(t.reservations).set({ outcome: o }).where(eq(t.reservations.id, ev.subjectId));
          return;
        }
        // the GitHub part asks for the JIT config at grant, while the agent prepares (ADR 0070);
        // GitHub answers later, outside the granting transaction, as the outbox does
        // each lease the grant issued, from the grant's one history row (ADR 0100)
        for (const { leaseId } of leaseGrantsOfData(ev.type, ev.subjectId, ev.data)) {
          setTimeout(() => {
            void ledger
              .write(async (tx2, at, changed) => {
                // what the sender checks before registering: the lease still active, the work wanted
                const l = (await tx2.select().from(t.leases).where(eq(t.leases.id, leaseId)))[0];
                if (l?.status !== 'active') return;
                const r = (
                  await tx2.select().from(t.reservations).where(eq(t.reservations.id, l.reservationId))
                )[0];
                if (!r || r.kind === 'development' || !isReleasableStatus(r.status)) return;
                const runnerName = `spark-${l.hostId}-${r.id}-a0`;
                await tx2
                  .insert(t.jitHandoffs)
                  .values({
                    runnerName,
                    leaseId: l.id,
                    reservationId: r.id,
                    hostId: l.hostId,
                    attempt: 0,
                    jitConfig: fakeJitConfig(runnerName, markerDir, runner(r.id, l.hostId, 0)),
                    createdAt: at,
                  })
                  .onConflictDoNothing();
                changed.add(`host:${l.hostId}`);
              })
              .catch(() => undefined);
          }, latencyMs);
        }
      },
    ],
  };
}

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
    await buildTarget(targets.find((t) => t.name === 'agent')!, out);
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
  const modules = [
    agentApiModule,
    handoffModule(markerDir, runner, opts.githubOutcome, opts.handoffLatencyMs ?? 0),
  ];
  const boot = async () => {
    const settings = settingsFromEnv(
      { SPARK_LEDGER_URL: ledgerUrl, SPARK_AGENT_LONG_POLL_S: '5', ...(opts.controllerEnv ?? {}) },
      { text: JSON.stringify({ ...config, listen: { host: '127.0.0.1', port } }), source: 'fleet config' },
    );
    const c = await startController({ settings, modules, log: silentLogger, admissionIntervalMs: 500 });
    port = c.port;
    return c;
  };
  let controller = await boot();

  const gpu: Record<string, FakeGpu> = {};
  let deckard: FakeDeckard | null = null;
  const agents: Record<string, AgentHandle> = {};
  const configPaths: Record<string, string> = {};

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
      sandbox = setUpHostSandbox(hd, user, {
        writable: [markerDir, gpu[h.id]!.dir],
        install: (runnerDir) =>
          writeFileSync(
            join(runnerDir, 'run.sh'),
            '#!/bin/sh\n# the runner install a lease sees copy-on-write\n',
            { mode: 0o755 },
          ),
      }).runner;
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
      service = {
        name: h.homeService,
        ...deckard.commands(),
        healthUrl: deckard.healthUrl,
        commandTimeoutS: 20,
        releaseVerifyTimeoutS: 2,
        healthPollMs: 100,
      };
    }
    const base = simulatedAgentConfig({
      controllerUrl: controller.url,
      hostId: h.id,
      runnerCommand: [process.execPath, FAKE_RUNNER],
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
      cleanup();
    },
  };
  return fleet;
}
