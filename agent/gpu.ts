import type { GpuProcess } from '../core/model.ts';
import { runCommand } from './exec.ts';

/** The exact query the agent runs; the fake in scripts/sim/doubles insists on it too. */
export const NVIDIA_SMI_ARGS = [
  '--query-compute-apps=pid,process_name,used_memory',
  '--format=csv,noheader,nounits',
] as const;

/** GPU compute processes, or a named failure — never "no processes" when the GPU was not read. */
export type GpuQuery = { ok: true; processes: GpuProcess[] } | { ok: false; error: string };

/**
 * Parses `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits`
 * output: one `pid, name, MiB` line per process, nothing when there is none. The memory column
 * reads `[N/A]` on unified-memory parts (GB10 in DGX Spark) and counts as 0. A process name may
 * itself contain commas, so the name is everything between the first and the last field.
 * Throws a TypeError naming the line when the output is not in that format.
 */
export function parseComputeApps(stdout: string): GpuProcess[] {
  const out: GpuProcess[] = [];
  for (const raw of stdout.split('\n')) {
    const line = raw.trim();
    if (!line) continue;
    if (/^no running (compute )?processes found$/i.test(line)) continue;
    const parts = line.split(',');
    if (parts.length < 3) throw new TypeError(`unexpected nvidia-smi line: "${line.slice(0, 200)}"`);
    const pid = Number(parts[0]!.trim());
    const mem = parts[parts.length - 1]!.trim();
    const name = parts.slice(1, -1).join(',').trim();
    if (!Number.isInteger(pid) || pid < 0) {
      throw new TypeError(`unexpected nvidia-smi line (pid is not a number): "${line.slice(0, 200)}"`);
    }
    const usedMemoryMiB = /^\[?N\/A\]?$/i.test(mem) ? 0 : Number(mem);
    if (!Number.isFinite(usedMemoryMiB)) {
      throw new TypeError(`unexpected nvidia-smi line (memory is not a number): "${line.slice(0, 200)}"`);
    }
    out.push({ pid, name, usedMemoryMiB });
  }
  return out;
}

/** Runs nvidia-smi and parses it; a missing binary, a driver error or garbage is a named failure. */
export async function queryGpu(nvidiaSmi: string, timeoutMs: number): Promise<GpuQuery> {
  const r = await runCommand([nvidiaSmi, ...NVIDIA_SMI_ARGS], { timeoutMs });
  if (r.error) {
    return {
      ok: false,
      error: r.error.includes('not found') ? `nvidia-smi missing (${r.error})` : `nvidia-smi ${r.error}`,
    };
  }
  if (r.code !== 0) {
    const msg = (r.stdout.trim() || r.stderr.trim()).split('\n')[0]?.slice(0, 300) ?? '';
    return { ok: false, error: `nvidia-smi failed (exit ${r.code ?? r.signal})${msg ? `: ${msg}` : ''}` };
  }
  try {
    return { ok: true, processes: parseComputeApps(r.stdout) };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}

/** Short description of GPU processes for reports: pids and names, no memory paths beyond the name. */
export function describeProcesses(ps: readonly GpuProcess[]): string {
  return ps
    .slice(0, 5)
    .map((p) => `pid ${p.pid} ${p.name.split('/').pop()}`)
    .join(', ');
}
