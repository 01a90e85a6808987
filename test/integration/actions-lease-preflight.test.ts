import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildTarget, targetNamed } from '../../scripts/build.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import {
  gitRepo,
  type LeaseFixture,
  runAction,
  runnerEnv,
  shellScript,
  startWithGrantedLease,
} from './actions-lease-fixture.ts';

/**
 * The lease-preflight action run as the runner runs it, against a real controller on loopback.
 * The host command is the real bundled `spark-runner-preflight` (built with the project's build
 * script) installed on a prepared PATH with a real venv, a fake torch, fake GPU tools and Debian's
 * real cargo and rustc. The host shows the job the managed model cache read-only: here the host
 * command runs in a mount namespace of its own where SPARK_MODEL_CACHE is a read-only bind mount
 * (as root; otherwise the cache loses its write bits), unless a case asks for a writable one.
 */

let tmp: { dir: string; cleanup: () => void };
let repo: string;
let head: string;
let hostBin: string;
let venvBin: string;
let torchDir: string;
let f: LeaseFixture | null = null;
let health: Server | null = null;

function fakeNvidiaSmi(dir: string, rows: string): void {
  shellScript(join(dir, 'nvidia-smi'), rows ? `printf '%s\\n' '${rows}'` : 'exit 0');
}

function hostPath(extraFirst?: string): string {
  return [extraFirst, hostBin, venvBin].filter(Boolean).join(':');
}

function dirs() {
  const workDir = join(tmp.dir, `work-${Math.random().toString(16).slice(2)}`);
  const modelCache = join(tmp.dir, `models-${Math.random().toString(16).slice(2)}`);
  mkdirSync(workDir);
  mkdirSync(modelCache);
  return { workDir, modelCache };
}

async function preflight(fx: LeaseFixture, hostId: string, over: Record<string, string> = {}, inputs = {}) {
  const lease = fx.leases.find((l) => l.hostId === hostId)!;
  return runAction('lease-preflight', {
    inputs: { reservation_id: fx.reservation.id, min_free_gb: '0.001', imports: 'json', ...inputs },
    env: { ...runnerEnv(fx, lease, dirs()), PATH: hostPath(), ...over },
    workspace: repo,
    tmp: tmp.dir,
  });
}

beforeAll(async () => {
  tmp = tempDir('spark-preflight-');
  repo = join(tmp.dir, 'butter');
  head = gitRepo(repo, { 'README.md': 'butter\n' });
  hostBin = join(tmp.dir, 'host-bin');
  mkdirSync(hostBin);
  // the agent bundle installs the host command; here: the real bundle behind a tiny wrapper
  const bundle = join(tmp.dir, 'spark-runner-preflight.mjs');
  await buildTarget(targetNamed('preflight'), bundle);
  // the preflight sees the model cache read-only; `doctor` (the operator provisioning) writable
  shellScript(
    join(hostBin, 'spark-runner-preflight'),
    `if [ "$1" = doctor ] || [ "\${TEST_MODEL_CACHE_VIEW:-}" = writable ]; then exec "${process.execPath}" "${bundle}" "$@"; fi
if [ "$(/usr/bin/id -u)" != 0 ]; then /bin/chmod a-w "$SPARK_MODEL_CACHE"; exec "${process.execPath}" "${bundle}" "$@"; fi
exec /usr/bin/unshare --mount /bin/sh -c '/usr/bin/mount --bind -o ro "$SPARK_MODEL_CACHE" "$SPARK_MODEL_CACHE" && exec "$0" "$@"' "${process.execPath}" "${bundle}" "$@"`,
  );
  fakeNvidiaSmi(hostBin, '');
  shellScript(join(hostBin, 'ninja'), "printf '%s\\n' 1.11.1");
  shellScript(join(hostBin, 'nvcc'), "printf '%s\\n' 'Cuda compilation tools, release 13.0, V13.0.88'");
  shellScript(join(hostBin, 'c++'), "printf '%s\\n' 'c++ (Debian 12.2.0-14) 12.2.0'");
  // the shipped lanes' tools: Debian's real cargo and rustc (scripts/setup-test-deps.sh)
  symlinkSync('/usr/bin/cargo', join(hostBin, 'cargo'));
  symlinkSync('/usr/bin/rustc', join(hostBin, 'rustc'));
  symlinkSync(
    execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim(),
    join(hostBin, 'git'),
  );
  const python = execFileSync('python3', ['-c', 'import sys; print(sys._base_executable)'], {
    encoding: 'utf8',
  }).trim();
  execFileSync(python, ['-m', 'venv', '--without-pip', join(tmp.dir, 'venv')]);
  venvBin = join(tmp.dir, 'venv', 'bin');
  // installed in the venv: the doctor runs python -I, which ignores PYTHONPATH
  const lib = join(tmp.dir, 'venv', 'lib');
  torchDir = join(lib, readdirSync(lib).find((d) => d.startsWith('python'))!, 'site-packages');
  mkdirSync(join(torchDir, 'torch'), { recursive: true });
  writeFileSync(
    join(torchDir, 'torch', '__init__.py'),
    '__version__ = "2.9.0+cu130"\nclass version:\n    cuda = "13.0"\nclass cuda:\n    @staticmethod\n    def is_available(): return True\n    @staticmethod\n    def get_device_name(i): return "NVIDIA GB10"\n',
  );
});

afterEach(async () => {
  await f?.controller.close();
  f = null;
  await new Promise<void>((r) => (health ? health.close(() => r()) : r()));
  health = null;
});
afterAll(() => tmp.cleanup());

describe('actions/lease-preflight (run as the runner runs it)', () => {
  it('passes on a verified lease and a healthy host, writing the manifest and the summary', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const r = await preflight(f, 'spark-2');
    expect(r.output).toContain(`ok   lease: ${f.reservation.id} is current on spark-2`);
    expect(r.output).toMatch(/preflight passed: \d+ checks/);
    expect(r.code).toBe(0);
    expect(r.outputs.ok).toBe('true');
    // the default fits the shipped Rust CUDA lanes: their tools, no torch; the cache read-only
    expect(r.output).toMatch(/^ok {3}tool:cargo: resolves on PATH$/m);
    expect(r.output).toMatch(/^ok {3}tool:rustc: resolves on PATH$/m);
    expect(r.output).not.toMatch(/ torch/);
    expect(r.output).toMatch(/^ok {3}model-cache: model cache is read-only to this job/m);
    const manifest = JSON.parse(readFileSync(r.outputs.manifest!, 'utf8'));
    expect(manifest).toMatchObject({
      ok: true,
      hostId: 'spark-2',
      sourceCommit: head,
      reservation: { id: f.reservation.id, headSha: head, topology: 'single' },
      torch: null,
      tools: { cargo: expect.stringMatching(/^cargo \d/), rustc: expect.stringMatching(/^rustc \d/) },
    });
    expect(r.summary).toContain('Spark lease preflight passed');
    expect(r.summary).toMatch(/\| gpu \| ok \|/);
    // no token reaches the log, the summary or the manifest
    const lease = f.leases[0]!;
    for (const text of [r.output, r.summary, JSON.stringify(manifest)]) {
      expect(text).not.toContain(lease.jobToken);
      expect(text).not.toContain(lease.leaseId);
    }
  });

  it('checks torch where the lane says it uses it, and fails a model cache the job can write', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const torch = await preflight(f, 'spark-2', {}, { torch: 'required', tools: 'ninja,nvcc,c++' });
    expect(torch.output).toContain('ok   torch-build: torch 2.9.0+cu130 is not a +cpu wheel');
    expect(torch.output).toContain('ok   torch-cuda: CUDA 13.0 available on NVIDIA GB10');
    expect(torch.code).toBe(0);
    // a host that hands PR workers a writable model cache
    const writable = await preflight(f, 'spark-2', { TEST_MODEL_CACHE_VIEW: 'writable' });
    expect(writable.code).toBe(1);
    expect(writable.output).toContain(
      'FAIL model-cache: model cache (SPARK_MODEL_CACHE) is writable by this job: PR code could change the weights every later lease loads',
    );
    expect(writable.output).toContain('::error::lease preflight failed: model-cache');
  });

  it('fails with a stale fencing token: the host was re-granted to newer work', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const old = f.leases[0]!;
    await f.ledger.beginRelease(f.reservation.id, 'released', 'done', 'test');
    await f.ledger.confirmReleased(old.hostId, old.fencingToken, 'test');
    await f.ledger.createReservation(
      {
        kind: 'manual',
        topology: 'single',
        repo: 'acme/butter',
        pr: 8,
        headSha: head,
        suite: 'smoke',
        requester: 'x',
      },
      'test',
    );
    await f.controller.loop.runNow();
    const current = (await f.ledger.leasesOf(undefined, 'r-2'))[0]!;
    expect(current.hostId).toBe('spark-2');
    expect(current.fencingToken).toBeGreaterThan(old.fencingToken);
    const r = await preflight(f, 'spark-2');
    expect(r.code).toBe(1);
    expect(r.output).toMatch(
      /FAIL lease: lease is not current \(409\): fencing token \d+ for spark-2 is not current/,
    );
    expect(r.output).toContain('::error::lease preflight failed: lease');
    expect(r.outputs.ok).toBe('false');
  });

  it('holds the venv against the host provisioning spec and what was provisioned beside it', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const venvRoot = join(tmp.dir, 'venv');
    const distDir = join(torchDir, 'torch-2.9.0+cu130.dist-info');
    mkdirSync(distDir, { recursive: true });
    writeFileSync(join(distDir, 'METADATA'), 'Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0+cu130\n');
    const specPath = join(tmp.dir, 'host-provisioning.json');
    writeFileSync(specPath, JSON.stringify({ venv: venvRoot, pins: { torch: '2.9.0+cu130' } }));
    const before = await preflight(f, 'spark-2', {}, { provisioning_spec: specPath });
    expect(before.output).toContain('ok   pin:torch: torch==2.9.0+cu130');
    expect(before.output).toContain(
      `FAIL provisioned: no provisioning manifest at ${join(tmp.dir, 'PROVISIONING-MANIFEST.json')}`,
    );
    expect(before.code).toBe(1);
    // the operator provisions on the host: the doctor writes the manifest beside the venv
    const provision = spawnSync(
      join(hostBin, 'spark-runner-preflight'),
      ['doctor', '--spec', specPath, '--tools', ''],
      {
        encoding: 'utf8',
        env: { PATH: hostPath(), HOME: tmp.dir, SPARK_MODEL_CACHE: dirs().modelCache },
      },
    );
    expect(provision.stdout).toContain(
      `doctor: manifest written to ${join(tmp.dir, 'PROVISIONING-MANIFEST.json')}`,
    );
    expect(provision.status).toBe(0);
    const after = await preflight(f, 'spark-2', {}, { provisioning_spec: specPath });
    expect(after.output).toContain('ok   provisioned: the venv holds exactly what was provisioned');
    expect(after.code).toBe(0);
    const manifest = JSON.parse(readFileSync(after.outputs.manifest!, 'utf8'));
    expect(manifest.provisioning).toMatchObject({
      venv: venvRoot,
      pins: { torch: { installed: '2.9.0+cu130' } },
    });
    // a spec from the checkout would let the PR say what its environment must be
    const fromCheckout = await preflight(f, 'spark-2', {}, { provisioning_spec: join(repo, 'spec.json') });
    expect(fromCheckout.code).toBe(1);
    expect(fromCheckout.output).toContain(
      'provisioning_spec must be an absolute path of a host file the operator owns, outside the checkout',
    );
  });

  it('fails closed when the controller is unreachable or the lease token is unknown', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const closed = createServer();
    await new Promise<void>((res) => closed.listen(0, '127.0.0.1', () => res()));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((res) => closed.close(() => res()));
    const down = await preflight(f, 'spark-2', { SPARK_CONTROLLER_URL: `http://127.0.0.1:${port}` });
    expect(down.code).toBe(1);
    expect(down.output).toMatch(/FAIL lease: controller unreachable \(SPARK_CONTROLLER_URL\): ECONNREFUSED/);
    const forged = await preflight(f, 'spark-2', { SPARK_LEASE_TOKEN: 'spk_job_forged-token-forged-token' });
    expect(forged.code).toBe(1);
    expect(forged.output).toContain('FAIL lease: controller rejected the lease token (401)');
  });

  it('fails when the host command or the lease environment is missing', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const r = await preflight(f, 'spark-2', { PATH: venvBin });
    expect(r.code).toBe(1);
    expect(r.output).toContain('::error::spark-runner-preflight is not installed on this runner host');
    // a runner not started by the Spark agent has no lease in its environment; a manifest left
    // in the workspace by an earlier job must not stand in for this run's verdict
    writeFileSync(
      join(repo, 'PROVISIONING-MANIFEST.json'),
      JSON.stringify({ ok: true, checks: [{ name: 'left-over', ok: false, fatal: true, detail: 'old' }] }),
    );
    const noLease = await preflight(f, 'spark-2', { SPARK_LEASE_TOKEN: '' });
    expect(noLease.code).toBe(1);
    expect(noLease.output).toContain('spark-runner-preflight: the runner environment lacks its lease');
    expect(noLease.output).toContain('::error::lease preflight failed: spark-runner-preflight exited 2');
    expect(noLease.output).not.toContain('left-over');
  });

  it('names a competing GPU process and a missing nvidia-smi', async () => {
    f = await startWithGrantedLease({ headSha: head });
    const busy = join(tmp.dir, 'busy-gpu');
    mkdirSync(busy, { recursive: true });
    fakeNvidiaSmi(busy, '4242, /usr/bin/python3, 81234');
    const r = await preflight(f, 'spark-2', { PATH: hostPath(busy) });
    expect(r.code).toBe(1);
    expect(r.output).toContain('FAIL gpu: 1 competing GPU compute process(es): pid 4242 python3 (81234 MiB)');
    // the host command resolves nvidia-smi on PATH; a host without it cannot prove the GPU is free
    const noSmi = join(tmp.dir, 'no-smi');
    mkdirSync(noSmi, { recursive: true });
    for (const tool of ['spark-runner-preflight', 'cargo', 'rustc', 'nvcc', 'c++', 'git']) {
      symlinkSync(join(hostBin, tool), join(noSmi, tool));
    }
    const missing = await preflight(f, 'spark-2', { PATH: `${noSmi}:${venvBin}` });
    expect(missing.code).toBe(1);
    expect(missing.output).toContain('FAIL gpu: nvidia-smi not found on PATH');
  });

  it('on a pair checks the interconnect and that Deckard no longer answers ready on spark-1', async () => {
    f = await startWithGrantedLease({ headSha: head, topology: 'pair' });
    health = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"status":"ready"}');
    });
    await new Promise<void>((res) => health!.listen(0, '127.0.0.1', () => res()));
    const healthUrl = `http://127.0.0.1:${(health.address() as AddressInfo).port}/health`;
    const serving = await preflight(f, 'spark-1', {
      SPARK_HOME_SERVICE: 'deckard',
      SPARK_SERVICE_HEALTH_URL: healthUrl,
    });
    expect(serving.code).toBe(1);
    expect(serving.output).toContain('FAIL deckard: deckard still answers ready (200) on its health URL');
    expect(serving.output).toContain(
      'FAIL interconnect: topology pair but no interconnect check is configured',
    );

    await new Promise<void>((r) => health!.close(() => r()));
    health = null;
    const released = await preflight(f, 'spark-1', {
      SPARK_HOME_SERVICE: 'deckard',
      SPARK_SERVICE_HEALTH_URL: healthUrl,
      SPARK_INTERCONNECT_CHECK: 'exit 0',
    });
    expect(released.output).toContain('ok   deckard: deckard is not listening: released');
    expect(released.output).toContain('ok   interconnect: interconnect check passed');
    expect(released.code).toBe(0);

    // a lent host whose runner does not know its home service cannot prove the release
    const unknown = await preflight(f, 'spark-1', { SPARK_INTERCONNECT_CHECK: 'echo link down >&2; exit 1' });
    expect(unknown.code).toBe(1);
    expect(unknown.output).toContain('FAIL home-service: the controller lent this host');
    expect(unknown.output).toContain('FAIL interconnect: interconnect check exited 1: link down');

    // a paused service accepts the connection but never answers: that is not a release
    const paused = createServer(() => {});
    health = paused;
    await new Promise<void>((res) => paused.listen(0, '127.0.0.1', () => res()));
    const pausedRun = await preflight(f, 'spark-1', {
      SPARK_HOME_SERVICE: 'deckard',
      SPARK_SERVICE_HEALTH_URL: `http://127.0.0.1:${(paused.address() as AddressInfo).port}/health`,
      SPARK_INTERCONNECT_CHECK: 'exit 0',
    });
    paused.closeAllConnections();
    expect(pausedRun.code).toBe(1);
    expect(pausedRun.output).toContain('FAIL deckard: deckard health URL accepted no answer within 3 s');
  });

  it('fails closed on a malformed or foreign verify answer, and names too little disk', async () => {
    f = await startWithGrantedLease({ headSha: head });
    // a stand-in controller on loopback whose answers break the contract
    let answer: unknown = { ok: true };
    const fake = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(answer));
    });
    health = fake;
    await new Promise<void>((res) => fake.listen(0, '127.0.0.1', () => res()));
    const url = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
    const malformed = await preflight(
      f,
      'spark-2',
      { SPARK_CONTROLLER_URL: url },
      { min_free_gb: '100000000' },
    );
    expect(malformed.code).toBe(1);
    expect(malformed.output).toMatch(/FAIL lease: malformed answer from the controller: reservation: /);
    expect(malformed.output).toMatch(/FAIL disk: only \S+ GB free in the work dir, need 100000000/);
    const lease = f.leases[0]!;
    answer = {
      ok: true,
      reservation: {
        id: f.reservation.id,
        headSha: head,
        topology: 'single',
        suite: 'smoke',
        kind: 'manual',
      },
      lease: {
        hostId: 'spark-1',
        fencingToken: lease.fencingToken,
        expiresAt: Date.now() + 60_000,
        lend: false,
      },
    };
    const foreign = await preflight(f, 'spark-2', { SPARK_CONTROLLER_URL: url });
    expect(foreign.code).toBe(1);
    expect(foreign.output).toContain(
      'FAIL lease: controller verified a different lease (host spark-1): refusing',
    );
    expect(foreign.output).toContain('FAIL source: not checked: the lease was not verified');
  });
});
