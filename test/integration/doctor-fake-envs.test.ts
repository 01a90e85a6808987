import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDoctor } from '../../agent/preflight/doctor.ts';
import { buildTarget } from '../../scripts/build.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { readOnlyView } from '../helpers/read-only-view.ts';

/**
 * The provisioning doctor against prepared fake environments (tests): a real Python
 * interpreter in real venvs with fake `torch` packages installed in their site-packages (the
 * doctor runs Python with `-I`, so PYTHONPATH is ignored, as it must be), fake toolchain
 * binaries, and PATHs built per case so exactly one thing is wrong. Each case runs the real CLI
 * (`npm run doctor`'s entry, bundled) as a child process and checks its named line and exit code.
 */

const repo = join(import.meta.dirname, '..', '..');
let root: { dir: string; cleanup: () => void };
let base: { executable: string; stdlib: string };
let venvBin: string;
let toolsBin: string;
let doctorBundle: string;

function fakeTool(dir: string, name: string, output: string): void {
  const p = join(dir, name);
  // printf is a shell builtin: the fake must not depend on anything else on the PATH under test
  const lines = output.split('\n').map((l) => `'${l}'`);
  writeFileSync(p, `#!/bin/sh\nprintf '%s\\n' ${lines.join(' ')}\n`);
  chmodSync(p, 0o755);
}

interface TorchFake {
  version: string;
  cuda: string | null;
  available: boolean;
  capability?: [number, number];
}

/** A fake torch package: the attributes the probe reads, nothing else. */
function fakeTorch(dir: string, t: TorchFake): string {
  mkdirSync(join(dir, 'torch'), { recursive: true });
  writeFileSync(
    join(dir, 'torch', '__init__.py'),
    [
      `__version__ = ${JSON.stringify(t.version)}`,
      'class version:',
      `    cuda = ${t.cuda == null ? 'None' : JSON.stringify(t.cuda)}`,
      'class cuda:',
      '    @staticmethod',
      `    def is_available(): return ${t.available ? 'True' : 'False'}`,
      '    @staticmethod',
      '    def get_device_name(i): return "NVIDIA GB10"',
      '    @staticmethod',
      `    def get_device_capability(i): return (${(t.capability ?? [12, 1]).join(', ')})`,
      '',
    ].join('\n'),
  );
  return dir;
}

/** Installed-distribution metadata as pip leaves it (`<name>-<version>.dist-info/METADATA`). */
function distInfo(site: string, name: string, version: string): void {
  const dir = join(site, `${name}-${version}.dist-info`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'METADATA'), `Metadata-Version: 2.1\nName: ${name}\nVersion: ${version}\n`);
}

const GOOD_TORCH: TorchFake = { version: '2.9.0+cu130', cuda: '13.0', available: true };

/**
 * A real venv (no pip) whose site-packages holds a fake torch (unless null) and the given
 * distributions; returns its root, bin/ and site-packages.
 */
function makeVenv(
  name: string,
  torch: TorchFake | null = GOOD_TORCH,
  dists: Record<string, string> = {},
): { root: string; bin: string; site: string } {
  const rootDir = join(root.dir, `venv-${name}`);
  execFileSync(base.executable, ['-m', 'venv', '--without-pip', rootDir]);
  const lib = join(rootDir, 'lib');
  const site = join(lib, readdirSync(lib).find((d) => d.startsWith('python'))!, 'site-packages');
  if (torch) {
    fakeTorch(site, torch);
    distInfo(site, 'torch', torch.version);
  }
  for (const [d, v] of Object.entries(dists)) distInfo(site, d, v);
  return { root: rootDir, bin: join(rootDir, 'bin'), site };
}

function binDir(name: string, links: Record<string, string>): string {
  const dir = join(root.dir, name);
  mkdirSync(dir, { recursive: true });
  for (const [link, target] of Object.entries(links)) symlinkSync(target, join(dir, link));
  return dir;
}

function cache(): string {
  const dir = join(root.dir, `cache-${Math.random().toString(16).slice(2)}`);
  mkdirSync(dir);
  return dir;
}

const fullPath = (...dirs: string[]) => [...dirs, toolsBin].join(':');

interface CliRun {
  code: number | null;
  lines: string[];
  ms: number;
}

function runCli(
  env: Record<string, string>,
  args: string[] = [],
  cwd = repo,
  opts: { readOnly?: string } = {},
): Promise<CliRun> {
  const started = Date.now();
  const [cmd, argv] = opts.readOnly
    ? readOnlyView(opts.readOnly, process.execPath, [doctorBundle, ...args])
    : [process.execPath, [doctorBundle, ...args]];
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, {
      cwd,
      env: { ...env, HOME: root.dir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.on('error', reject);
    child.on('close', (code) =>
      resolve({ code, lines: out.split('\n').filter(Boolean), ms: Date.now() - started }),
    );
  });
}

const line = (r: CliRun, name: string) => r.lines.find((l) => l.includes(` ${name}: `));

beforeAll(async () => {
  root = tempDir('spark-doctor-');
  // the CLI bundled once with the project's build script, then run as plain `node` per case
  doctorBundle = join(root.dir, 'doctor.mjs');
  await buildTarget({ name: 'doctor', entry: 'agent/preflight/doctor-cli.ts', outfile: doctorBundle });
  base = JSON.parse(
    execFileSync(
      'python3',
      [
        '-c',
        'import sys, sysconfig, json; print(json.dumps({"executable": sys._base_executable, "stdlib": sysconfig.get_path("stdlib")}))',
      ],
      { encoding: 'utf8' },
    ),
  ) as { executable: string; stdlib: string };
  venvBin = makeVenv('good').bin;
  toolsBin = join(root.dir, 'tools');
  mkdirSync(toolsBin);
  fakeTool(toolsBin, 'ninja', '1.11.1');
  fakeTool(
    toolsBin,
    'nvcc',
    'nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88',
  );
  fakeTool(toolsBin, 'c++', 'c++ (Debian 12.2.0-14) 12.2.0');
  symlinkSync(
    execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim(),
    join(toolsBin, 'git'),
  );
});

afterAll(() => root?.cleanup());

describe('provisioning doctor', () => {
  it('passes a healthy environment and writes the manifest with versions, not paths', async () => {
    const manifestPath = join(root.dir, 'PROVISIONING-MANIFEST.json');
    const r = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: cache() }, [
      '--imports',
      'json,sqlite3',
      '--manifest',
      manifestPath,
      '--source-dir',
      repo,
    ]);
    expect(r.lines.filter((l) => !l.startsWith('ok '))).toEqual([
      expect.stringMatching(/all \d+ checks passed/),
      `doctor: manifest written to ${manifestPath}`,
    ]);
    expect(r.code).toBe(0);
    const m = JSON.parse(readFileSync(manifestPath, 'utf8'));
    expect(m).toMatchObject({
      schema: 'spark-provisioning-manifest/1',
      ok: true,
      python: { bare: true, inVenv: true, externallyManaged: false },
      torch: { version: '2.9.0+cu130', cuda: '13.0', cudaAvailable: true, device: 'NVIDIA GB10' },
      tools: { ninja: '1.11.1', nvcc: 'Cuda compilation tools, release 13.0, V13.0.88' },
    });
    expect(m.sourceCommit).toMatch(/^[0-9a-f]{40}$/);
    expect(JSON.stringify(m)).not.toContain(root.dir);
  });

  it('names a PATH with only python3 (no bare python)', async () => {
    const only3 = makeVenv('only-python3');
    unlinkSync(join(only3.bin, 'python'));
    const r = await runCli({ PATH: fullPath(only3.bin), SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'python')).toMatch(/^FAIL python: no bare `python` on PATH, only `python3`/);
    // the other checks still ran through python3, so one run shows every problem
    expect(line(r, 'torch-cuda')).toMatch(/^ok /);
    expect(r.code).toBe(1);
  });

  it('names an interpreter whose prefix carries the PEP 668 EXTERNALLY-MANAGED marker', async () => {
    // a real interpreter installed in a prefix whose stdlib has the marker, the way Debian's
    // /usr/lib/python3.X is marked: not a venv, so pip would refuse to install. The binary is a
    // copy (Python finds its prefix from where the binary is), the stdlib entries are symlinks.
    const home = join(root.dir, 'managed-prefix');
    const stdlibName = base.stdlib.split('/').pop()!;
    const stdlib = join(home, 'lib', stdlibName);
    mkdirSync(stdlib, { recursive: true });
    mkdirSync(join(home, 'bin'));
    copyFileSync(base.executable, join(home, 'bin', 'python'));
    chmodSync(join(home, 'bin', 'python'), 0o755);
    for (const entry of readdirSync(base.stdlib)) {
      if (entry !== 'site-packages') symlinkSync(join(base.stdlib, entry), join(stdlib, entry));
    }
    writeFileSync(join(stdlib, 'EXTERNALLY-MANAGED'), '[externally-managed]\nError=use a venv\n');
    fakeTorch(stdlib, GOOD_TORCH);
    const r = await runCli({ PATH: fullPath(join(home, 'bin')), SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'pep668')).toMatch(
      /^FAIL pep668: python 3\.\S+ is a system interpreter marked EXTERNALLY-MANAGED/,
    );
    expect(line(r, 'python')).toMatch(/^ok /);
    expect(r.code).toBe(1);
  });

  it('names a CPU-only torch (2.x+cpu, cuda None)', async () => {
    const cpu = makeVenv('torch-cpu', { version: '2.5.1+cpu', cuda: null, available: false });
    const r = await runCli({ PATH: fullPath(cpu.bin), SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'torch-build')).toMatch(/^FAIL torch-build: torch 2\.5\.1\+cpu is a CPU-only wheel/);
    expect(line(r, 'torch-cuda')).toMatch(/^FAIL torch-cuda: .*built without CUDA/);
    expect(r.code).toBe(1);
  });

  it('names a CUDA torch that cannot see a GPU, and a missing torch', async () => {
    const blind = makeVenv('torch-blind', { version: '2.9.0', cuda: '13.0', available: false });
    const r = await runCli({ PATH: fullPath(blind.bin), SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'torch-cuda')).toMatch(/^FAIL torch-cuda: .*is_available\(\) is False/);
    const none = await runCli({ PATH: fullPath(makeVenv('no-torch', null).bin), SPARK_MODEL_CACHE: cache() });
    expect(line(none, 'torch')).toMatch(/^FAIL torch: import torch failed: ModuleNotFoundError/);
    expect(none.code).toBe(1);
  });

  it('names a missing ninja on the PATH child processes see', async () => {
    const noNinja = binDir('no-ninja', {
      nvcc: join(toolsBin, 'nvcc'),
      'c++': join(toolsBin, 'c++'),
    });
    const r = await runCli({
      PATH: [venvBin, noNinja].join(':'),
      SPARK_MODEL_CACHE: cache(),
    });
    expect(line(r, 'tool:ninja')).toMatch(/^FAIL tool:ninja: `ninja` does not resolve on the PATH/);
    expect(line(r, 'tool:nvcc')).toMatch(/^ok /);
    expect(r.code).toBe(1);
  });

  it('names an unwritable model cache', async () => {
    // root ignores mode bits, so as root use sysfs (a directory nobody may create files in)
    let dir = '/sys';
    if (process.getuid?.() !== 0) {
      dir = cache();
      chmodSync(dir, 0o555);
    }
    const r = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: dir });
    expect(line(r, 'model-cache')).toMatch(
      /^FAIL model-cache: model cache \(SPARK_MODEL_CACHE\) is not writable/,
    );
    expect(r.code).toBe(1);
    const missing = await runCli({ PATH: fullPath(venvBin) });
    expect(line(missing, 'model-cache')).toMatch(/^FAIL model-cache: no model cache configured/);
  });

  it('for a PR worker (the in-job view) a writable model cache is a finding and a read-only one passes', async () => {
    const args = ['--model-cache-access', 'read-only'];
    const writable = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: cache() }, args);
    expect(line(writable, 'model-cache')).toBe(
      'FAIL model-cache: model cache (SPARK_MODEL_CACHE) is writable by this job: PR code could change the weights every later lease loads; give the runner user a read-only view of it (a read-only bind mount, or an owner and mode it cannot write)',
    );
    expect(writable.code).toBe(1);
    const dir = cache();
    const ro = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: dir }, args, repo, {
      readOnly: dir,
    });
    expect(line(ro, 'model-cache')).toMatch(
      /^ok {3}model-cache: model cache is read-only to this job \((EROFS|EACCES)\), as a PR worker must see it$/,
    );
    expect(ro.code).toBe(0);
    // pre-warming writes the cache: only the operator's (writable) view may
    const spec = join(root.dir, 'spec-ro-prewarm.json');
    writeFileSync(
      spec,
      JSON.stringify({ venv: '/opt/v', pins: {}, model: { id: 'acme/m', revision: 'a'.repeat(40) } }),
    );
    const prewarm = await runCli({ PATH: fullPath(venvBin) }, [...args, '--spec', spec, '--prewarm']);
    expect(prewarm.code).toBe(2);
    expect(prewarm.lines).toEqual([
      'doctor: --prewarm fills the model cache: it needs --model-cache-access writable',
    ]);
    const bad = await runCli({ PATH: fullPath(venvBin) }, ['--model-cache-access', 'rw']);
    expect(bad.lines).toEqual(['doctor: --model-cache-access must be "writable" or "read-only", got "rw"']);
  });

  it('names a missing declared import (fatal) and only warns for a soft one', async () => {
    const r = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: cache() }, [
      '--imports',
      'json,spark_missing_kernels',
      '--soft-imports',
      'spark_optional_extra',
    ]);
    expect(line(r, 'import:spark_missing_kernels')).toBe(
      "FAIL import:spark_missing_kernels: import spark_missing_kernels failed: ModuleNotFoundError: No module named 'spark_missing_kernels'",
    );
    expect(line(r, 'import:json')).toMatch(/^ok /);
    expect(line(r, 'soft-import:spark_optional_extra')).toMatch(/^warn soft-import:spark_optional_extra: /);
    expect(r.code).toBe(1);
    const softOnly = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: cache() }, [
      '--soft-imports',
      'spark_optional_extra',
    ]);
    expect(softOnly.code).toBe(0);
  });

  it('reports every failure at once, each on its own line, in seconds', async () => {
    const bare = makeVenv('bare-cpu', { version: '2.4.0+cpu', cuda: null, available: false });
    unlinkSync(join(bare.bin, 'python'));
    const report = await runDoctor({
      env: { PATH: bare.bin },
      modelCache: null,
      imports: ['spark_missing_kernels'],
    });
    const failedNames = report.checks.filter((c) => !c.ok).map((c) => c.name);
    expect(failedNames).toEqual([
      'python',
      'torch-build',
      'torch-cuda',
      'import:spark_missing_kernels',
      'tool:ninja',
      'tool:nvcc',
      'tool:c++',
      'model-cache',
    ]);
    expect(report.ok).toBe(false);
  });
});

describe('the job cannot shadow or forge what the doctor reads', () => {
  it('ignores a torch.py in the checkout and a PYTHONPATH the job sets', async () => {
    const cpu = makeVenv('shadowed-cpu', { version: '2.5.1+cpu', cuda: null, available: false });
    // the PR's checkout (the doctor's working directory) carries a forged CUDA torch
    const checkout = join(root.dir, 'pr-checkout');
    mkdirSync(checkout, { recursive: true });
    writeFileSync(
      join(checkout, 'torch.py'),
      '__version__ = "2.9.0+cu130"\nclass version:\n    cuda = "13.0"\nclass cuda:\n    is_available = staticmethod(lambda: True)\n    get_device_name = staticmethod(lambda i: "forged")\n',
    );
    const forged = fakeTorch(join(root.dir, 'forged-path'), GOOD_TORCH);
    const r = await runCli(
      { PATH: fullPath(cpu.bin), PYTHONPATH: forged, SPARK_MODEL_CACHE: cache() },
      ['--manifest', join(checkout, 'PROVISIONING-MANIFEST.json')],
      checkout,
    );
    expect(line(r, 'torch-build')).toMatch(/^FAIL torch-build: torch 2\.5\.1\+cpu is a CPU-only wheel/);
    expect(r.code).toBe(1);
    const m = JSON.parse(readFileSync(join(checkout, 'PROVISIONING-MANIFEST.json'), 'utf8'));
    expect(m.torch.version).toBe('2.5.1+cpu');
  });
});

describe('provisioning spec', () => {
  const MODEL = 'acme/qwen-remote';
  const REV = 'ab12'.padEnd(40, '7');

  /** A model snapshot in the HF cache layout (hub/models--org--name/snapshots/<sha>/). */
  function cachedModel(cacheDir: string, files: Record<string, string>, weights = true): string {
    const repoDir = join(cacheDir, 'huggingface', 'hub', `models--${MODEL.replace('/', '--')}`);
    const snap = join(repoDir, 'snapshots', REV);
    mkdirSync(snap, { recursive: true });
    mkdirSync(join(repoDir, 'refs'), { recursive: true });
    writeFileSync(join(repoDir, 'refs', 'main'), REV);
    writeFileSync(join(snap, 'config.json'), '{"auto_map": {}}');
    if (weights) writeFileSync(join(snap, 'model.safetensors'), 'w'.repeat(64));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(snap, name), text);
    return snap;
  }

  const REMOTE_CODE = {
    'modeling_qwen_remote.py': [
      'import math, json',
      'import torch',
      'from einops import rearrange',
      'import spark_rope_ext',
      'from spark_fused.kernels import fused_norm',
      'from .configuration_qwen_remote import Config',
      'import configuration_qwen_remote',
      'try:',
      '    import flash_attn',
      'except ImportError:',
      '    flash_attn = None',
      'if is_flashinfer_available():',
      '    import flashinfer_private',
      'def f():',
      '    import spark_lazy_dep',
      '',
    ].join('\n'),
    'configuration_qwen_remote.py':
      'from transformers import PretrainedConfig\nclass Config(PretrainedConfig): pass\n',
  };

  function specFile(name: string, venvRoot: string, over: Record<string, unknown> = {}): string {
    const p = join(root.dir, `spec-${name}.json`);
    writeFileSync(
      p,
      JSON.stringify({
        venv: venvRoot,
        pins: { torch: '2.9.0+cu130', transformers: '4.57.1', vllm: '0.11.0' },
        servingBackend: 'vllm',
        guidelines: { transformers: '>=4.57,<5', vllm: '>=0.11' },
        model: { id: MODEL, revision: REV, trustRemoteCode: true },
        attentionBackend: 'flashinfer',
        ...over,
      }),
    );
    return p;
  }

  const provisionedVenv = (name: string, torch: TorchFake = GOOD_TORCH) =>
    makeVenv(name, torch, { transformers: '4.57.1', vllm: '0.11.0' });

  it('writes PROVISIONING-MANIFEST.json beside the venv: lock, pins, commit, model revision, custom code, attention', async () => {
    const v = provisionedVenv('prov-ok');
    const c = cache();
    cachedModel(c, REMOTE_CODE);
    const r = await runCli({ PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c }, [
      '--spec',
      specFile('ok', v.root),
      '--source-dir',
      repo,
    ]);
    // remote code imports: a missing non-stack module fails naming the file; stack ones only warn;
    // stdlib, relative, local-file and optional (guarded) imports are not demanded
    expect(line(r, 'custom-code:spark_rope_ext')).toBe(
      `FAIL custom-code:spark_rope_ext: the model's remote code (modeling_qwen_remote.py) imports spark_rope_ext, which is not installed in ${v.root}: add it to the provisioning pins before any server starts`,
    );
    expect(line(r, 'custom-code:spark_fused')).toMatch(/^FAIL /);
    expect(line(r, 'custom-code:spark_lazy_dep')).toMatch(/^FAIL /);
    expect(line(r, 'custom-code:einops')).toMatch(/^warn custom-code:einops: .*serving-stack module/);
    expect(line(r, 'custom-code:transformers')).toMatch(/^warn /);
    expect(line(r, 'custom-code:torch')).toMatch(/^ok\s/);
    expect(line(r, 'custom-code:json')).toMatch(/^ok\s/);
    for (const skipped of ['flash_attn', 'flashinfer_private', 'configuration_qwen_remote', 'math'])
      expect(
        r.lines.filter((l) => l.includes(` custom-code:${skipped}:`)).filter((l) => !l.startsWith('ok ')),
      ).toEqual([]);
    expect(r.lines.some((l) => l.includes('custom-code:flash_attn:'))).toBe(false);
    expect(line(r, 'venv')).toMatch(/^ok\s+venv: python runs in the provisioned venv/);
    expect(line(r, 'pin:torch')).toBe('ok   pin:torch: torch==2.9.0+cu130');
    expect(line(r, 'model')).toMatch(/^ok\s+model: acme\/qwen-remote is cached at ab12/);
    expect(line(r, 'attention-backend')).toBe(
      'ok   attention-backend: flashinfer runs on NVIDIA GB10 (SM 12.1)',
    );
    expect(r.code).toBe(1);

    const manifestPath = join(root.dir, 'PROVISIONING-MANIFEST.json');
    expect(r.lines).toContain(`doctor: manifest written to ${manifestPath}`);
    const m = JSON.parse(readFileSync(manifestPath, 'utf8'));
    expect(m.sourceCommit).toMatch(/^[0-9a-f]{40}$/);
    expect(m.torch).toMatchObject({ version: '2.9.0+cu130', cuda: '13.0' });
    expect(m.provisioning).toMatchObject({
      venv: v.root,
      lock: { source: 'importlib.metadata' },
      pins: {
        torch: { pinned: '2.9.0+cu130', installed: '2.9.0+cu130' },
        transformers: { pinned: '4.57.1', installed: '4.57.1' },
        vllm: { pinned: '0.11.0', installed: '0.11.0' },
      },
      servingBackend: { name: 'vllm', version: '0.11.0' },
      forcedPins: [],
      model: {
        id: MODEL,
        revision: REV,
        resolvedRevision: REV,
        trustRemoteCode: true,
        weightsPrewarmed: true,
      },
      attention: { backend: 'flashinfer', capability: [12, 1] },
    });
    expect(m.provisioning.lock.requirements).toEqual(
      expect.arrayContaining(['torch==2.9.0+cu130', 'transformers==4.57.1', 'vllm==0.11.0']),
    );
    expect(m.provisioning.lock.sha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it('names a pin the venv does not hold and an attention backend the GPU cannot run', async () => {
    const v = provisionedVenv('prov-cpu', {
      version: '2.9.0+cpu',
      cuda: null,
      available: true,
      capability: [12, 1],
    });
    const c = cache();
    cachedModel(c, {});
    const r = await runCli({ PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c }, [
      '--spec',
      specFile('cpu', v.root, { attentionBackend: 'flash-attn-3' }),
      '--manifest',
      join(root.dir, 'm-cpu.json'),
    ]);
    expect(line(r, 'pin:torch')).toBe(
      `FAIL pin:torch: torch is pinned to 2.9.0+cu130 but ${v.root} has 2.9.0+cpu (a CPU-only wheel replaced the pinned build): reinstall the pinned version`,
    );
    expect(line(r, 'attention-backend')).toBe(
      'FAIL attention-backend: FlashAttention 3 needs SM 8.0–9.0; NVIDIA GB10 is SM 12.1: pin flashinfer instead',
    );
    expect(r.code).toBe(1);
  });

  it('fails a pin forced against a standing guideline without a reason, and flags it with one', async () => {
    const v = makeVenv('prov-forced', GOOD_TORCH, { transformers: '4.49.0', vllm: '0.11.0' });
    const c = cache();
    cachedModel(c, {});
    const over = {
      pins: { torch: '2.9.0+cu130', transformers: '4.49.0', vllm: '0.11.0' },
      model: { id: MODEL, revision: REV },
    };
    const silent = await runCli({ PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c }, [
      '--spec',
      specFile('silent', v.root, over),
      '--manifest',
      join(root.dir, 'm-silent.json'),
    ]);
    expect(line(silent, 'guideline:transformers')).toBe(
      'FAIL guideline:transformers: transformers==4.49.0 breaks the standing guideline ">=4.57,<5": follow it, or declare why under "forced" in the provisioning spec',
    );
    expect(silent.code).toBe(1);
    const why = 'the NVFP4 loader regressed in 4.57; pinned until the fix ships';
    const declared = await runCli({ PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c }, [
      '--spec',
      specFile('declared', v.root, { ...over, forced: { transformers: why } }),
      '--manifest',
      join(root.dir, 'm-declared.json'),
    ]);
    expect(line(declared, 'guideline:transformers')).toBe(
      `warn guideline:transformers: transformers==4.49.0 is forced against the guideline ">=4.57,<5": ${why}`,
    );
    expect(declared.lines.filter((l) => l.startsWith('FAIL'))).toEqual([]);
    expect(declared.code).toBe(0);
    const m = JSON.parse(readFileSync(join(root.dir, 'm-declared.json'), 'utf8'));
    expect(m.provisioning.forcedPins).toEqual([
      { package: 'transformers', pin: '4.49.0', guideline: '>=4.57,<5', reason: why },
    ]);
  });

  it('pre-warms the model at its pinned revision once, then offline-safe without touching the Hub', async () => {
    const v = provisionedVenv('prov-prewarm');
    // huggingface_hub's snapshot_download as documented: files land in HF_HOME/hub/models--org--name/
    // snapshots/<revision>/ and refs/ maps the ref to the sha (huggingface.co/docs/huggingface_hub/guides/manage-cache)
    mkdirSync(join(v.site, 'huggingface_hub'));
    writeFileSync(
      join(v.site, 'huggingface_hub', '__init__.py'),
      [
        'import os',
        'def snapshot_download(repo_id, revision, **kw):',
        '    d = os.path.join(os.environ["HF_HOME"], "hub", "models--" + repo_id.replace("/", "--"))',
        '    snap = os.path.join(d, "snapshots", revision)',
        '    os.makedirs(snap, exist_ok=True)',
        '    os.makedirs(os.path.join(d, "refs"), exist_ok=True)',
        '    open(os.path.join(d, "refs", "main"), "w").write(revision)',
        '    open(os.path.join(snap, "config.json"), "w").write("{}")',
        '    open(os.path.join(snap, "model.safetensors"), "w").write("weights")',
        '    open(os.environ["FAKE_HF_LOG"], "a").write(repo_id + "@" + revision + "\\n")',
        '    return snap',
        '',
      ].join('\n'),
    );
    const c = cache();
    const log = join(root.dir, 'hf-downloads.log');
    writeFileSync(log, '');
    const spec = specFile('prewarm', v.root, { model: { id: MODEL, revision: REV } });
    const manifest = join(root.dir, 'm-prewarm.json');
    const offline = await runCli(
      { PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c, FAKE_HF_LOG: log, HF_HUB_OFFLINE: '1' },
      ['--spec', spec, '--prewarm', '--manifest', manifest],
    );
    expect(line(offline, 'prewarm')).toBe(
      `FAIL prewarm: ${MODEL}@${REV} is not cached and HF_HUB_OFFLINE=1: pre-warm on a host with network access to the Hub`,
    );
    expect(line(offline, 'model')).toMatch(/^FAIL model: .* is not in the managed model cache/);
    const first = await runCli({ PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c, FAKE_HF_LOG: log }, [
      '--spec',
      spec,
      '--prewarm',
      '--manifest',
      manifest,
    ]);
    expect(line(first, 'prewarm')).toMatch(
      /^ok\s+prewarm: acme\/qwen-remote@ab12\S+ downloaded into the managed cache/,
    );
    expect(first.lines.filter((l) => l.startsWith('FAIL'))).toEqual([]);
    expect(first.code).toBe(0);
    expect(JSON.parse(readFileSync(manifest, 'utf8')).provisioning.model).toMatchObject({
      resolvedRevision: REV,
      weightsPrewarmed: true,
      prewarm: { action: 'downloaded' },
    });
    const again = await runCli(
      { PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c, FAKE_HF_LOG: log, HF_HUB_OFFLINE: '1' },
      ['--spec', spec, '--prewarm', '--manifest', manifest],
    );
    expect(line(again, 'prewarm')).toMatch(/already cached; no download/);
    expect(again.code).toBe(0);
    expect(readFileSync(log, 'utf8')).toBe(`${MODEL}@${REV}\n`);
    expect(JSON.parse(readFileSync(manifest, 'utf8')).provisioning.model.prewarm.action).toBe('present');
  });

  it('in a job: fails when the venv drifted from what was provisioned beside it', async () => {
    const v = provisionedVenv('prov-drift');
    const c = cache();
    cachedModel(c, {});
    const spec = specFile('drift', v.root, { model: { id: MODEL, revision: REV } });
    const provision = await runCli({ PATH: fullPath(v.bin), SPARK_MODEL_CACHE: c }, ['--spec', spec]);
    expect(provision.lines.filter((l) => l.startsWith('FAIL'))).toEqual([]);
    expect(provision.code).toBe(0);
    const beside = join(dirname(v.root), 'PROVISIONING-MANIFEST.json');
    const { readProvisioningSpec } = await import('../../agent/preflight/provisioning.ts');
    const job = () =>
      runDoctor({
        env: { PATH: fullPath(v.bin) },
        modelCache: c,
        spec: readProvisioningSpec(spec),
        provisionedManifestPath: beside,
        manifestPath: null,
      });
    expect((await job()).checks.find((x) => x.name === 'provisioned')).toMatchObject({ ok: true });
    // a later install replaced a package behind the provisioning
    distInfo(v.site, 'triton', '3.5.0');
    const drifted = (await job()).checks.find((x) => x.name === 'provisioned')!;
    expect(drifted).toMatchObject({ ok: false, fatal: true });
    expect(drifted.detail).toBe('the venv changed since it was provisioned: triton 3.5.0 added');
  });

  it('refuses a malformed spec with exit 2 and names every problem', async () => {
    const bad = join(root.dir, 'spec-bad.json');
    writeFileSync(
      bad,
      JSON.stringify({ venv: 'relative/venv', pins: {}, model: { id: 'x', revision: 'main' } }),
    );
    const r = await runCli({ PATH: fullPath(venvBin) }, ['--spec', bad]);
    expect(r.code).toBe(2);
    expect(r.lines.join('\n')).toContain('venv: venv must be an absolute path');
    expect(r.lines.join('\n')).toContain('model.revision: expected the full 40-character commit sha');
    const noModel = await runCli({ PATH: fullPath(venvBin) }, [
      '--spec',
      specFile('nomodel', '/opt/v', { model: undefined }),
      '--prewarm',
    ]);
    expect(noModel.code).toBe(2);
    expect(noModel.lines.join('\n')).toContain('--prewarm needs --spec with a "model"');
  });
});
