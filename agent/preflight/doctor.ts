import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CheckResult, failed, fatalFailures, passed } from './check.ts';
import { DEFAULT_PACKAGES, DEFAULT_TOOLS, type DoctorOptions } from './doctor-options.ts';
import { checkModelCache } from './model-cache-check.ts';
import { prewarmModel } from './prewarm-model.ts';
import { importCheck, torchChecks } from './probe-checks.ts';
import { createProcessRunner, findOnPath, firstLine, lastLine, type ProcessRunner } from './process.ts';
import { hfSnapshot } from './provisioning.ts';
import { provisioningChecks } from './provisioning-checks.ts';
import {
  type Prewarm,
  type ProvisioningManifest,
  type ProvisioningRecord,
  writeManifest,
} from './provisioning-manifest.ts';
import { type ProbeAnswer, PYTHON_PROBE, parseProbeOutput } from './python-probe.ts';

export {
  DEFAULT_PACKAGES,
  DEFAULT_TOOLS,
  type DoctorOptions,
  type ModelCacheAccess,
} from './doctor-options.ts';
export {
  besideVenv,
  type ProvisioningManifest,
  type ProvisioningRecord,
  writeManifest,
} from './provisioning-manifest.ts';

/**
 * The provisioning doctor (from the runner bring-up lessons): the checks that cost real
 * runs when skipped, each a named line in seconds. Used by `spark-runner-preflight`, by
 * `npm run doctor` and by `sparkctl doctor`.
 */

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
 * a module the probe imports nor forge what goes into the manifest.
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
