import { join, resolve } from 'node:path';
import * as core from '@actions/core';
import { z } from 'zod';
import { type Suite, TOPOLOGIES, type Topology } from '../../../core/model.ts';
import { EXECUTOR_NAMES, type ExecutorName } from '../../../core/protocol/agent.ts';

/**
 * Validated inputs and runner environment of the spark-test action: the only module that reads
 * action inputs or `process.env` (actions/checkout input-helper style).
 */
export interface SparkTestSettings {
  reservationId: string;
  headSha: string;
  topology: Topology;
  suite: Suite;
  /**
   * The spec's lane: `spark-test` (smoke, 30-minute target) or `spark-test-long` (performance:
   * correctness, then performance, 60-minute target). A target, not a limit: the action records
   * a run over it and never stops it.
   */
  lane: {
    name: 'spark-test' | 'spark-test-long';
    targetMinutes: number;
  };
  /** Absolute path of the checkout. */
  repoDir: string;
  /** The script, relative to the checkout as given (for messages) and absolute. */
  script: { given: string; abs: string };
  /** Declared distributed assertion (pair), relative as given and absolute; null when none. */
  distributedAssertion: { given: string; abs: string } | null;
  logTailLines: number;
  lease: {
    controllerUrl: string;
    hostId: string;
    fencingToken: number;
    jobToken: string;
  };
  workDir: string;
  modelCache: string;
  /**
   * Where the lane's results go (the script's bench JSON and lane record, the full log, the
   * receipt): SPARK_RESULTS_DIR, else `<work dir>/spark-results`. The workflow uploads it.
   */
  resultsDir: string;
  github: { repo: string | undefined; runUrl: string | undefined };
  /** Environment for the test script: the runner's minus the lease credentials. */
  childEnv: Record<string, string | undefined>;
  /** The backend that runs this job (`SPARK_EXECUTOR`), or null when the agent did not say. */
  executor: ExecutorName | null;
}

const sha = z
  .string()
  .transform((s) => s.trim().toLowerCase())
  .pipe(z.string().regex(/^[0-9a-f]{40}$/, 'head_sha must be the full 40-character admitted commit SHA'));

const Inputs = z.object({
  reservationId: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'reservation_id must look like "r-12"'),
  headSha: sha,
  topology: z.enum(TOPOLOGIES, { message: 'topology must be "single" or "pair"' }),
  suite: z.enum(['smoke', 'performance'], { message: 'suite must be "smoke" or "performance"' }),
  script: z.string().min(1),
  logTailLines: z.coerce.number().int().min(0).max(50, 'log_tail_lines is at most 50'),
  timeTargetMinutes: z
    .string()
    .regex(/^(\d+(\.\d+)?)?$/, 'time_target_minutes must be a number of minutes')
    .transform((v) => (v === '' ? null : Number(v)))
    .refine(
      (v) => v == null || (v > 0 && v <= 24 * 60),
      'time_target_minutes must be above 0 and at most 1440',
    ),
});

/** The spec's lane time targets (docs/in-job.md "The lanes"): targets, never limits. */
export const LANE_TARGET_MINUTES = { 'spark-test': 30, 'spark-test-long': 60 } as const;

const RunnerEnv = z.object({
  SPARK_CONTROLLER_URL: z.url({ message: 'SPARK_CONTROLLER_URL must be an http(s) URL' }),
  SPARK_RESERVATION_ID: z.string().min(1),
  SPARK_HOST_ID: z.string().min(1),
  SPARK_FENCING_TOKEN: z.string().regex(/^[1-9]\d*$/, 'SPARK_FENCING_TOKEN must be a positive integer'),
  SPARK_LEASE_TOKEN: z.string().min(16),
  SPARK_TOPOLOGY: z.enum(TOPOLOGIES),
  SPARK_WORK_DIR: z.string().min(1),
  SPARK_MODEL_CACHE: z.string().min(1),
  SPARK_RESULTS_DIR: z.string().startsWith('/', 'SPARK_RESULTS_DIR must be an absolute path').optional(),
  /** The agent's executor; older agents do not set it. */
  SPARK_EXECUTOR: z.enum(EXECUTOR_NAMES).optional(),
});

export function getInputs(): SparkTestSettings {
  const inputs = Inputs.safeParse({
    reservationId: core.getInput('reservation_id', { required: true }),
    headSha: core.getInput('head_sha', { required: true }),
    topology: core.getInput('topology', { required: true }),
    suite: core.getInput('suite', { required: true }),
    script: core.getInput('script') || 'scripts/ci/spark-test.sh',
    logTailLines: core.getInput('log_tail_lines') || '40',
    timeTargetMinutes: core.getInput('time_target_minutes').trim(),
  });
  if (!inputs.success) {
    throw new Error(`invalid input: ${inputs.error.issues.map((i) => i.message).join('; ')}`);
  }
  const env = process.env;
  const runner = RunnerEnv.safeParse(env);
  if (!runner.success) {
    const what = runner.error.issues.map((i) =>
      i.input === undefined ? `${i.path.join('.')} is not set` : `${i.path.join('.')}: ${i.message}`,
    );
    throw new Error(
      `this runner has no Spark lease: ${what.join('; ')} (the Spark agent sets these for the runners it starts)`,
    );
  }
  const i = inputs.data;
  const e = runner.data;
  if (e.SPARK_RESERVATION_ID !== i.reservationId) {
    throw new Error(
      `this runner was started for reservation ${e.SPARK_RESERVATION_ID}, not ${i.reservationId}`,
    );
  }
  if (e.SPARK_TOPOLOGY !== i.topology) {
    throw new Error(`topology input is ${i.topology} but this runner was admitted for ${e.SPARK_TOPOLOGY}`);
  }
  const workspace = resolve(env.GITHUB_WORKSPACE ?? process.cwd());
  const repoDir = resolve(workspace, core.getInput('path') || '.');
  const assertion = core.getInput('distributed_assertion') || env.SPARK_DISTRIBUTED_ASSERTION || '';
  const runUrl =
    env.GITHUB_SERVER_URL && env.GITHUB_REPOSITORY && env.GITHUB_RUN_ID
      ? `${env.GITHUB_SERVER_URL}/${env.GITHUB_REPOSITORY}/actions/runs/${env.GITHUB_RUN_ID}${
          env.GITHUB_RUN_ATTEMPT ? `/attempts/${env.GITHUB_RUN_ATTEMPT}` : ''
        }`
      : undefined;
  const { SPARK_LEASE_TOKEN: _t, SPARK_FENCING_TOKEN: _f, ...childEnv } = env;
  const laneName = i.suite === 'performance' ? 'spark-test-long' : 'spark-test';
  return {
    reservationId: i.reservationId,
    headSha: i.headSha,
    topology: i.topology,
    suite: i.suite,
    lane: { name: laneName, targetMinutes: i.timeTargetMinutes ?? LANE_TARGET_MINUTES[laneName] },
    repoDir,
    script: { given: i.script, abs: resolve(repoDir, i.script) },
    distributedAssertion: assertion ? { given: assertion, abs: resolve(repoDir, assertion) } : null,
    logTailLines: i.logTailLines,
    lease: {
      controllerUrl: e.SPARK_CONTROLLER_URL,
      hostId: e.SPARK_HOST_ID,
      fencingToken: Number(e.SPARK_FENCING_TOKEN),
      jobToken: e.SPARK_LEASE_TOKEN,
    },
    workDir: e.SPARK_WORK_DIR,
    modelCache: e.SPARK_MODEL_CACHE,
    resultsDir: e.SPARK_RESULTS_DIR ?? join(e.SPARK_WORK_DIR, 'spark-results'),
    executor: e.SPARK_EXECUTOR ?? null,
    github: { repo: env.GITHUB_REPOSITORY, runUrl },
    childEnv,
  };
}
