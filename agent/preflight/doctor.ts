import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { type CheckResult, failed, fatalFailures, passed, softFailed } from './check.ts';
import { createProcessRunner, findOnPath, firstLine, type ProcessRunner } from './process.ts';
import {
  type CustomImport,
  checkAttentionBackend,
  checkCustomImports,
  checkPins,
  type ForcedPin,
  hfSnapshot,
  normalizeName,
  type ProvisioningSpec,
  parseFreeze,
  weightsPresent,
} from './provisioning.ts';
import { PREWARM_SCRIPT, type ProbeAnswer, PYTHON_PROBE, parseProbeOutput } from './python-probe.ts';

/**
 * The provisioning doctor (issue 5, from the runner bring-up lessons): the checks that cost real
 * runs when skipped, each a named line in seconds. Used by `spark-runner-preflight`, by
 * `npm run doctor` and by `sparkctl doctor`.
 */
export interface DoctorOptions {
  /** The environment child processes will see; PATH decides which `python`/`ninja`/`nvcc` resolve. */
  env: Record<string, string | undefined>;
  /** The managed model cache (SPARK_MODEL_CACHE); null fails the check. */
  modelCache: string | null;
  /**
   * How the model cache must look to whoever runs the doctor. `writable` (default): the operator,
   * who provisions and pre-warms it. `read-only`: a job (the in-job preflight) — PR code reads the
   * weights every later lease loads too, so it must not be able to change them, and a cache the
   * job can write is a finding (docs/in-job.md "Provisioning doctor").
   */
  modelCacheAccess?: ModelCacheAccess;
  /** Modules that must import (fatal), e.g. ["torch", "flash_attn"]. */
  imports?: readonly string[];
  /** Modules checked softly: a failure is a warning line, not a failed preflight. */
  softImports?: readonly string[];
  /** Whether torch must import with a CUDA (not `+cpu`) build and see a GPU. Default 'required'. */
  torch?: 'required' | 'skip';
  /** Tools that must resolve on PATH. Default ninja, nvcc, c++. */
  tools?: readonly string[];
  /** Distributions whose versions go into the manifest. */
  packages?: readonly string[];
  /** Checked-out source whose commit goes into the manifest (null: none). */
  sourceDir?: string | null;
  /** Host id for the manifest (SPARK_HOST_ID). */
  hostId?: string | null;
  /** Where to write PROVISIONING-MANIFEST.json; null writes nothing. */
  manifestPath?: string | null;
  /** Limit for the Python probe (imports can hang); tools get a tenth of it. Default 60 s. */
  timeoutMs?: number;
  /** The provisioning spec to hold the environment against (issue 14 items 7–10); null: none. */
  spec?: ProvisioningSpec | null;
  /** Fill the HF cache with the spec's model at its pinned revision first (offline-safe when present). */
  prewarm?: boolean;
  /**
   * The manifest written at provisioning time beside the venv: the live lock is compared with it
   * (a job must run on the environment that was provisioned). Null: no comparison.
   */
  provisionedManifestPath?: string | null;
  runner?: ProcessRunner;
  now?: () => Date;
}

export type ModelCacheAccess = 'writable' | 'read-only';

/** `PROVISIONING-MANIFEST.json` beside the venv (in the venv's parent directory). */
export const besideVenv = (venv: string) =>
  join(dirname(venv.replace(/\/+$/, '')), 'PROVISIONING-MANIFEST.json');

type Prewarm = { action: 'present' | 'downloaded'; at: string };

/** The provisioning section of the manifest (present when the doctor ran with a spec). */
export interface ProvisioningRecord {
  venv: string;
  /** The interpreter's sys.prefix as the probe saw it. */
  prefix: string | null;
  lock: { source: 'pip freeze' | 'importlib.metadata'; sha256: string; requirements: string[] } | null;
  pins: Record<string, { pinned: string; installed: string | null }>;
  servingBackend: { name: string; version: string | null } | null;
  forcedPins: ForcedPin[];
  model: {
    id: string;
    revision: string;
    resolvedRevision: string | null;
    trustRemoteCode: boolean;
    weightsPrewarmed: boolean;
    prewarm: Prewarm | null;
    customCode: { files: string[]; imports: CustomImport[] } | null;
  } | null;
  attention: { backend: string; capability: [number, number] | null } | null;
}

export const DEFAULT_TOOLS = ['ninja', 'nvcc', 'c++'] as const;
export const DEFAULT_PACKAGES = [
  'torch',
  'numpy',
  'triton',
  'transformers',
  'vllm',
  'safetensors',
  'ninja',
] as const;

/** What PROVISIONING-MANIFEST.json holds. Versions and facts only: no paths, no env values. */
export interface ProvisioningManifest {
  schema: 'spark-provisioning-manifest/1';
  generatedAt: string;
  hostId: string | null;
  sourceCommit: string | null;
  python: {
    version: string;
    implementation: string;
    bare: boolean;
    inVenv: boolean;
    externallyManaged: boolean;
  } | null;
  torch: { version: string; cuda: string | null; cudaAvailable: boolean; device: string | null } | null;
  packages: Record<string, string | null>;
  tools: Record<string, string | null>;
  ok: boolean;
  checks: CheckResult[];
  provisioning?: ProvisioningRecord;
  /** Extra sections a caller adds (the preflight adds the verified lease). */
  [extra: string]: unknown;
}

export interface DoctorReport {
  ok: boolean;
  checks: CheckResult[];
  manifest: ProvisioningManifest;
  durationMs: number;
}

/**
 * Runs every doctor check (they run concurrently) and optionally writes the manifest.
 *
 * The job's Python runs with `-I` (isolated: no PYTHONPATH, no user site, no script directory on
 * sys.path) from an empty directory of its own, so files of the PR under test can neither shadow
 * a module the probe imports nor forge what goes into the manifest (issue 11 item 11).
 */
export async function runDoctor(opts: DoctorOptions): Promise<DoctorReport> {
  const neutral = mkdtempSync(join(tmpdir(), 'spark-doctor-'));
  try {
    return await doctorIn(neutral, opts);
  } finally {
    rmSync(neutral, { recursive: true, force: true });
  }
}

async function doctorIn(neutral: string, opts: DoctorOptions): Promise<DoctorReport> {
  const started = Date.now();
  const runner = opts.runner ?? createProcessRunner();
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const toolTimeout = Math.max(2_000, Math.floor(timeoutMs / 10));
  const wantTorch = (opts.torch ?? 'required') === 'required';
  const imports = [...(opts.imports ?? [])];
  const softImports = [...(opts.softImports ?? [])];
  const tools = [...(opts.tools ?? DEFAULT_TOOLS)];
  const spec = opts.spec ?? null;
  const PATH = opts.env.PATH;
  const now = () => opts.now?.() ?? new Date();

  const bare = findOnPath('python', PATH);
  const interpreter = bare ?? findOnPath('python3', PATH);
  const checks: CheckResult[] = [];

  // the model first: a pre-warm fills the cache the later checks read
  const hfHome = opts.modelCache ? join(opts.modelCache, 'huggingface') : null;
  let prewarmed: Prewarm | null = null;
  if (spec?.model && opts.prewarm) {
    const r = await prewarmModel(runner, interpreter, spec.model, hfHome, opts.env, neutral, timeoutMs);
    checks.push(r.check);
    if (r.action) prewarmed = { action: r.action, at: now().toISOString() };
  }
  const snapshot = spec?.model && hfHome ? hfSnapshot(hfHome, spec.model.id, spec.model.revision) : null;

  const pythonRun = (args: string[], timeout: number) =>
    runner.run(interpreter!, ['-I', ...args], { env: opts.env, cwd: neutral, timeoutMs: timeout });
  const probe = interpreter
    ? pythonRun(
        [
          '-c',
          PYTHON_PROBE,
          JSON.stringify({
            torch: wantTorch || spec?.attentionBackend != null,
            imports: [...imports, ...softImports],
            packages: [
              ...new Set([...(opts.packages ?? DEFAULT_PACKAGES), ...Object.keys(spec?.pins ?? {})]),
            ],
            freeze: spec != null,
            customCodeDir: spec?.model?.trustRemoteCode && snapshot ? snapshot : null,
          }),
        ],
        timeoutMs,
      )
    : Promise.resolve(null);
  // the lock as pip itself prints it when the venv has pip; the probe's listing otherwise
  const pipFreeze =
    interpreter && spec
      ? pythonRun(['-m', 'pip', 'freeze', '--all', '--disable-pip-version-check'], timeoutMs)
      : Promise.resolve(null);
  const toolVersions = Promise.all(
    tools.map(async (tool): Promise<[string, string | null, string | null]> => {
      const path = findOnPath(tool, PATH);
      if (!path) return [tool, null, null];
      const r = await runner.run(path, ['--version'], { env: opts.env, timeoutMs: toolTimeout });
      const text = `${r.stdout}\n${r.stderr}`;
      // nvcc prints its release on the last line; the others on the first
      const line =
        tool === 'nvcc'
          ? (text
              .split('\n')
              .reverse()
              .find((l) => /release/i.test(l))
              ?.trim() ?? firstLine(text))
          : firstLine(text);
      return [tool, path, line || 'version unknown'];
    }),
  );
  const commit = opts.sourceDir ? readCommit(runner, opts.sourceDir, opts.env, toolTimeout) : null;

  checks.push(
    bare
      ? passed('python', 'bare `python` resolves on PATH')
      : failed(
          'python',
          interpreter
            ? 'no bare `python` on PATH, only `python3`: build scripts that call `python` will fail; activate the venv (its bin/ has `python`) or install python-is-python3'
            : 'no `python` (nor `python3`) on PATH: put the runner venv bin/ first on PATH',
        ),
  );

  const probeResult = await probe;
  let answer: ProbeAnswer | null = null;
  if (probeResult) {
    answer = parseProbeOutput(probeResult.stdout);
    if (!answer) {
      const why = probeResult.timedOut
        ? `did not finish within ${Math.round(timeoutMs / 1000)} s (an import hangs?)`
        : probeResult.spawnError
          ? `could not start (${probeResult.spawnError})`
          : `exited ${probeResult.code ?? probeResult.signal}: ${lastLine(probeResult.stderr) || 'no output'}`;
      checks.push(failed('python-probe', `the interpreter probe ${why}`));
    }
  }
  if (answer) {
    checks.push(
      answer.externallyManaged
        ? failed(
            'pep668',
            `python ${answer.version} is a system interpreter marked EXTERNALLY-MANAGED (PEP 668), not a venv: pip installs will be refused; create a venv (python3 -m venv) and put its bin/ first on the runner PATH`,
          )
        : passed('pep668', answer.inVenv ? 'running in a venv' : 'interpreter is not externally managed'),
    );
    if (wantTorch) checks.push(...torchChecks(answer));
    for (const name of imports) checks.push(importCheck(answer, name, true));
    for (const name of softImports) checks.push(importCheck(answer, name, false));
  } else if (!probeResult) {
    checks.push(failed('python-probe', 'not run: no python interpreter on PATH'));
  }

  const versions = await toolVersions;
  for (const [tool, path] of versions) {
    checks.push(
      path
        ? passed(`tool:${tool}`, 'resolves on PATH')
        : failed(
            `tool:${tool}`,
            `\`${tool}\` does not resolve on the PATH child processes see; install it or add its directory to the runner PATH`,
          ),
    );
  }
  checks.push(checkModelCache(opts.modelCache, opts.modelCacheAccess ?? 'writable'));

  let provisioning: ProvisioningRecord | undefined;
  if (spec) {
    const freeze = await pipFreeze;
    const lockLines =
      freeze && freeze.code === 0
        ? {
            source: 'pip freeze' as const,
            lines: freeze.stdout
              .split('\n')
              .map((l) => l.trim())
              .filter(Boolean),
          }
        : answer?.freeze
          ? { source: 'importlib.metadata' as const, lines: answer.freeze }
          : null;
    provisioning = provisioningChecks(checks, spec, answer, lockLines, snapshot, prewarmed, opts);
  }

  const sourceCommit = commit ? await commit : null;
  const manifest: ProvisioningManifest = {
    schema: 'spark-provisioning-manifest/1',
    generatedAt: now().toISOString(),
    hostId: opts.hostId ?? null,
    sourceCommit,
    python: answer
      ? {
          version: answer.version,
          implementation: answer.implementation,
          bare: bare != null,
          inVenv: answer.inVenv,
          externallyManaged: answer.externallyManaged,
        }
      : null,
    torch: answer?.torch && 'version' in answer.torch ? answer.torch : null,
    packages: answer?.packages ?? {},
    tools: Object.fromEntries(versions.map(([tool, , line]) => [tool, line])),
    ok: fatalFailures(checks).length === 0,
    checks,
    ...(provisioning ? { provisioning } : {}),
  };
  if (opts.manifestPath) writeManifest(opts.manifestPath, manifest);
  return { ok: manifest.ok, checks, manifest, durationMs: Date.now() - started };
}

/** Writes the manifest (pretty JSON, trailing newline). */
export function writeManifest(path: string, manifest: ProvisioningManifest): void {
  writeFileSync(path, `${JSON.stringify(manifest, null, 2)}\n`);
}

/**
 * The spec's checks (items 7–10): the interpreter is the provisioned venv, the lock holds the
 * exact pins, guidelines are followed or the forcing is declared, the model is cached at its
 * pinned revision with its weights, its remote code's imports resolve, the attention backend fits
 * the GPU, and the lock has not drifted since provisioning.
 */
function provisioningChecks(
  checks: CheckResult[],
  spec: ProvisioningSpec,
  answer: ProbeAnswer | null,
  lock: { source: 'pip freeze' | 'importlib.metadata'; lines: string[] } | null,
  snapshot: string | null,
  prewarmed: Prewarm | null,
  opts: DoctorOptions,
): ProvisioningRecord {
  const venv = spec.venv.replace(/\/+$/, '');
  if (answer) {
    checks.push(
      answer.prefix.replace(/\/+$/, '') === venv
        ? passed('venv', `python runs in the provisioned venv ${venv}`)
        : failed(
            'venv',
            `the python on PATH runs in ${answer.prefix}, not the provisioned venv ${venv}: put ${venv}/bin first on the runner PATH`,
          ),
    );
  }
  const installed = lock ? parseFreeze(lock.lines) : new Map<string, string>();
  if (!lock)
    checks.push(
      failed(
        'lock',
        'could not list the installed distributions (neither pip freeze nor importlib.metadata answered)',
      ),
    );
  const pins = checkPins(spec, installed);
  if (lock) checks.push(...pins.checks);
  const provisioned = opts.provisionedManifestPath ? readProvisionedLock(opts.provisionedManifestPath) : null;
  if (opts.provisionedManifestPath && lock) {
    if (!provisioned) {
      checks.push(
        failed(
          'provisioned',
          `no provisioning manifest at ${opts.provisionedManifestPath}: provision the venv first (doctor --spec … writes it beside the venv)`,
        ),
      );
    } else {
      const drift = lockDrift(provisioned, installed);
      checks.push(
        drift.length === 0
          ? passed('provisioned', 'the venv holds exactly what was provisioned')
          : failed(
              'provisioned',
              `the venv changed since it was provisioned: ${drift.slice(0, 8).join(', ')}${drift.length > 8 ? ` and ${drift.length - 8} more` : ''}`,
            ),
      );
    }
  }

  let model: ProvisioningRecord['model'] = null;
  if (spec.model) {
    const m = spec.model;
    const weights = snapshot ? weightsPresent(snapshot) : false;
    checks.push(
      snapshot
        ? passed('model', `${m.id} is cached at ${m.revision.slice(0, 12)}`)
        : failed(
            'model',
            `${m.id} at revision ${m.revision} is not in the managed model cache${opts.modelCache ? '' : ' (no SPARK_MODEL_CACHE)'}: pre-warm it on the host (doctor --spec … --prewarm); jobs never download weights`,
          ),
    );
    if (snapshot)
      checks.push(
        weights
          ? passed('weights', 'every weight file of the snapshot is present')
          : failed(
              'weights',
              `the cached snapshot of ${m.id} lacks weight files (an interrupted download?): pre-warm again`,
            ),
      );
    let customCode: { files: string[]; imports: CustomImport[] } | null = null;
    if (m.trustRemoteCode && snapshot && answer?.customCode) {
      customCode = { files: answer.customCode.files, imports: answer.customCode.imports };
      for (const [file, why] of Object.entries(answer.customCode.errors))
        checks.push(failed(`custom-code:${file}`, `cannot read the model's remote code ${file}: ${why}`));
      checks.push(...checkCustomImports(customCode.imports, spec.stack, venv));
    }
    model = {
      id: m.id,
      revision: m.revision,
      resolvedRevision: snapshot ? basename(snapshot) : null,
      trustRemoteCode: m.trustRemoteCode,
      weightsPrewarmed: snapshot != null && weights,
      prewarm: prewarmed,
      customCode,
    };
  }

  let attention: ProvisioningRecord['attention'] = null;
  if (spec.attentionBackend) {
    const t = answer?.torch && 'version' in answer.torch ? answer.torch : null;
    const cap = (t?.capability ?? null) as [number, number] | null;
    checks.push(checkAttentionBackend(spec.attentionBackend, cap, t?.device ?? null));
    attention = { backend: spec.attentionBackend, capability: cap };
  }

  const requirements = lock?.lines ?? [];
  return {
    venv,
    prefix: answer?.prefix ?? null,
    lock: lock
      ? {
          source: lock.source,
          sha256: createHash('sha256')
            .update(`${requirements.join('\n')}\n`)
            .digest('hex'),
          requirements,
        }
      : null,
    pins: Object.fromEntries(
      Object.entries(spec.pins).map(([k, v]) => [
        k,
        { pinned: v, installed: installed.get(normalizeName(k)) ?? null },
      ]),
    ),
    servingBackend: spec.servingBackend
      ? { name: spec.servingBackend, version: installed.get(normalizeName(spec.servingBackend)) ?? null }
      : null,
    forcedPins: pins.forced,
    model,
    attention,
  };
}

function readProvisionedLock(path: string): Map<string, string> | null {
  if (!existsSync(path)) return null;
  try {
    const m = JSON.parse(readFileSync(path, 'utf8')) as {
      provisioning?: { lock?: { requirements?: string[] } };
    };
    const req = m.provisioning?.lock?.requirements;
    return Array.isArray(req) ? parseFreeze(req) : null;
  } catch {
    return null;
  }
}

function lockDrift(was: Map<string, string>, now: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [k, v] of was) {
    const n = now.get(k);
    if (n == null) out.push(`${k} ${v} removed`);
    else if (n !== v) out.push(`${k} ${v} → ${n}`);
  }
  for (const [k, v] of now) if (!was.has(k)) out.push(`${k} ${v} added`);
  return out;
}

/**
 * Pre-warm (item 10): when the snapshot and its weights are already cached nothing touches the
 * network (offline-safe); otherwise huggingface_hub downloads exactly the pinned revision into
 * the managed cache, unless the host is offline (HF_HUB_OFFLINE=1), which fails clearly.
 */
async function prewarmModel(
  runner: ProcessRunner,
  interpreter: string | null,
  model: NonNullable<ProvisioningSpec['model']>,
  hfHome: string | null,
  env: Record<string, string | undefined>,
  neutral: string,
  timeoutMs: number,
): Promise<{ check: CheckResult; action: 'present' | 'downloaded' | null }> {
  const name = 'prewarm';
  if (!hfHome)
    return {
      check: failed(name, 'no model cache configured (SPARK_MODEL_CACHE): nothing to pre-warm into'),
      action: null,
    };
  const cached = hfSnapshot(hfHome, model.id, model.revision);
  if (cached && weightsPresent(cached))
    return {
      check: passed(name, `${model.id}@${model.revision.slice(0, 12)} already cached; no download`),
      action: 'present',
    };
  if (env.HF_HUB_OFFLINE === '1')
    return {
      check: failed(
        name,
        `${model.id}@${model.revision} is not cached and HF_HUB_OFFLINE=1: pre-warm on a host with network access to the Hub`,
      ),
      action: null,
    };
  if (!interpreter)
    return { check: failed(name, 'no python on PATH to run huggingface_hub with'), action: null };
  const r = await runner.run(
    interpreter,
    ['-I', '-c', PREWARM_SCRIPT, JSON.stringify({ id: model.id, revision: model.revision })],
    // the download may take long; the cache location is the managed one, never the user's
    { env: { ...env, HF_HOME: hfHome }, cwd: neutral, timeoutMs: Math.max(timeoutMs, 6 * 3600_000) },
  );
  const got = hfSnapshot(hfHome, model.id, model.revision);
  if (r.code !== 0 || !got)
    return {
      check: failed(
        name,
        `downloading ${model.id}@${model.revision} failed: ${lastLine(r.stderr) || r.spawnError || `exit ${r.code}`}`,
      ),
      action: null,
    };
  return {
    check: passed(name, `${model.id}@${model.revision.slice(0, 12)} downloaded into the managed cache`),
    action: 'downloaded',
  };
}

function torchChecks(answer: ProbeAnswer): CheckResult[] {
  const t = answer.torch;
  if (!t) return [failed('torch', 'the probe returned no torch information')];
  if ('error' in t) return [failed('torch', `import torch failed: ${t.error}`)];
  const out: CheckResult[] = [passed('torch', `torch ${t.version} imports`)];
  out.push(
    /\+cpu\b/.test(t.version)
      ? failed(
          'torch-build',
          `torch ${t.version} is a CPU-only wheel (a serving wheel may have replaced the CUDA build); reinstall torch from the CUDA wheel index`,
        )
      : passed('torch-build', `torch ${t.version} is not a +cpu wheel`),
  );
  if (t.cuda == null) {
    out.push(failed('torch-cuda', `torch ${t.version} was built without CUDA (torch.version.cuda is None)`));
  } else if (!t.cudaAvailable) {
    out.push(
      failed(
        'torch-cuda',
        `torch ${t.version} (CUDA ${t.cuda}) sees no GPU: torch.cuda.is_available() is False (driver or CUDA_VISIBLE_DEVICES?)`,
      ),
    );
  } else {
    out.push(passed('torch-cuda', `CUDA ${t.cuda} available${t.device ? ` on ${t.device}` : ''}`));
  }
  return out;
}

function importCheck(answer: ProbeAnswer, name: string, fatal: boolean): CheckResult {
  const error = answer.imports[name];
  const label = `${fatal ? 'import' : 'soft-import'}:${name}`;
  if (error == null) return passed(label, 'imports');
  return fatal
    ? failed(label, `import ${name} failed: ${error}`)
    : softFailed(label, `import ${name} failed: ${error}`);
}

function checkModelCache(dir: string | null, access: ModelCacheAccess): CheckResult {
  const name = 'model-cache';
  if (!dir)
    return failed(name, 'no model cache configured (SPARK_MODEL_CACHE): models would be downloaded per run');
  try {
    if (!statSync(dir).isDirectory())
      return failed(name, 'model cache (SPARK_MODEL_CACHE) is not a directory');
    readdirSync(dir);
  } catch (e) {
    return failed(
      name,
      `model cache (SPARK_MODEL_CACHE) is not usable: ${(e as NodeJS.ErrnoException).code ?? e}`,
    );
  }
  // creating a file is the probe: it answers for this user and this mount, root and read-only
  // mounts included (access(2) and mode bits do not)
  const probe = join(dir, `.spark-doctor-${process.pid}-${randomBytes(4).toString('hex')}`);
  let writable: boolean;
  let why = '';
  try {
    closeSync(openSync(probe, 'wx'));
    unlinkSync(probe);
    writable = true;
  } catch (e) {
    writable = false;
    why = String((e as NodeJS.ErrnoException).code ?? e);
  }
  if (access === 'read-only')
    return writable
      ? failed(
          name,
          'model cache (SPARK_MODEL_CACHE) is writable by this job: PR code could change the weights every later lease loads; give the runner user a read-only view of it (a read-only bind mount, or an owner and mode it cannot write)',
        )
      : passed(name, `model cache is read-only to this job (${why}), as a PR worker must see it`);
  return writable
    ? passed(name, 'model cache is writable')
    : failed(
        name,
        `model cache (SPARK_MODEL_CACHE) is not writable (${why}): fix its owner/permissions for the user who provisions it`,
      );
}

async function readCommit(
  runner: ProcessRunner,
  dir: string,
  env: Record<string, string | undefined>,
  timeoutMs: number,
): Promise<string | null> {
  const r = await runner.run('git', ['-C', dir, 'rev-parse', 'HEAD'], { env, timeoutMs });
  const sha = r.stdout.trim();
  return r.code === 0 && /^[0-9a-f]{40}$/.test(sha) ? sha : null;
}

function lastLine(text: string): string {
  const lines = text.split(/\r?\n/).filter((l) => l.trim());
  return (lines[lines.length - 1] ?? '').trim().slice(0, 200);
}
