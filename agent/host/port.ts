import { statfsSync } from 'node:fs';
import type { AgentConfig } from '../config.ts';
import { type CommandResult, runCommand } from '../exec.ts';
import { type GpuQuery, queryGpu } from '../gpu.ts';
import { type HealthResult, probeHealth, waitHealthy } from '../service.ts';

/**
 * The host port: every side effect the agent has on its host goes through this
 * small interface — commands, the GPU query, the home service's health, the disk, and the clock —
 * so the decision layer (`reconcile.ts`) stays pure and a test can hand in a precise fake. The
 * runner's processes and files are the executor's (see `executor/`), which uses the same port.
 */
export interface HostPort {
  /** Runs an argv without a shell; never throws (a missing binary or timeout is in the result). */
  exec(
    argv: readonly string[],
    opts: { timeoutMs: number; env?: NodeJS.ProcessEnv; cwd?: string },
  ): Promise<CommandResult>;
  /** GPU compute processes, or a named failure (never "none" when the GPU was not read). */
  queryGpu(): Promise<GpuQuery>;
  /** One model-ready probe of the home service. */
  probeHealth(url: string, timeoutMs: number): Promise<HealthResult>;
  /** Polls the model-ready URL until it passes, `timeoutMs` runs out or `stopped()` says so. */
  waitHealthy(url: string, timeoutMs: number, pollMs: number, stopped: () => boolean): Promise<HealthResult>;
  /** Free bytes for unprivileged writers on the volume holding `path`, or null if unreadable. */
  freeDiskBytes(path: string): number | null;
  /** Wall clock in epoch milliseconds. */
  now(): number;
}

/** The real host: local processes, `nvidia-smi`, HTTP probes and `statfs`. */
export function createHostPort(cfg: Pick<AgentConfig, 'nvidiaSmi' | 'timeouts'>): HostPort {
  return {
    exec: runCommand,
    queryGpu: () => queryGpu(cfg.nvidiaSmi, cfg.timeouts.gpuQueryS * 1000),
    probeHealth,
    waitHealthy,
    freeDiskBytes(path) {
      try {
        const s = statfsSync(path);
        return s.bavail * s.bsize;
      } catch {
        return null;
      }
    },
    now: () => Date.now(),
  };
}
