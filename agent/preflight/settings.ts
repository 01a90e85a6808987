import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { EXIT, ExitError } from '../../core/errors.ts';
import { TOPOLOGIES } from '../../core/model.ts';
import { besideVenv, type DoctorOptions, type ModelCacheAccess } from './doctor.ts';
import { type ProvisioningSpec, readProvisioningSpec } from './provisioning.ts';
import type { LeaseCredentials } from './verify-lease.ts';

/**
 * The boundary of `spark-runner-preflight` and `npm run doctor`: the only module that reads argv
 * and the environment; everything is validated here and handed on as typed settings.
 */

/** A user-fixable problem with how the command was started (exit code 2, one-line cause). */
export class UsageError extends ExitError {
  override name = 'UsageError';
  constructor(message: string) {
    super(EXIT.usage, message);
  }
}

type Env = Record<string, string | undefined>;

const list = (v: string | undefined): string[] =>
  (v ?? '')
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);

const moduleName = /^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/;
function modules(v: string | undefined, flag: string): string[] {
  const names = list(v);
  const bad = names.filter((n) => !moduleName.test(n));
  if (bad.length) throw new UsageError(`${flag}: not a Python module name: ${bad.join(', ')}`);
  return names;
}

function spec(path: string | undefined): ProvisioningSpec | null {
  if (path == null) return null;
  try {
    return readProvisioningSpec(resolve(path));
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

function torchMode(v: string | undefined, fallback: 'required' | 'skip'): 'required' | 'skip' {
  if (v == null) return fallback;
  if (v === 'required' || v === 'skip') return v;
  throw new UsageError(`--torch must be "required" or "skip", got "${v}"`);
}

function cacheAccess(v: string | undefined): ModelCacheAccess {
  if (v == null || v === 'writable') return 'writable';
  if (v === 'read-only') return 'read-only';
  throw new UsageError(`--model-cache-access must be "writable" or "read-only", got "${v}"`);
}

/**
 * What a job's preflight requires by default: what the shipped lanes use. Butter and Iron build
 * Rust CUDA workspaces (docs/in-job.md "Templates"), so cargo, rustc, nvcc and a C++ toolchain,
 * and no torch: a lane that uses torch says so (`--torch required`, the lease-preflight input
 * `torch: required`), and names its own tools.
 */
export const LANE_DEFAULT_TOOLS = ['cargo', 'rustc', 'nvcc', 'c++'] as const;

/** Environment the lease credentials come from (set by the Spark agent for the runner it starts). */
const RunnerEnvSchema = z.object({
  SPARK_CONTROLLER_URL: z.url({ message: 'SPARK_CONTROLLER_URL must be an http(s) URL' }),
  SPARK_RESERVATION_ID: z.string().min(1),
  SPARK_HOST_ID: z.string().min(1),
  SPARK_FENCING_TOKEN: z.string().regex(/^[1-9]\d*$/, 'SPARK_FENCING_TOKEN must be a positive integer'),
  SPARK_LEASE_TOKEN: z.string().min(16, 'SPARK_LEASE_TOKEN is too short to be a job token'),
  SPARK_TOPOLOGY: z.enum(TOPOLOGIES),
  SPARK_WORK_DIR: z.string().min(1),
  SPARK_MODEL_CACHE: z.string().min(1),
  SPARK_HOME_SERVICE: z.string().min(1).optional(),
  SPARK_SERVICE_HEALTH_URL: z.url().optional(),
  SPARK_INTERCONNECT_CHECK: z.string().min(1).optional(),
});

export interface PreflightSettings {
  reservationId: string;
  cred: LeaseCredentials;
  workDir: string;
  modelCache: string;
  homeService: string | null;
  healthUrl: string | null;
  interconnectCheck: string | null;
  minFreeGb: number;
  doctor: Pick<
    DoctorOptions,
    'imports' | 'softImports' | 'torch' | 'tools' | 'spec' | 'provisionedManifestPath' | 'modelCacheAccess'
  >;
  manifestPath: string;
  sourceDir: string;
  /** Environment for child processes: the runner's, without the lease credentials. */
  childEnv: Env;
}

export const PREFLIGHT_USAGE = `usage: spark-runner-preflight <reservation_id> [--min-free-gb N] [--imports a,b] [--soft-imports c]
       [--torch required|skip (default skip)] [--tools cargo,rustc,nvcc,c++ (default)] [--manifest FILE] [--source-dir DIR]
       [--interconnect-check CMD] [--spec PROVISIONING-SPEC.json]
       spark-runner-preflight doctor [doctor options]   (the provisioning doctor, no lease)
Lease credentials come from the environment the Spark agent gives the runner (SPARK_*).`;

/** Reads and validates the preflight command line and runner environment. */
export function readPreflightSettings(argv: readonly string[], env: Env): PreflightSettings {
  const { values, positionals } = parse(argv, {
    'min-free-gb': { type: 'string' },
    imports: { type: 'string' },
    'soft-imports': { type: 'string' },
    torch: { type: 'string' },
    tools: { type: 'string' },
    manifest: { type: 'string' },
    'source-dir': { type: 'string' },
    'interconnect-check': { type: 'string' },
    spec: { type: 'string' },
  });
  if (positionals.length !== 1)
    throw new UsageError(`expected exactly one reservation id\n${PREFLIGHT_USAGE}`);
  const reservationId = positionals[0]!;
  const parsed = RunnerEnvSchema.safeParse(env);
  if (!parsed.success) {
    const what = parsed.error.issues.map((i) =>
      i.input === undefined ? `${i.path.join('.')} is not set` : `${i.path.join('.')}: ${i.message}`,
    );
    throw new UsageError(
      `the runner environment lacks its lease: ${what.join('; ')} (the Spark agent sets these for the runners it starts; a runner without them is not an admitted Spark runner)`,
    );
  }
  const e = parsed.data;
  if (e.SPARK_RESERVATION_ID !== reservationId) {
    throw new UsageError(
      `this runner was started for reservation ${e.SPARK_RESERVATION_ID}, not ${reservationId}: refusing`,
    );
  }
  const minFreeGb = Number(values['min-free-gb'] ?? '50');
  if (!Number.isFinite(minFreeGb) || minFreeGb < 0) {
    throw new UsageError(`--min-free-gb must be a non-negative number, got "${values['min-free-gb']}"`);
  }
  const workspace = env.GITHUB_WORKSPACE;
  const sourceDir = resolve(values['source-dir'] ?? workspace ?? process.cwd());
  const { SPARK_LEASE_TOKEN: _token, SPARK_FENCING_TOKEN: _fencing, ...childEnv } = env;
  return {
    reservationId,
    cred: {
      controllerUrl: e.SPARK_CONTROLLER_URL,
      reservationId,
      hostId: e.SPARK_HOST_ID,
      fencingToken: Number(e.SPARK_FENCING_TOKEN),
      jobToken: e.SPARK_LEASE_TOKEN,
      topology: e.SPARK_TOPOLOGY,
    },
    workDir: e.SPARK_WORK_DIR,
    modelCache: e.SPARK_MODEL_CACHE,
    homeService: e.SPARK_HOME_SERVICE ?? null,
    healthUrl: e.SPARK_SERVICE_HEALTH_URL ?? null,
    interconnectCheck: values['interconnect-check'] ?? e.SPARK_INTERCONNECT_CHECK ?? null,
    minFreeGb,
    doctor: {
      imports: modules(values.imports, '--imports'),
      softImports: modules(values['soft-imports'], '--soft-imports'),
      torch: torchMode(values.torch, 'skip'),
      tools: values.tools != null ? list(values.tools) : [...LANE_DEFAULT_TOOLS],
      // the job is a PR worker: the managed model cache must be read-only to it
      modelCacheAccess: 'read-only',
      ...provisioned(spec(values.spec)),
    },
    manifestPath: resolve(values.manifest ?? join(sourceDir, 'PROVISIONING-MANIFEST.json')),
    sourceDir,
    childEnv,
  };
}

/** In a job: hold the venv against the spec and against what was provisioned beside it. */
function provisioned(s: ProvisioningSpec | null): Pick<DoctorOptions, 'spec' | 'provisionedManifestPath'> {
  return s ? { spec: s, provisionedManifestPath: besideVenv(s.venv) } : {};
}

export const DOCTOR_USAGE = `usage: npm run doctor -- [--model-cache DIR] [--model-cache-access writable|read-only] [--imports a,b] [--soft-imports c] [--torch required|skip]
       [--tools ninja,nvcc,c++] [--manifest FILE] [--source-dir DIR] [--json]
       [--spec PROVISIONING-SPEC.json [--prewarm]]
With --spec the manifest is written beside the spec's venv unless --manifest says otherwise;
--prewarm first fills the model cache at the spec's pinned revision (no download when cached).`;

/** Options of the standalone doctor (operators; `sparkctl doctor` builds the same options). */
export function readDoctorSettings(
  argv: readonly string[],
  env: Env,
): { options: DoctorOptions; json: boolean } {
  const { values, flags, positionals } = parse(argv, {
    'model-cache': { type: 'string' },
    'model-cache-access': { type: 'string' },
    imports: { type: 'string' },
    'soft-imports': { type: 'string' },
    torch: { type: 'string' },
    tools: { type: 'string' },
    manifest: { type: 'string' },
    'source-dir': { type: 'string' },
    json: { type: 'boolean' },
    spec: { type: 'string' },
    prewarm: { type: 'boolean' },
  });
  if (positionals.length)
    throw new UsageError(`unexpected argument(s): ${positionals.join(' ')}\n${DOCTOR_USAGE}`);
  const s = spec(values.spec);
  if (flags.prewarm === true && !s?.model)
    throw new UsageError('--prewarm needs --spec with a "model" (id and pinned revision) to fetch');
  const access = cacheAccess(values['model-cache-access']);
  if (flags.prewarm === true && access === 'read-only')
    throw new UsageError('--prewarm fills the model cache: it needs --model-cache-access writable');
  const manifestPath = values.manifest ? resolve(values.manifest) : s ? besideVenv(s.venv) : null;
  return {
    json: flags.json === true,
    options: {
      env,
      modelCache: values['model-cache'] ?? env.SPARK_MODEL_CACHE ?? null,
      modelCacheAccess: access,
      imports: modules(values.imports, '--imports'),
      softImports: modules(values['soft-imports'], '--soft-imports'),
      torch: torchMode(values.torch, 'required'),
      ...(values.tools != null ? { tools: list(values.tools) } : {}),
      sourceDir: values['source-dir'] ? resolve(values['source-dir']) : null,
      hostId: env.SPARK_HOST_ID ?? null,
      manifestPath,
      spec: s,
      prewarm: flags.prewarm === true,
    },
  };
}

type Spec = Record<string, { type: 'string' | 'boolean' }>;

function parse(argv: readonly string[], options: Spec) {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options,
      allowPositionals: true,
      strict: true,
    });
    const raw = values as Record<string, string | boolean | undefined>;
    const str: Record<string, string | undefined> = {};
    for (const [k, v] of Object.entries(raw)) if (typeof v === 'string') str[k] = v;
    return { values: str, flags: raw, positionals };
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}
