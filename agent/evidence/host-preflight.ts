import { readFileSync } from 'node:fs';
import type { HostCheck, HostPreflight } from '../../core/protocol/host-evidence.ts';
import type { AgentConfig } from '../config.ts';
import { describeFailure } from '../exec.ts';
import { describeProcesses } from '../gpu.ts';
import type { HostPort } from '../host/port.ts';
import { processesOfUid, type RunnerAccount } from '../runner.ts';
import type { LeaseState } from '../state-file.ts';

/**
 * The agent's own preflight (ADR 0160), run right before it starts a lease's runner or CI task:
 * the host facts a job cannot vouch for itself — nothing on the GPU, the lent home service gone,
 * no process of the runner user left over, the pair's link, the work volume — checked by the
 * agent as its own user. Its result is part of the host's evidence; a fatal failure means the
 * runner is not started at all. Every unknown state fails closed (`agent/preflight/host-checks.ts`
 * is the in-job counterpart, which the job runs and so cannot prove anything to the controller).
 */

/** Free space below this under the work root only warns (the in-job preflight's default `min_free_gb`). */
const MIN_FREE_BYTES = 50e9;
const SERVICE_PROBE_MS = 3000;
const INTERCONNECT_TIMEOUT_MS = 60_000;

const ok = (name: string, detail: string): HostCheck => ({ name, ok: true, fatal: true, detail });
const fail = (name: string, detail: string): HostCheck => ({
  name,
  ok: false,
  fatal: true,
  detail: detail.slice(0, 300),
});
const warn = (name: string, detail: string): HostCheck => ({
  name,
  ok: false,
  fatal: false,
  detail: detail.slice(0, 300),
});

export interface HostPreflightDeps {
  cfg: Pick<AgentConfig, 'workRoot' | 'service' | 'interconnectCheck'>;
  port: HostPort;
  /** The runner user (null: the runner runs as the agent, development only; an error: not found). */
  account: RunnerAccount | null | Error;
  /** Reads `/proc/sys/kernel/yama/ptrace_scope` (a test hands in its own). */
  ptraceScope?: () => string | null;
}

/** `kernel.yama.ptrace_scope`, or null when the kernel has no Yama LSM. */
export function readPtraceScope(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8').trim();
  } catch {
    return null;
  }
}

async function gpuCheck(port: HostPort): Promise<HostCheck> {
  const q = await port.queryGpu();
  if (!q.ok) return fail('gpu', `GPU state unknown: ${q.error}`);
  if (q.processes.length)
    return fail(
      'gpu',
      `${q.processes.length} compute process(es) before the runner started: ${describeProcesses(q.processes)}`,
    );
  return ok('gpu', 'no GPU compute process');
}

/** A lent home service must be gone: not answering ready, and not hung (a paused service is not a release). */
async function serviceCheck(d: HostPreflightDeps, l: LeaseState): Promise<HostCheck | null> {
  const svc = d.cfg.service;
  if (!l.lend) return null;
  if (!svc)
    return fail('home-service', 'the lease lends the home service but this agent has none configured');
  if (l.lendStep !== 'lent')
    return fail(svc.name, `not lent: the lending stopped at "${l.lendStep}" before the runner was to start`);
  const h = await d.port.probeHealth(svc.healthUrl, SERVICE_PROBE_MS);
  if (h.ok) return fail(svc.name, `still answers ready on its health URL (${h.detail}): not released`);
  if (h.status != null) return ok(svc.name, `health answers ${h.status}: not ready`);
  if (/ECONNREFUSED/.test(h.detail)) return ok(svc.name, 'not listening: released');
  return fail(svc.name, `${h.detail}: a paused or hung service is not released`);
}

async function interconnectCheck(d: HostPreflightDeps, l: LeaseState): Promise<HostCheck | null> {
  if (l.topology !== 'pair') return null;
  const check = d.cfg.interconnectCheck;
  // the agent's prepare step runs the same command only when one is configured (docs/agent.md)
  if (!check) return warn('interconnect', 'not checked: no interconnectCheck is configured for this host');
  const r = await d.port.exec(check, { timeoutMs: INTERCONNECT_TIMEOUT_MS });
  return r.code === 0
    ? ok('interconnect', 'interconnect check passed')
    : fail('interconnect', `interconnect check failed: ${describeFailure(check, r)}`);
}

function runnerUserCheck(account: RunnerAccount | null | Error): HostCheck | null {
  if (!account) return null;
  // the entry refuses to start without its runner user (agent/host/account.ts): only a test's
  // in-process agent gets here, so say it and go on
  if (account instanceof Error) return warn('runner-user', `not checked: ${account.message}`);
  const left = processesOfUid(account.uid);
  return left.length
    ? fail(
        'runner-user',
        `${left.length} process(es) of ${account.name} run before the runner started (pid ${left.slice(0, 5).join(', ')}): left over from earlier work`,
      )
    : ok('runner-user', `no process of ${account.name} before the start`);
}

function diskCheck(port: HostPort, workRoot: string): HostCheck {
  const free = port.freeDiskBytes(workRoot);
  if (free == null) return fail('disk', 'cannot read the free space of the work root');
  const gb = free / 1e9;
  const shown = gb >= 10 ? gb.toFixed(0) : gb.toFixed(1);
  return free >= MIN_FREE_BYTES
    ? ok('disk', `${shown} GB free under the work root`)
    : warn('disk', `only ${shown} GB free under the work root (a job may want ${MIN_FREE_BYTES / 1e9})`);
}

/**
 * Yama `ptrace_scope` ≥ 1 keeps the job's code from attaching to the runner's processes (its
 * ancestors), whose console is where the runner's own job result comes from
 * (https://docs.kernel.org/admin-guide/LSM/Yama.html). Soft: it is a host setting the operator
 * chooses, and the check says what to set.
 */
function ptraceCheck(read: () => string | null): HostCheck {
  const v = read();
  if (v == null) return warn('ptrace-scope', 'no Yama LSM: the job could attach to the runner it runs under');
  if (v === '0')
    return warn(
      'ptrace-scope',
      'kernel.yama.ptrace_scope is 0: the job could attach to the runner it runs under; set it to 1',
    );
  return ok('ptrace-scope', `kernel.yama.ptrace_scope is ${v}`);
}

/**
 * Runs every check (one run shows every problem); any fatal failure fails the preflight. The
 * checks that wait on a program or a probe start first, and the agent's own checks (its reads of
 * `/proc`, the work root's free space, Yama) run while those wait (docs/adr/0280): all of them
 * still after the runner config arrived and before the start, the result in the same order.
 */
export async function runHostPreflight(d: HostPreflightDeps, l: LeaseState): Promise<HostPreflight> {
  const ownChecks = () => [
    runnerUserCheck(d.account),
    diskCheck(d.port, d.cfg.workRoot),
    ptraceCheck(d.ptraceScope ?? readPtraceScope),
  ];
  // the calls below start nvidia-smi, the probe and the link check; the agent's own run next
  const [[gpu, service, link], own] = await Promise.all([
    Promise.all([gpuCheck(d.port), serviceCheck(d, l), interconnectCheck(d, l)]),
    Promise.resolve().then(ownChecks),
  ]);
  const checks = [gpu, service, link, ...own].filter((c): c is HostCheck => c != null);
  return { ok: checks.every((c) => c.ok || !c.fatal), at: d.port.now(), checks };
}

/** One line naming the failed fatal checks, for the log and the release reason. */
export function describePreflightFailure(p: HostPreflight): string {
  return p.checks
    .filter((c) => !c.ok && c.fatal)
    .map((c) => `${c.name}: ${c.detail}`)
    .join('; ');
}
