import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { eq } from 'drizzle-orm';
import type { SparkConfigInput } from '../../core/config.ts';
import type { Suite, Topology } from '../../core/model.ts';
import { generateToken, sha256Hex } from '../../functions/auth/tokens.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { adoptAll } from '../../scripts/sim/ledger.ts';
import { startTestController } from '../helpers/controller.ts';

export const HEAD_SHA = '7fc2a91d3c4b5a69788766554433221100ffeedd';

export interface GrantedLease {
  hostId: string;
  fencingToken: number;
  leaseId: string;
  /** Plaintext per-lease job token (what the agent hands the runner as SPARK_LEASE_TOKEN). */
  jobToken: string;
  lend: boolean;
}

export type LeaseFixture = Awaited<ReturnType<typeof startWithGrantedLease>>;

/**
 * A real controller (loopback port, libSQL file) holding one granted reservation. Hosts are adopted
 * and heartbeat through the real ledger; the admission pass grants the lease. In production the
 * agent API issues the job token when it hands over the JIT config; here the test sets
 * leases.job_token_hash itself, since that is the agent part's job.
 */
export async function startWithGrantedLease(
  opts: { topology?: Topology; suite?: Suite; headSha?: string; config?: SparkConfigInput } = {},
) {
  const controller = await startTestController({ config: opts.config ?? {} });
  const { ledger } = controller;
  await adoptAll(ledger);
  const reservation = await ledger.createReservation(
    {
      kind: 'manual',
      topology: opts.topology ?? 'single',
      repo: 'acme/butter',
      pr: 7,
      headSha: opts.headSha ?? HEAD_SHA,
      suite: opts.suite ?? 'smoke',
      requester: 'octocat',
    },
    'test',
  );
  await controller.loop.runNow();
  const rows = await ledger.leasesOf(undefined, reservation.id);
  if (rows.length === 0) throw new Error(`admission did not grant ${reservation.id}`);
  const leases: GrantedLease[] = [];
  for (const row of rows) {
    const jobToken = generateToken('spk_job');
    const jobTokenHash = await sha256Hex(jobToken);
    await ledger.write(async (tx) => {
      await tx.update(t.leases).set({ jobTokenHash }).where(eq(t.leases.id, row.id));
    });
    leases.push({
      hostId: row.hostId,
      fencingToken: row.fencingToken,
      leaseId: row.id,
      jobToken,
      lend: row.lend,
    });
  }
  const reservationRow = async (): Promise<ReservationRow> =>
    (await ledger.getReservation(undefined, reservation.id))!;
  const eventCount = async (): Promise<number> => (await ledger.db.select().from(t.events)).length;
  return { controller, ledger, reservation, leases, reservationRow, eventCount };
}

/** The environment the agent gives a runner it starts for `lease` (cross-part contract step 3). */
export function runnerEnv(
  f: LeaseFixture,
  lease: GrantedLease,
  dirs: { workDir: string; modelCache: string },
): Record<string, string> {
  return {
    SPARK_CONTROLLER_URL: f.controller.url,
    SPARK_RESERVATION_ID: f.reservation.id,
    SPARK_HOST_ID: lease.hostId,
    SPARK_FENCING_TOKEN: String(lease.fencingToken),
    SPARK_LEASE_TOKEN: lease.jobToken,
    SPARK_TOPOLOGY: f.reservation.topology,
    SPARK_WORK_DIR: dirs.workDir,
    SPARK_MODEL_CACHE: dirs.modelCache,
    // as an agent with executor dstack sets it
    SPARK_EXECUTOR: 'dstack',
  };
}

export interface ActionRun {
  code: number | null;
  /** stdout + stderr, in order of arrival per stream. */
  output: string;
  outputs: Record<string, string>;
  summary: string;
}

/** Parses a GITHUB_OUTPUT file (`name<<delimiter` heredoc blocks, as @actions/core writes them). */
export function parseGithubOutput(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = /^([^<=]+)<<(.+)$/.exec(lines[i]!);
    if (m) {
      const value: string[] = [];
      for (i++; i < lines.length && lines[i] !== m[2]; i++) value.push(lines[i]!);
      out[m[1]!] = value.join('\n');
    } else if (lines[i]!.includes('=')) {
      const [k, ...v] = lines[i]!.split('=');
      out[k!] = v.join('=');
    }
  }
  return out;
}

/**
 * Runs an action's bundled entry exactly as its composite step does (`node dist/index.mjs` with
 * INPUT_* and GITHUB_* variables and fresh GITHUB_OUTPUT / GITHUB_STEP_SUMMARY files).
 */
export function runAction(
  action: 'commit-binding' | 'lease-preflight' | 'spark-test',
  opts: {
    inputs: Record<string, string>;
    env: Record<string, string>;
    workspace: string;
    tmp: string;
    /** Called with the action process once it runs (e.g. to signal it like a cancelled job). */
    onStart?: (child: ChildProcess) => void;
  },
): Promise<ActionRun> {
  const runnerTemp = mkdtempSync(join(opts.tmp, 'runner-temp-'));
  const outputFile = join(runnerTemp, 'github_output');
  const summaryFile = join(runnerTemp, 'step_summary');
  writeFileSync(outputFile, '');
  writeFileSync(summaryFile, '');
  const env: Record<string, string> = {
    GITHUB_ACTIONS: 'true',
    GITHUB_WORKSPACE: opts.workspace,
    GITHUB_REPOSITORY: 'acme/butter',
    GITHUB_SERVER_URL: 'https://github.com',
    GITHUB_RUN_ID: '4242',
    GITHUB_RUN_ATTEMPT: '1',
    GITHUB_ACTION_PATH: join(repoRoot, 'actions', action),
    GITHUB_OUTPUT: outputFile,
    GITHUB_STEP_SUMMARY: summaryFile,
    RUNNER_TEMP: runnerTemp,
    HOME: opts.tmp,
    ...opts.env,
  };
  for (const [k, v] of Object.entries(opts.inputs)) env[`INPUT_${k.toUpperCase()}`] = v;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot, 'actions', action, 'dist', 'index.mjs')], {
      cwd: opts.workspace,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    opts.onStart?.(child);
    let output = '';
    child.stdout.on('data', (d) => {
      output += d;
    });
    child.stderr.on('data', (d) => {
      output += d;
    });
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({
        code,
        output,
        outputs: parseGithubOutput(readFileSync(outputFile, 'utf8')),
        summary: readFileSync(summaryFile, 'utf8'),
      }),
    );
  });
}

export const repoRoot = join(import.meta.dirname, '..', '..');

/** A git repository with `files` committed; returns its HEAD SHA. */
export function gitRepo(dir: string, files: Record<string, string>): string {
  mkdirSync(dir, { recursive: true });
  const git = (...args: string[]) =>
    execFileSync('git', args, {
      cwd: dir,
      encoding: 'utf8',
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: 'Test',
        GIT_AUTHOR_EMAIL: 'test@example.invalid',
        GIT_COMMITTER_NAME: 'Test',
        GIT_COMMITTER_EMAIL: 'test@example.invalid',
      },
    }).trim();
  git('init', '-q', '-b', 'main');
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), content);
    if (path.endsWith('.sh')) chmodSync(join(dir, path), 0o755);
  }
  git('add', '-A');
  git('commit', '-q', '-m', 'test commit');
  return git('rev-parse', 'HEAD');
}

/** Writes an executable `#!/bin/sh` script. */
export function shellScript(path: string, body: string): string {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}
