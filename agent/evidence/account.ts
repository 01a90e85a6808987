import type { AgentConfig } from '../config.ts';
import { resolveRunnerAccount } from '../host/account.ts';
import type { RunnerAccount } from '../runner.ts';

let cached: { name: string; account: RunnerAccount } | null = null;

/**
 * The runner user, looked up as the agent's entry checked it at start (`host/account.ts`), for
 * reading the job's files as that user: `null` when the runner runs as the agent (development
 * only), an error when the user cannot be looked up — then nothing of the job's is read at all
 * (never as the agent instead: the job's symlinks could point it at the agent's own files).
 */
export function evidenceAccount(cfg: Pick<AgentConfig, 'runner'>): RunnerAccount | null | Error {
  const name = cfg.runner.user;
  if (!name) return null;
  if (cached?.name === name) return cached.account;
  try {
    // the job's files are read through the lease helper's `as-runner` (ADR 0155): the agent
    // itself holds no capability to become the runner user
    const account: RunnerAccount = { ...resolveRunnerAccount(name), helper: cfg.runner.helper };
    cached = { name, account };
    return account;
  } catch (e) {
    return e as Error;
  }
}
