import { statfsSync } from 'node:fs';
import { basename } from 'node:path';
import { type CheckResult, failed, passed } from './check.ts';
import type { ProcessRunner } from './process.ts';

/**
 * Local host checks of the lease preflight (docs/architecture.md "In the job"). Every unknown state fails
 * closed: a missing tool, an unparseable answer or a timeout is a failure, never a pass.
 */

export const NVIDIA_SMI_ARGS = [
  '--query-compute-apps=pid,process_name,used_memory',
  '--format=csv,noheader,nounits',
] as const;

/** No compute process may hold the GPU before the job starts (anything there is competing work). */
export async function checkGpuFree(
  runner: ProcessRunner,
  env: Record<string, string | undefined>,
  timeoutMs = 15_000,
): Promise<CheckResult> {
  const name = 'gpu';
  const r = await runner.run('nvidia-smi', NVIDIA_SMI_ARGS, { env, timeoutMs });
  if (r.spawnError === 'ENOENT') {
    return failed(name, 'nvidia-smi not found on PATH: cannot prove the GPU has no competing process');
  }
  if (r.spawnError) return failed(name, `nvidia-smi could not start (${r.spawnError})`);
  if (r.timedOut) return failed(name, `nvidia-smi did not answer within ${Math.round(timeoutMs / 1000)} s`);
  if (r.code !== 0) {
    const why = (r.stderr || r.stdout).trim().split('\n')[0]?.slice(0, 160) || 'no output';
    return failed(name, `nvidia-smi exited ${r.code ?? r.signal}: ${why}`);
  }
  const rows = r.stdout.split(/\r?\n/).filter((l) => l.trim() && !/^no running/i.test(l.trim()));
  const procs: string[] = [];
  for (const row of rows) {
    const cols = row.split(',').map((c) => c.trim());
    const [pid, proc, mem] = cols;
    // used_memory may be "[N/A]" on unified-memory GPUs (GB10); the process still counts
    if (cols.length !== 3 || !/^\d+$/.test(pid ?? '') || !proc) {
      return failed(
        name,
        `unparseable nvidia-smi line "${row.slice(0, 120)}": refusing to assume the GPU is free`,
      );
    }
    procs.push(`pid ${pid} ${basename(proc)}${mem && /^\d+$/.test(mem) ? ` (${mem} MiB)` : ''}`);
  }
  if (procs.length) {
    return failed(name, `${procs.length} competing GPU compute process(es): ${procs.join(', ')}`);
  }
  return passed(name, 'no GPU compute process');
}

/** Free space under the work dir must be at least `minFreeGb` (input of the action). */
export function checkDisk(workDir: string, minFreeGb: number): CheckResult {
  const name = 'disk';
  try {
    const s = statfsSync(workDir);
    const freeGb = (Number(s.bavail) * Number(s.bsize)) / 1e9;
    const shown = freeGb >= 10 ? freeGb.toFixed(0) : freeGb.toFixed(1);
    return freeGb >= minFreeGb
      ? passed(name, `${shown} GB free in the work dir (need ${minFreeGb})`)
      : failed(name, `only ${shown} GB free in the work dir, need ${minFreeGb}: clean old caches/builds`);
  } catch (e) {
    return failed(name, `work dir (SPARK_WORK_DIR) is not usable: ${(e as NodeJS.ErrnoException).code ?? e}`);
  }
}

/** For a pair, the configured interconnect check command (host config, not PR code) must succeed. */
export async function checkInterconnect(
  runner: ProcessRunner,
  command: string | null,
  env: Record<string, string | undefined>,
  timeoutMs = 20_000,
): Promise<CheckResult> {
  const name = 'interconnect';
  if (!command) {
    return failed(
      name,
      'topology pair but no interconnect check is configured (SPARK_INTERCONNECT_CHECK or --interconnect-check): cannot prove the link is up',
    );
  }
  const r = await runner.run('/bin/sh', ['-c', command], { env, timeoutMs });
  if (r.timedOut)
    return failed(name, `interconnect check did not finish within ${Math.round(timeoutMs / 1000)} s`);
  if (r.spawnError) return failed(name, `interconnect check could not start (${r.spawnError})`);
  if (r.code !== 0) {
    const why = (r.stderr || r.stdout).trim().split('\n').pop()?.slice(0, 160) || 'no output';
    return failed(name, `interconnect check exited ${r.code ?? r.signal}: ${why}`);
  }
  return passed(name, 'interconnect check passed');
}

/**
 * The home service (Deckard on spark-1) must be released: its health URL must not answer ready.
 * Connection refused = released. A 2xx = still serving. A connection that never answers is a
 * frozen or paused service (docs/architecture.md: "a paused container is not a release"), so it fails.
 */
export async function checkHomeServiceReleased(
  fetchFn: typeof fetch,
  service: string,
  healthUrl: string | null,
  timeoutMs = 3_000,
): Promise<CheckResult> {
  const name = service;
  if (!healthUrl) {
    return failed(
      name,
      `no health URL for ${service} (SPARK_SERVICE_HEALTH_URL): cannot prove it is released`,
    );
  }
  try {
    const res = await fetchFn(healthUrl, { signal: AbortSignal.timeout(timeoutMs), redirect: 'manual' });
    await res.body?.cancel();
    if (res.ok)
      return failed(name, `${service} still answers ready (${res.status}) on its health URL: not released`);
    return passed(name, `${service} health answers ${res.status}: not ready`);
  } catch (e) {
    const err = e as Error & { cause?: { code?: string } };
    if (err.name === 'TimeoutError' || err.name === 'AbortError') {
      return failed(
        name,
        `${service} health URL accepted no answer within ${timeoutMs / 1000} s (paused or hung service?): a paused service is not released`,
      );
    }
    const code = err.cause?.code ?? '';
    if (code === 'ECONNREFUSED') return passed(name, `${service} is not listening: released`);
    return failed(
      name,
      `${service} health probe failed (${code || err.message}): cannot prove it is released`,
    );
  }
}
