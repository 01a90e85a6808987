import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDoctor } from '../../agent/preflight/doctor.ts';
import { buildTarget } from '../../scripts/build.ts';
import { tempDir } from '../helpers/ledger.ts';

/**
 * The provisioning doctor against prepared fake environments (issue 5 tests): a real Python
 * interpreter in a venv, fake `torch` packages on PYTHONPATH, fake toolchain binaries, and PATHs
 * built per case so exactly one thing is wrong. Each case runs the real CLI (`npm run doctor`'s
 * entry, bundled) as a child process and checks its named line and exit code.
 */

const repo = join(import.meta.dirname, '..', '..');
let root: { dir: string; cleanup: () => void };
let base: { executable: string; stdlib: string };
let venvBin: string;
let toolsBin: string;
let goodTorch: string;
let doctorBundle: string;

function fakeTool(dir: string, name: string, output: string): void {
  const p = join(dir, name);
  // printf is a shell builtin: the fake must not depend on anything else on the PATH under test
  const lines = output.split('\n').map((l) => `'${l}'`);
  writeFileSync(p, `#!/bin/sh\nprintf '%s\\n' ${lines.join(' ')}\n`);
  chmodSync(p, 0o755);
}

function fakeTorch(dir: string, version: string, cuda: string | null, available: boolean): string {
  mkdirSync(join(dir, 'torch'), { recursive: true });
  writeFileSync(
    join(dir, 'torch', '__init__.py'),
    [
      `__version__ = ${JSON.stringify(version)}`,
      'class version:',
      `    cuda = ${cuda == null ? 'None' : JSON.stringify(cuda)}`,
      'class cuda:',
      '    @staticmethod',
      `    def is_available(): return ${available ? 'True' : 'False'}`,
      '    @staticmethod',
      '    def get_device_name(i): return "NVIDIA GB10"',
      '',
    ].join('\n'),
  );
  return dir;
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

function runCli(env: Record<string, string>, args: string[] = []): Promise<CliRun> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [doctorBundle, ...args], {
      cwd: repo,
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
  execFileSync(base.executable, ['-m', 'venv', '--without-pip', join(root.dir, 'venv')]);
  venvBin = join(root.dir, 'venv', 'bin');
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
  goodTorch = fakeTorch(join(root.dir, 'torch-cuda'), '2.9.0+cu130', '13.0', true);
});

afterAll(() => root?.cleanup());

describe('provisioning doctor', () => {
  it('passes a healthy environment and writes the manifest with versions, not paths', async () => {
    const manifestPath = join(root.dir, 'PROVISIONING-MANIFEST.json');
    const r = await runCli({ PATH: fullPath(venvBin), PYTHONPATH: goodTorch, SPARK_MODEL_CACHE: cache() }, [
      '--imports',
      'json,sqlite3',
      '--manifest',
      manifestPath,
      '--source-dir',
      repo,
    ]);
    expect(r.lines.filter((l) => !l.startsWith('ok '))).toEqual([
      expect.stringMatching(/all \d+ checks passed/),
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
    const only3 = binDir('only-python3', { python3: base.executable });
    const r = await runCli({ PATH: fullPath(only3), PYTHONPATH: goodTorch, SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'python')).toMatch(/^FAIL python: no bare `python` on PATH, only `python3`/);
    // the other checks still ran through python3, so one run shows every problem
    expect(line(r, 'torch-cuda')).toMatch(/^ok /);
    expect(r.code).toBe(1);
  });

  it('names an interpreter whose prefix carries the PEP 668 EXTERNALLY-MANAGED marker', async () => {
    // a real interpreter started with PYTHONHOME = a prefix whose stdlib has the marker, the way
    // Debian's /usr/lib/python3.X is marked: not a venv, so pip would refuse to install
    const home = join(root.dir, 'managed-prefix');
    const stdlibName = base.stdlib.split('/').pop()!;
    const stdlib = join(home, 'lib', stdlibName);
    mkdirSync(stdlib, { recursive: true });
    for (const entry of readdirSync(base.stdlib)) symlinkSync(join(base.stdlib, entry), join(stdlib, entry));
    writeFileSync(join(stdlib, 'EXTERNALLY-MANAGED'), '[externally-managed]\nError=use a venv\n');
    const sys = binDir('system-python', { python: base.executable });
    const r = await runCli({
      PATH: fullPath(sys),
      PYTHONHOME: home,
      PYTHONPATH: goodTorch,
      SPARK_MODEL_CACHE: cache(),
    });
    expect(line(r, 'pep668')).toMatch(
      /^FAIL pep668: python 3\.\S+ is a system interpreter marked EXTERNALLY-MANAGED/,
    );
    expect(line(r, 'python')).toMatch(/^ok /);
    expect(r.code).toBe(1);
  });

  it('names a CPU-only torch (2.x+cpu, cuda None)', async () => {
    const cpu = fakeTorch(join(root.dir, 'torch-cpu'), '2.5.1+cpu', null, false);
    const r = await runCli({ PATH: fullPath(venvBin), PYTHONPATH: cpu, SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'torch-build')).toMatch(/^FAIL torch-build: torch 2\.5\.1\+cpu is a CPU-only wheel/);
    expect(line(r, 'torch-cuda')).toMatch(/^FAIL torch-cuda: .*built without CUDA/);
    expect(r.code).toBe(1);
  });

  it('names a CUDA torch that cannot see a GPU, and a missing torch', async () => {
    const blind = fakeTorch(join(root.dir, 'torch-blind'), '2.9.0', '13.0', false);
    const r = await runCli({ PATH: fullPath(venvBin), PYTHONPATH: blind, SPARK_MODEL_CACHE: cache() });
    expect(line(r, 'torch-cuda')).toMatch(/^FAIL torch-cuda: .*is_available\(\) is False/);
    const none = await runCli({ PATH: fullPath(venvBin), SPARK_MODEL_CACHE: cache() });
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
      PYTHONPATH: goodTorch,
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
    const r = await runCli({ PATH: fullPath(venvBin), PYTHONPATH: goodTorch, SPARK_MODEL_CACHE: dir });
    expect(line(r, 'model-cache')).toMatch(
      /^FAIL model-cache: model cache \(SPARK_MODEL_CACHE\) is not writable/,
    );
    expect(r.code).toBe(1);
    const missing = await runCli({ PATH: fullPath(venvBin), PYTHONPATH: goodTorch });
    expect(line(missing, 'model-cache')).toMatch(/^FAIL model-cache: no model cache configured/);
  });

  it('names a missing declared import (fatal) and only warns for a soft one', async () => {
    const r = await runCli({ PATH: fullPath(venvBin), PYTHONPATH: goodTorch, SPARK_MODEL_CACHE: cache() }, [
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
    const softOnly = await runCli(
      { PATH: fullPath(venvBin), PYTHONPATH: goodTorch, SPARK_MODEL_CACHE: cache() },
      ['--soft-imports', 'spark_optional_extra'],
    );
    expect(softOnly.code).toBe(0);
  });

  it('reports every failure at once, each on its own line, in seconds', async () => {
    const bare = binDir('bare', { python3: base.executable });
    const report = await runDoctor({
      env: { PATH: bare, PYTHONPATH: fakeTorch(join(root.dir, 'torch-cpu2'), '2.4.0+cpu', null, false) },
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
