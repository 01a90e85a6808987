import type { LeaseState } from '../state-file.ts';
import type { Executor, ExecutorName, Observation, Termination, Workload } from './types.ts';

/**
 * The executor seam when a repository chooses its backend: each lease runs on the
 * backend its record names (`lease.executor`, from the controller's `repositories` config, kept in
 * the state file so a restarted agent stops what it started with the same backend), else on the
 * host's own `executor`. Backends are built on first use; one this host cannot run (its settings
 * are missing from agent.json) fails the lease's preparation with the reason, so nothing is created.
 */
export function createLeaseExecutor(
  hostDefault: ExecutorName,
  /** Builds a backend; throws with what the operator must configure when it cannot. */
  build: (name: ExecutorName) => Executor,
  /** Told (once per lease) when a recorded workload's backend cannot be built. */
  warn: (msg: string, fields: Record<string, unknown>) => void = () => {},
): Executor {
  const built = new Map<ExecutorName, Executor | Error>();
  const get = (name: ExecutorName): Executor | Error => {
    let e = built.get(name);
    if (!e) {
      try {
        e = build(name);
      } catch (err) {
        e = new Error(
          `this lease's repository runs on executor "${name}", which this host cannot run: ${(err as Error).message}`,
        );
      }
      built.set(name, e);
    }
    return e;
  };
  // the host's own backend must work: the agent refuses to start otherwise (as before this seam)
  const fallback = get(hostDefault);
  if (fallback instanceof Error) throw fallback;
  const warned = new Set<string>();
  const of = (l: LeaseState): Executor | Error => {
    const e = get(l.executor ?? hostDefault);
    if (e instanceof Error && l.runner && !warned.has(l.leaseId)) {
      warned.add(l.leaseId);
      warn('the lease has a workload on a backend this host cannot run now; it is kept until that is fixed', {
        leaseId: l.leaseId,
        error: e.message,
      });
    }
    return e;
  };

  const router: Executor = {
    name: hostDefault,
    async prepare(l: LeaseState): Promise<Termination> {
      const e = of(l);
      return e instanceof Error ? { ok: false, detail: e.message } : e.prepare(l);
    },
    async start(l: LeaseState, w: Workload): Promise<void> {
      const e = of(l);
      if (e instanceof Error) throw e;
      // the controller's config allows tasks only with dstack; an agent never runs one elsewhere
      if (w.task && !e.taskOutput)
        throw new Error(`a CI task runs only on the dstack executor, not on "${e.name}"`);
      return e.start(l, w);
    },
    async observe(l: LeaseState): Promise<Observation> {
      const e = of(l);
      // a backend that cannot be built never started anything for this lease… unless a record
      // says it did (settings removed after a crash): then it may still run
      if (e instanceof Error) return l.runner ? { state: 'running' } : { state: 'none' };
      return e.observe(l);
    },
    async stop(l: LeaseState): Promise<void> {
      const e = of(l);
      if (!(e instanceof Error)) await e.stop(l);
    },
    async confirmTerminated(l: LeaseState): Promise<Termination> {
      const e = of(l);
      // never confirm blindly what a record says was started
      if (e instanceof Error) return l.runner ? { ok: false, detail: e.message } : { ok: true };
      return e.confirmTerminated(l);
    },
    async lastLines(l: LeaseState, n: number): Promise<string[]> {
      const e = of(l);
      return e instanceof Error ? [e.message] : e.lastLines(l, n);
    },
    async forget(l: LeaseState): Promise<void> {
      const e = of(l);
      return (e instanceof Error ? fallback : e).forget(l);
    },
    async discard(l: LeaseState): Promise<void> {
      const e = of(l);
      return (e instanceof Error ? fallback : e).discard(l);
    },
  };
  // development leases carry no repository: they run on the host's backend
  if (fallback.startDevelopment) router.startDevelopment = (l) => fallback.startDevelopment!(l);
  if (fallback.attach) router.attach = (l) => fallback.attach!(l);
  router.leasePaths = (l) => {
    const e = of(l);
    return e instanceof Error || !e.leasePaths ? null : e.leasePaths(l);
  };
  router.taskOutput = async (l) => {
    const e = of(l);
    if (e instanceof Error || !e.taskOutput) return { text: '', complete: false, detail: 'no task backend' };
    return e.taskOutput(l);
  };
  router.taskSecrets = (l) => {
    const e = of(l);
    return e instanceof Error || !e.taskSecrets ? [] : e.taskSecrets(l);
  };
  router.revokeTaskToken = async (l) => {
    const e = of(l);
    return e instanceof Error || !e.revokeTaskToken ? null : e.revokeTaskToken(l);
  };
  return router;
}
