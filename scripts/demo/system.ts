import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { sign } from '@octokit/webhooks-methods';
import { asc, eq } from 'drizzle-orm';
import type { SparkConfigInput } from '../../core/config.ts';
import { createApiToken } from '../../functions/auth/tokens.ts';
import type { Ledger } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { silentLogger } from '../../functions/log.ts';
import { openNodeLedger } from '../../functions/node-server.ts';
import { settingsFromEnv } from '../../functions/settings.ts';
import { agentBundle } from '../../test/doubles/fleet.ts';
import {
  FakeDeckard,
  FakeGpu,
  freePort,
  REPO_ROOT,
  simulatedAgentConfig,
  waitFor,
} from '../../test/doubles/index.ts';
import { example, SECRET } from '../../test/fake-github/harness.ts';
import { type CheckRun, type FakeGitHub, startFakeGitHub } from '../../test/fake-github/server.ts';
import { tempDir } from '../../test/helpers/ledger.ts';

/**
 * The whole system on loopback, for `npm run demo` and the system tests (issue 7): the real
 * controller (`functions/node.ts`) and one relay agent per host (the shipped agent bundle) as
 * separate processes, the agent test doubles (fake nvidia-smi, fake Deckard), and, in this
 * process, GitHub: the fake GitHub REST API (checked against GitHub's OpenAPI description) plus
 * a small GitHub Actions simulator that hands dispatched jobs to the JIT runners the agents start
 * (`sim-runner.mjs`) and sends the signed `workflow_job` webhooks GitHub would send.
 */

export const SIM_RUNNER = join(REPO_ROOT, 'scripts', 'demo', 'sim-runner.mjs');
export const REPO = 'acme/butter';
export const MAINTAINER = 'alice';

/** What the simulated job does on one host (GitHub hands it to the runner with the job). */
export interface JobPlan {
  result: 'passed' | 'failed';
  exitCode: number;
  /** Test duration before any gate. */
  workMs: number;
  /** Gates a test opens with {@link SparkSystem.openGate}: `work` holds the test running, `exit` holds the runner after the job completed. */
  gates: ('work' | 'exit')[];
  receipt: boolean;
  lastLines: string[];
}

/** A job GitHub assigned to a runner. */
export interface SimJob {
  id: number;
  runId: number;
  reservationId: string;
  hostId: string;
  runnerName: string;
  headSha: string;
  repo: string;
  topology: string;
  suite: string;
  pid: number;
  plan: JobPlan;
  /** The labels of the runner GitHub matched the job to. */
  labels: string[];
  gates: Set<string>;
  conclusion: string | null;
}

export interface SystemHost {
  id: string;
  homeService?: string | null;
}

export interface SystemOptions {
  hosts?: SystemHost[];
  timings?: NonNullable<SparkConfigInput['timings']>;
  /** The plan for each job GitHub hands out (default: passes after 300 ms). */
  plan?: (job: { reservationId: string; hostId: string; headSha: string }) => Partial<JobPlan>;
  /** Called with every line worth showing on a timeline (webhooks, GitHub actions). */
  onNote?: (line: string) => void;
  deckardReadyDelayMs?: number;
  /** Aborting it while starting (Ctrl-C in the demo) stops what already runs and rejects. */
  signal?: AbortSignal;
}

export interface Delivery {
  id: string;
  event: string;
  status: number;
  result: string | null;
}

export interface ProcessHandle {
  proc: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export interface PullRequest {
  number: number;
  headSha: string;
  headRepo: string;
  labels: string[];
  state: 'open' | 'closed';
}

type ReservationRow = typeof t.reservations.$inferSelect;

export interface SparkSystem {
  dir: string;
  gh: FakeGitHub;
  controllerUrl: string;
  /** A read connection to the ledger file (the controller process owns all writes). */
  ledger: Ledger;
  operatorToken: string;
  gpu: Record<string, FakeGpu>;
  deckard: FakeDeckard | null;
  agents: Record<string, ProcessHandle>;
  controller: ProcessHandle;
  jobs: SimJob[];
  deliveries: Delivery[];
  /** Every JIT config a runner presented to GitHub (secrets: for leak checks only). */
  jitConfigsSeen: string[];
  /** HTTP call to the controller (JSON); `token` defaults to the operator token, `null` sends none. */
  api<T = unknown>(
    method: string,
    path: string,
    body?: unknown,
    token?: string | null,
  ): Promise<{ status: number; body: T }>;
  /** Opens a PR in the fake GitHub (no webhook: the label is what matters here). */
  openPr(n: number, o: { sha: string; fork?: boolean }): PullRequest;
  label(n: number, label: string, sender?: string): Promise<Delivery>;
  unlabel(n: number, label: string, sender?: string): Promise<Delivery>;
  closePr(n: number, sender?: string): Promise<Delivery>;
  push(n: number, sha: string, sender?: string): Promise<Delivery>;
  /** Sends a signed webhook to the controller; a refused connection is recorded for redelivery. */
  deliver(event: string, payload: unknown, id?: string): Promise<Delivery>;
  /** Redelivers every delivery that did not get a 2xx (GitHub's "Redeliver"), same delivery id. */
  redeliverFailed(): Promise<Delivery[]>;
  openGate(reservationId: string, gate: 'work' | 'exit', hostId?: string): void;
  reservation(id: string): Promise<ReservationRow>;
  leases(id: string): Promise<(typeof t.leases.$inferSelect)[]>;
  host(id: string): Promise<typeof t.hosts.$inferSelect>;
  history(id: string): Promise<{ type: string; cause: string | null }[]>;
  waitReservation(id: string, statuses: string[], timeoutMs?: number): Promise<ReservationRow>;
  waitHostPhase(id: string, phases: string[], timeoutMs?: number): Promise<void>;
  /** The check run the controller keeps for a reservation. */
  checkRun(reservationId: string): CheckRun | undefined;
  waitCheck(reservationId: string, title: string | RegExp, timeoutMs?: number): Promise<CheckRun>;
  waitJob(reservationId: string, hostId?: string, timeoutMs?: number): Promise<SimJob>;
  startAgent(hostId: string): ProcessHandle;
  /** What to look at when a scenario fails: host phases, open reservations, recent log lines. */
  diagnostics(): Promise<string>;
  stopController(signal?: NodeJS.Signals): Promise<void>;
  startController(): Promise<void>;
  close(): Promise<void>;
}

const DEFAULT_TIMINGS = {
  heartbeatIntervalS: 1,
  offlineAfterS: 4,
  ciLeaseTtlS: 60,
  runnerPickupTimeoutS: 600,
  restoreRetries: 1,
  restoreBackoffS: 1,
  restoreHealthTimeoutS: 3,
};

const DEFAULT_PLAN: JobPlan = {
  result: 'passed',
  exitCode: 0,
  workMs: 300,
  gates: [],
  receipt: true,
  lastLines: ['ok 1 - cuda kernels match reference', 'ok 2 - model loads from the managed cache'],
};

function track(proc: ChildProcess, logFile: string): ProcessHandle {
  let out = '';
  const file = createWriteStream(logFile, { flags: 'a' });
  const take = (b: Buffer) => {
    out += b.toString('utf8');
    if (out.length > 400_000) out = out.slice(-200_000);
    file.write(b);
  };
  proc.stdout?.on('data', take);
  proc.stderr?.on('data', take);
  const exited = new Promise<number | null>((res) =>
    proc.once('exit', (code) => {
      file.end();
      res(code);
    }),
  );
  return {
    proc,
    output: () => out,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode == null && proc.signalCode == null) proc.kill(signal);
      await exited;
    },
  };
}

/** Only the variables a child needs: never a SPARK_* setting of whoever runs the demo. */
function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v != null && !k.startsWith('SPARK_')) env[k] = v;
  return env;
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : null;
}

function send(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

let deliverySeq = 0;

/** Starts everything; the fleet is adopted, agents heartbeat and {@link REPO} is enabled (pairs too). */
export async function startSystem(opts: SystemOptions = {}): Promise<SparkSystem> {
  const parts: Parts = { agents: {}, jobs: [] };
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
  gh?: FakeGitHub;
  broker?: Server;
  controller?: ProcessHandle;
  agents: Record<string, ProcessHandle>;
  jobs: SimJob[];
  deckard?: FakeDeckard | null;
  ledger?: Ledger;
}

async function teardown(p: Parts): Promise<void> {
  await Promise.all(Object.values(p.agents).map((a) => a.stop('SIGKILL')));
  // runners are detached from their agents on purpose (they survive an agent crash)
  for (const j of p.jobs) {
    try {
      process.kill(-j.pid, 'SIGKILL');
    } catch {
      try {
        process.kill(j.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  p.deckard?.kill();
  // whatever else runs from this system's dir: a runner not yet given a job, a Deckard a
  // restore was starting, a service command cut short when its agent was killed
  if (p.dir) await sweepProcessesUnder(p.dir);
  await p.controller?.stop('SIGTERM');
  p.ledger?.store.close();
  if (p.broker) {
    const b = p.broker;
    b.closeAllConnections();
    await new Promise<void>((r) => b.close(() => r()));
  }
  await p.gh?.close();
  p.cleanup?.();
}

/**
 * Kills every process whose command line names a path under `dir`. A service command cut short
 * can still be exec'ing its child, so it sweeps until two scans in a row find nothing (bounded).
 */
export async function sweepProcessesUnder(dir: string, windowMs = 5000): Promise<void> {
  const deadline = Date.now() + windowMs;
  let quiet = 0;
  while (quiet < 2 && Date.now() < deadline) {
    const pids = pidsUnder(dir);
    for (const pid of pids) killQuietly(pid);
    quiet = pids.length === 0 ? quiet + 1 : 0;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Live processes whose command line names a path under `dir` (a fresh mkdtemp dir: ours). */
function pidsUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(dir)) pids.push(Number(d));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function buildSystem(opts: SystemOptions, parts: Parts): Promise<SparkSystem> {
  const interrupted = () => {
    if (opts.signal?.aborted) throw new Error('interrupted while starting');
  };
  const { dir, cleanup } = tempDir('spark-system-');
  parts.dir = dir;
  parts.cleanup = cleanup;
  const note = opts.onNote ?? (() => undefined);
  const hosts = opts.hosts ?? [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }];
  const gh = await startFakeGitHub();
  parts.gh = gh;
  const repoState = gh.addRepo(REPO, {
    installationId: 77,
    collaborators: { [MAINTAINER]: 'admin', mallory: 'read' },
  });
  const jobs = parts.jobs;
  const jitConfigsSeen: string[] = [];
  const deliveries: Delivery[] = [];
  const failed = new Map<string, { event: string; body: string }>();
  let jobSeq = 500;

  const controllerPort = await freePort();
  const controllerUrl = `http://127.0.0.1:${controllerPort}`;
  const config = {
    listen: { host: '127.0.0.1', port: controllerPort },
    hosts: hosts.map((h) => ({ id: h.id, homeService: h.homeService ?? null })),
    preferHosts: hosts.some((h) => h.id === 'spark-2') ? ['spark-2'] : [],
    timings: { ...DEFAULT_TIMINGS, ...(opts.timings ?? {}) },
    github: { apiUrl: gh.url },
  };
  const configPath = join(dir, 'spark.config.json');
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  const ledgerUrl = `file:${join(dir, 'spark.db')}`;

  // ------------------------------------------------------------ GitHub: webhooks and Actions

  const deliverRaw = async (id: string, event: string, body: string): Promise<Delivery> => {
    let d: Delivery;
    try {
      const res = await fetch(`${controllerUrl}/github/webhooks`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-github-event': event,
          'x-github-delivery': id,
          'x-hub-signature-256': await sign(SECRET, body),
        },
        body,
        signal: AbortSignal.timeout(10_000),
      });
      const text = await res.text();
      let result: string | null = null;
      try {
        result = (JSON.parse(text) as { result?: string }).result ?? null;
      } catch {
        result = text.slice(0, 200);
      }
      d = { id, event, status: res.status, result };
    } catch (e) {
      // what GitHub shows as a failed delivery: the controller did not answer
      d = { id, event, status: 0, result: `not delivered: ${(e as Error).message}` };
    }
    if (d.status >= 200 && d.status < 300) failed.delete(id);
    else failed.set(id, { event, body });
    deliveries.push(d);
    note(`github → controller: ${event} ${d.status ? d.status : 'refused'} ${d.result ?? ''}`.trim());
    return d;
  };
  const deliver = (event: string, payload: unknown, id?: string) =>
    deliverRaw(id ?? `sys-${process.pid}-${++deliverySeq}`, event, JSON.stringify(payload));

  const workflowJob = (job: SimJob, action: 'queued' | 'in_progress' | 'completed') => {
    const p = example('workflow_job', action);
    p.repository.full_name = job.repo;
    p.repository.name = job.repo.split('/')[1];
    p.installation = { id: repoState.installationId };
    p.workflow_job.id = job.id;
    p.workflow_job.run_id = job.runId;
    p.workflow_job.head_sha = job.headSha;
    p.workflow_job.status = action;
    p.workflow_job.conclusion = action === 'completed' ? job.conclusion : null;
    p.workflow_job.labels = job.labels;
    p.workflow_job.runner_name = action === 'queued' ? null : job.runnerName;
    p.workflow_job.html_url = `https://github.com/${job.repo}/actions/runs/${job.runId}/job/${job.id}`;
    return p;
  };

  const broker: Server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (req.method === 'POST' && url.pathname === '/runner/acquire') {
        const b = (await readBody(req)) as { jitConfig: string; pid: number; hostId: string };
        const runner = gh.runners.find((r) => r.encodedJitConfig === b.jitConfig);
        if (!runner) return send(res, 401, { message: 'this runner is not registered (JIT config unknown)' });
        if (!jitConfigsSeen.includes(b.jitConfig)) jitConfigsSeen.push(b.jitConfig);
        const existing = jobs.find((j) => j.runnerName === runner.name);
        if (existing) return send(res, 200, existing);
        const label = runner.labels.find((l) => /^spark-r-\d+$/.test(l));
        const rid = label?.slice('spark-'.length);
        const dispatch = gh.dispatches.find((d) => d.inputs.reservation_id === rid);
        // no job asks for this runner's labels yet: a real runner just keeps listening
        if (!rid || !dispatch) return send(res, 202, { waiting: true });
        const base = jobs.find((j) => j.reservationId === rid);
        const job: SimJob = {
          id: ++jobSeq,
          runId: base?.runId ?? 9000 + jobSeq,
          reservationId: rid,
          hostId: b.hostId,
          runnerName: runner.name,
          headSha: dispatch.inputs.head_sha!,
          repo: dispatch.repo,
          topology: dispatch.inputs.topology!,
          suite: dispatch.inputs.suite!,
          pid: b.pid,
          plan: {
            ...DEFAULT_PLAN,
            ...(opts.plan?.({ reservationId: rid, hostId: b.hostId, headSha: dispatch.inputs.head_sha! }) ??
              {}),
          },
          labels: [...runner.labels],
          gates: new Set(),
          conclusion: null,
        };
        jobs.push(job);
        runner.busy = true;
        note(`GitHub Actions: job ${job.id} of ${rid} assigned to runner ${runner.name}`);
        await deliver('workflow_job', workflowJob(job, 'queued'));
        await deliver('workflow_job', workflowJob(job, 'in_progress'));
        return send(res, 200, job);
      }
      const gate = /^\/jobs\/(\d+)\/gates\/(work|exit)$/.exec(url.pathname);
      if (req.method === 'GET' && gate) {
        const job = jobs.find((j) => j.id === Number(gate[1]));
        return send(res, job ? 200 : 404, { open: job?.gates.has(gate[2]!) ?? false });
      }
      const done = /^\/jobs\/(\d+)\/complete$/.exec(url.pathname);
      if (req.method === 'POST' && done) {
        const job = jobs.find((j) => j.id === Number(done[1]));
        if (!job) return send(res, 404, { message: 'no such job' });
        const b = (await readBody(req)) as { conclusion: string };
        if (job.conclusion == null) {
          job.conclusion = b.conclusion;
          note(
            `GitHub Actions: job ${job.id} of ${job.reservationId} on ${job.hostId} completed: ${b.conclusion}`,
          );
          // the runner is idle again; deregistering it is the controller's job on release
          const runner = gh.runners.find((r) => r.name === job.runnerName);
          if (runner) runner.busy = false;
          await deliver('workflow_job', workflowJob(job, 'completed'));
        }
        return send(res, 200, { ok: true });
      }
      send(res, 404, { message: 'not found' });
    })().catch((e) => send(res, 500, { message: String(e) }));
  });
  parts.broker = broker;
  await new Promise<void>((r) => broker.listen(0, '127.0.0.1', r));
  const brokerUrl = `http://127.0.0.1:${(broker.address() as AddressInfo).port}`;

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
    SPARK_LOG_LEVEL: 'info',
  };
  const bootController = async (): Promise<ProcessHandle> => {
    const h = track(
      spawn(process.execPath, ['--import', 'tsx', join(REPO_ROOT, 'functions', 'node.ts')], {
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

  const settings = settingsFromEnv(
    { SPARK_LEDGER_URL: ledgerUrl },
    { text: JSON.stringify(config), source: configPath },
  );
  const ledger = await openNodeLedger(settings, { log: silentLogger });
  parts.ledger = ledger;
  // the first operate token comes from the ledger file, as `sparkctl admin token create` does
  const operatorToken = (
    await createApiToken(ledger, { name: 'demo-operator', scopes: ['operate'] }, 'demo bootstrap')
  ).token;

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
      service = {
        name: h.homeService,
        ...deckard.commands(),
        healthUrl: deckard.healthUrl,
        commandTimeoutS: 20,
        releaseVerifyTimeoutS: 2,
        healthPollMs: 100,
      };
    }
    configPaths[h.id] = join(hd, 'agent.json');
    writeFileSync(
      configPaths[h.id]!,
      JSON.stringify(
        simulatedAgentConfig({
          controllerUrl,
          hostId: h.id,
          runnerCommand: [process.execPath, SIM_RUNNER, brokerUrl],
          service,
          logLevel: 'info',
        }),
        null,
        2,
      ),
    );
  }
  const startAgent = (hostId: string): ProcessHandle => {
    const h = track(
      spawn(process.execPath, [bundle, '--config', configPaths[hostId]!], {
        cwd: join(dir, hostId),
        env: { ...baseEnv(), ...gpu[hostId]!.env() },
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
  await must(
    `enable ${REPO}`,
    api('POST', `/api/v1/repositories/${REPO}/enable`, { pairEnabled: hosts.length > 1 }),
  );

  const db = () => ledger.db;
  const prs = repoState.pulls;
  const prPayload = (action: string, n: number, sender: string) => {
    const pr = prs[n];
    if (!pr) throw new TypeError(`PR #${n} was not opened with openPr()`);
    const p = example('pull_request', action);
    p.action = action;
    p.number = n;
    p.repository.full_name = REPO;
    p.repository.name = REPO.split('/')[1];
    p.repository.default_branch = 'main';
    p.installation = { id: repoState.installationId };
    p.sender.login = sender;
    p.sender.type = 'User';
    p.pull_request.number = n;
    p.pull_request.state = pr.state;
    p.pull_request.labels = pr.labels.map((name, i) => ({ id: i + 1, name, color: 'ededed' }));
    p.pull_request.head.sha = pr.headSha;
    p.pull_request.head.ref = `topic-${n}`;
    p.pull_request.head.repo = pr.headRepo ? { ...p.pull_request.base.repo, full_name: pr.headRepo } : null;
    p.pull_request.base.ref = 'main';
    p.pull_request.base.repo = { ...p.pull_request.base.repo, full_name: REPO };
    return p;
  };

  const sys: SparkSystem = {
    dir,
    gh,
    controllerUrl,
    ledger,
    operatorToken,
    gpu,
    deckard,
    agents,
    get controller() {
      return controller;
    },
    jobs,
    deliveries,
    jitConfigsSeen,
    api,
    openPr(n, o) {
      const headRepo = o.fork ? `mallory/${REPO.split('/')[1]}` : REPO;
      prs[n] = { state: 'open', headSha: o.sha, headRepo, labels: [] };
      return { number: n, headSha: o.sha, headRepo, labels: [], state: 'open' };
    },
    async label(n, label, sender = MAINTAINER) {
      prs[n]!.labels = [...new Set([...prs[n]!.labels, label])];
      const p = prPayload('labeled', n, sender);
      p.label = { id: 99, name: label, color: 'ededed' };
      return deliver('pull_request', p);
    },
    async unlabel(n, label, sender = MAINTAINER) {
      prs[n]!.labels = prs[n]!.labels.filter((l) => l !== label);
      const p = prPayload('unlabeled', n, sender);
      p.label = { id: 99, name: label, color: 'ededed' };
      return deliver('pull_request', p);
    },
    async closePr(n, sender = MAINTAINER) {
      prs[n]!.state = 'closed';
      return deliver('pull_request', prPayload('closed', n, sender));
    },
    async push(n, sha, sender = MAINTAINER) {
      prs[n]!.headSha = sha;
      return deliver('pull_request', prPayload('synchronize', n, sender));
    },
    deliver,
    async redeliverFailed() {
      const out: Delivery[] = [];
      for (const [id, f] of [...failed]) out.push(await deliverRaw(id, f.event, f.body));
      return out;
    },
    openGate(reservationId, gate, hostId) {
      const js = jobs.filter((j) => j.reservationId === reservationId && (!hostId || j.hostId === hostId));
      if (!js.length) throw new TypeError(`no job of ${reservationId}${hostId ? ` on ${hostId}` : ''} yet`);
      for (const j of js) j.gates.add(gate);
    },
    async reservation(id) {
      const r = (await db().select().from(t.reservations).where(eq(t.reservations.id, id)))[0];
      if (!r) throw new Error(`no reservation ${id}`);
      return r;
    },
    async leases(id) {
      return db().select().from(t.leases).where(eq(t.leases.reservationId, id)).orderBy(asc(t.leases.hostId));
    },
    async host(id) {
      return (await db().select().from(t.hosts).where(eq(t.hosts.id, id)))[0]!;
    },
    async history(id) {
      const rows = await db()
        .select()
        .from(t.events)
        .where(eq(t.events.subjectId, id))
        .orderBy(asc(t.events.id));
      return rows.map((r) => ({ type: r.type, cause: r.cause }));
    },
    waitReservation(id, statuses, timeoutMs = 60_000) {
      return waitFor(
        `reservation ${id} to be ${statuses.join('|')}`,
        async () => {
          const r = await sys.reservation(id).catch(() => null);
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
    checkRun(reservationId) {
      return gh.checkRuns.find((c) => c.external_id === reservationId);
    },
    waitCheck(reservationId, title, timeoutMs = 60_000) {
      return waitFor(
        `check run of ${reservationId} to read ${String(title)} (now: ${sys.checkRun(reservationId)?.output.title ?? 'none'})`,
        () => {
          const c = sys.checkRun(reservationId);
          const ti = c?.output.title ?? '';
          return c && (typeof title === 'string' ? ti === title : title.test(ti)) ? c : null;
        },
        timeoutMs,
        100,
      );
    },
    waitJob(reservationId, hostId, timeoutMs = 60_000) {
      return waitFor(
        `a job of ${reservationId}${hostId ? ` on ${hostId}` : ''}`,
        () => jobs.find((j) => j.reservationId === reservationId && (!hostId || j.hostId === hostId)),
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
      const open = await db().select().from(t.reservations);
      for (const r of open.slice(-8))
        out.push(
          `${r.id} ${r.kind} ${r.status} ${r.outcome ?? ''} ${r.reason ?? ''} check: ${sys.checkRun(r.id)?.output.title ?? '-'}`,
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
