import { randomBytes } from 'node:crypto';
import { closeSync, openSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type CheckResult, failed, fatalFailures, passed, softFailed } from './check.ts';
import { createProcessRunner, findOnPath, firstLine, type ProcessRunner } from './process.ts';
import { type ProbeAnswer, PYTHON_PROBE, parseProbeOutput } from './python-probe.ts';

/**
 * The provisioning doctor (issue 5, from the runner bring-up lessons): the checks that cost real
 * runs when skipped, each a named line in seconds. Used by `spark-runner-preflight`, by
 * `npm run doctor` and by `sparkctl doctor`.
 */
export interface DoctorOptions {
  /** The environment child processes will see; PATH decides which `python`/`ninja`/`nvcc` resolve. */
  env: Record<string, string | undefined>;
  /** Model cache directory that must be writable (SPARK_MODEL_CACHE); null fails the check. */
  modelCache: string | null;
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
  runner?: ProcessRunner;
  now?: () => Date;
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
  /** Extra sections a caller adds (the preflight adds the verified lease). */
  [extra: string]: unknown;
}

export interface DoctorReport {
  ok: boolean;
  checks: CheckResult[];
  manifest: ProvisioningManifest;
  durationMs: number;
}

/** Runs every doctor check (they run concurrently) and optionally writes the manifest. */
export async function runDoctor(opts: DoctorOptions): Promise<DoctorReport> {
  const started = Date.now();
  const runner = opts.runner ?? createProcessRunner();
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const toolTimeout = Math.max(2_000, Math.floor(timeoutMs / 10));
  const wantTorch = (opts.torch ?? 'required') === 'required';
  const imports = [...(opts.imports ?? [])];
  const softImports = [...(opts.softImports ?? [])];
  const tools = [...(opts.tools ?? DEFAULT_TOOLS)];
  const PATH = opts.env.PATH;

  const bare = findOnPath('python', PATH);
  const interpreter = bare ?? findOnPath('python3', PATH);

  const probe = interpreter
    ? runner.run(
        interpreter,
        [
          '-c',
          PYTHON_PROBE,
          JSON.stringify({
            torch: wantTorch,
            imports: [...imports, ...softImports],
            packages: [...(opts.packages ?? DEFAULT_PACKAGES)],
          }),
        ],
        { env: opts.env, timeoutMs },
      )
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

  const checks: CheckResult[] = [];
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
  checks.push(checkModelCache(opts.modelCache));

  const sourceCommit = commit ? await commit : null;
  const manifest: ProvisioningManifest = {
    schema: 'spark-provisioning-manifest/1',
    generatedAt: (opts.now?.() ?? new Date()).toISOString(),
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
  };
  if (opts.manifestPath) writeManifest(opts.manifestPath, manifest);
  return { ok: manifest.ok, checks, manifest, durationMs: Date.now() - started };
}

/** Writes the manifest (pretty JSON, trailing newline). */
export function writeManifest(path: string, manifest: ProvisioningManifest): void {
  writeFileSync(path, `${JSON.stringify(manifest, null, 2)}\n`);
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

function checkModelCache(dir: string | null): CheckResult {
  const name = 'model-cache';
  if (!dir)
    return failed(name, 'no model cache configured (SPARK_MODEL_CACHE): models would be downloaded per run');
  try {
    if (!statSync(dir).isDirectory())
      return failed(name, 'model cache (SPARK_MODEL_CACHE) is not a directory');
  } catch (e) {
    return failed(
      name,
      `model cache (SPARK_MODEL_CACHE) is not usable: ${(e as NodeJS.ErrnoException).code ?? e}`,
    );
  }
  const probe = join(dir, `.spark-doctor-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    closeSync(openSync(probe, 'wx'));
    unlinkSync(probe);
    return passed(name, 'model cache is writable');
  } catch (e) {
    return failed(
      name,
      `model cache (SPARK_MODEL_CACHE) is not writable (${(e as NodeJS.ErrnoException).code ?? e}): fix its owner/permissions for the runner user`,
    );
  }
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
