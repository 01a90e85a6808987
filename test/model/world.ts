import type { SparkConfig } from '../../core/config.ts';
import type {
  HostFacts,
  HostPhase,
  ReservationKind,
  ReservationStatus,
  Suite,
  Topology,
} from '../../core/model.ts';

/**
 * The reference model's world: what docs/architecture.md says the ledger holds after each command, kept in
 * plain maps and written from the design (not from `functions/ledger`). Both model tests drive the
 * same world; the pure one hands it to `planAdmission`, the ledger one compares it with the real
 * libSQL ledger after every command.
 */

export interface MHost {
  id: string;
  pool: string;
  gpus: number;
  home: string | null;
  managed: boolean;
  phase: HostPhase;
  lastHeartbeatAt: number | null;
  /** GPU compute processes in the last heartbeat; null = the GPU could not be queried. */
  procs: number | null;
  serviceState: HostFacts['serviceState'];
  /** Whether any heartbeat was ever received (facts exist). */
  reported: boolean;
  /** Every fencing token issued for this host, in grant order. */
  tokens: number[];
  restoreAttempts: number;
}

export interface MRes {
  id: string;
  seq: number;
  kind: ReservationKind;
  priority: number;
  topology: Topology;
  pool: string;
  target: string | null;
  repo: string | null;
  pr: number | null;
  sha: string | null;
  suite: Suite | null;
  status: ReservationStatus;
  createdAt: number;
  deadline: number;
  ttlS: number | null;
  /** How the work ended or was asked to end (release outcome, queue_timeout, …). */
  outcome: string | null;
  /** The last wait code the admission pass gave it (what `sparkctl status` shows while queued). */
  wait: string | null;
}

export interface MLease {
  id: string;
  resId: string;
  hostId: string;
  token: number;
  status: 'active' | 'expired' | 'releasing' | 'released';
  grantedAt: number;
  expiresAt: number;
}

export interface World {
  cfg: SparkConfig;
  now: number;
  hosts: Map<string, MHost>;
  res: Map<string, MRes>;
  leases: MLease[];
  nextSeq: number;
}

export const START = Date.UTC(2026, 10, 30, 8, 0, 0);
export const ACTIVE: readonly ReservationStatus[] = ['allocated', 'preparing', 'running', 'releasing'];
export const BINDING = ['active', 'expired', 'releasing'] as const;
/** CI work whose leases heartbeats renew (docs/architecture.md: a CI lease's TTL is renewed by heartbeats). */
export const CI_KINDS: readonly ReservationKind[] = ['manual', 'merge', 'benchmark', 'background'];

export function newWorld(cfg: SparkConfig, now = START): World {
  const hosts = new Map<string, MHost>();
  for (const h of cfg.hosts) {
    hosts.set(h.id, {
      id: h.id,
      pool: h.pool,
      gpus: h.gpus,
      home: h.homeService,
      managed: false,
      phase: 'idle',
      lastHeartbeatAt: null,
      procs: null,
      serviceState: 'unknown',
      reported: false,
      tokens: [],
      restoreAttempts: 0,
    });
  }
  return { cfg, now, hosts, res: new Map(), leases: [], nextSeq: 1 };
}

export const isActive = (s: ReservationStatus) => ACTIVE.includes(s);
export const isBinding = (l: MLease) => (BINDING as readonly string[]).includes(l.status);

export function bindingLease(w: World, hostId: string): MLease | undefined {
  return w.leases.find((l) => l.hostId === hostId && isBinding(l));
}

export function isFresh(w: World, h: MHost): boolean {
  return h.lastHeartbeatAt != null && w.now - h.lastHeartbeatAt <= w.cfg.timings.offlineAfterS * 1000;
}

/** The facts a model heartbeat sends, as the agent protocol carries them. */
export function factsOf(procs: number | null, serviceState: HostFacts['serviceState']): HostFacts {
  return {
    gpuProcesses:
      procs == null
        ? null
        : Array.from({ length: procs }, (_, i) => ({ pid: 100 + i, name: `proc-${i}`, usedMemoryMiB: 512 })),
    gpuError: procs == null ? 'nvidia-smi: no devices found' : null,
    freeDiskBytes: 500e9,
    serviceState,
    runnerState: 'none',
    interconnectOk: true,
    // every model host runs dstack, so each serves development like any other work: the model's
    // rules stay those of a uniform fleet; a mixed fleet (development only on dstack hosts,
    // docs/adr/0176-development-needs-dstack.md) is tested in admission-development-hosts.test.ts
    executor: 'dstack',
  };
}

// ------------------------------------------------------------------ commands on the world
// Each returns false when the ledger must refuse it (and then changes nothing).

export interface NewRequest {
  kind: ReservationKind;
  topology: Topology;
  target: string | null;
  repo: string | null;
  pr: number | null;
  sha: string | null;
  ttlS: number | null;
}

export function request(w: World, q: NewRequest): MRes | null {
  if (q.target && !w.hosts.has(q.target)) return null;
  const pool = q.target ? w.hosts.get(q.target)!.pool : w.cfg.hosts[0]!.pool;
  const seq = w.nextSeq++;
  const r: MRes = {
    id: `r-${seq}`,
    seq,
    kind: q.kind,
    priority: w.cfg.priorities[q.kind],
    topology: q.topology,
    pool,
    target: q.target,
    repo: q.repo,
    pr: q.pr,
    sha: q.sha,
    suite: q.repo ? 'smoke' : null,
    status: 'queued',
    createdAt: w.now,
    deadline: w.now + w.cfg.timings.queueTimeoutS * 1000,
    ttlS: q.ttlS,
    outcome: null,
    wait: null,
  };
  w.res.set(r.id, r);
  return r;
}

/** Cancel: only while queued (docs/architecture.md "Reservation"). */
export function cancel(w: World, id: string): boolean {
  const r = w.res.get(id);
  if (r?.status !== 'queued') return false;
  end(r, 'cancelled', 'cancelled');
  return true;
}

/** A push: queued work of the PR for another SHA is superseded; active work keeps its SHA. */
export function supersede(w: World, repo: string, pr: number, sha: string): string[] {
  const out: string[] = [];
  for (const r of w.res.values()) {
    if (r.repo === repo && r.pr === pr && r.status === 'queued' && r.sha !== sha) {
      end(r, 'superseded', 'superseded');
      out.push(r.id);
    }
  }
  return out;
}

function end(r: MRes, status: ReservationStatus, outcome: string) {
  r.status = status;
  r.outcome = outcome;
  r.wait = null;
}

/** Heartbeat: facts, freshness, the home service's serving state, and CI lease renewal. */
export function heartbeat(w: World, hostId: string, procs: number | null, svc: HostFacts['serviceState']) {
  const h = w.hosts.get(hostId)!;
  h.lastHeartbeatAt = w.now;
  h.procs = procs;
  h.serviceState = svc;
  h.reported = true;
  if (h.home) {
    if (h.phase === 'idle' && svc === 'serving') h.phase = 'service';
    else if (h.phase === 'service' && (svc === 'stopped' || svc === 'failed')) h.phase = 'idle';
  }
  const ttl = w.cfg.timings.ciLeaseTtlS * 1000;
  for (const l of w.leases) {
    if (l.hostId !== hostId || l.status !== 'active' || l.expiresAt <= w.now) continue;
    if (CI_KINDS.includes(w.res.get(l.resId)!.kind)) l.expiresAt = Math.max(l.expiresAt, w.now + ttl);
  }
}

/** Operator adopt / unadopt: only adopted hosts are ever granted (rule 2). */
export function setManaged(w: World, hostId: string, managed: boolean) {
  w.hosts.get(hostId)!.managed = managed;
}

/** allocated → preparing → running, as the agent reports progress. */
export function advance(w: World, id: string, to: 'preparing' | 'running'): boolean {
  const r = w.res.get(id);
  if (!r) return false;
  if (r.status === to) return true;
  const ok =
    (r.status === 'allocated' && to === 'preparing') || (r.status === 'preparing' && to === 'running');
  if (ok) r.status = to;
  return ok;
}

/** Release starts: leases → releasing, hosts → cleaning; freed only when the agent confirms (rule 7). */
export function beginRelease(w: World, id: string, outcome: string): boolean {
  const r = w.res.get(id);
  if (!r) return false;
  if (r.status === 'releasing') return true;
  if (!['allocated', 'preparing', 'running'].includes(r.status)) return false;
  r.status = 'releasing';
  r.outcome = outcome;
  for (const l of w.leases) {
    if (l.resId !== id || (l.status !== 'active' && l.status !== 'expired')) continue;
    l.status = 'releasing';
    const h = w.hosts.get(l.hostId)!;
    if (h.phase === 'allocated') h.phase = 'cleaning';
  }
  return true;
}

/** Outcomes that end `done` rather than `failed`. */
const ENDS_DONE = ['passed', 'released', 'done', 'runner exited 0', 'expired'];

/**
 * The agent confirms termination under `token`. A token that is not the host's current binding
 * lease is stale: refused, nothing changes. `processesRemain`: the host needs release (never killed).
 */
export function confirmReleased(w: World, hostId: string, token: number, processesRemain: boolean): boolean {
  const lease = bindingLease(w, hostId);
  if (!lease || lease.token !== token) return false;
  const h = w.hosts.get(hostId)!;
  const r = w.res.get(lease.resId)!;
  if (processesRemain) {
    h.phase = 'release-required';
    return true;
  }
  if (lease.status !== 'releasing') {
    if (['allocated', 'preparing', 'running'].includes(r.status))
      beginRelease(w, r.id, r.outcome ?? 'released');
    else lease.status = 'releasing';
  }
  lease.status = 'released';
  h.phase = h.home ? 'restoring' : 'idle';
  const open = w.leases.some((l) => l.resId === r.id && l.status !== 'released');
  if (!open && r.status === 'releasing') {
    r.status = r.outcome != null && !ENDS_DONE.includes(r.outcome) ? 'failed' : 'done';
  }
  return true;
}

/**
 * The agent's step reports about a lease (`cleaned`, `processes_remain`): checked against the
 * current token first; cleanup is reported only once the lease ended (released, expired, or the
 * host left release-required); leftovers only once the lease no longer covers them.
 */
export function report(
  w: World,
  hostId: string,
  token: number,
  type: 'cleaned' | 'processes_remain',
): boolean {
  const lease = bindingLease(w, hostId);
  if (!lease || lease.token !== token) return false;
  const h = w.hosts.get(hostId)!;
  const r = w.res.get(lease.resId)!;
  const expired = lease.status === 'expired' || lease.expiresAt <= w.now;
  if (type === 'processes_remain') {
    if (lease.status !== 'releasing' && !expired) return false;
    return confirmReleased(w, hostId, token, true);
  }
  if (lease.status !== 'releasing' && h.phase !== 'release-required' && !expired) return false;
  if (lease.status !== 'releasing' && ['allocated', 'preparing', 'running'].includes(r.status)) {
    const job = r.outcome && ['passed', 'failed', 'cancelled'].includes(r.outcome) ? r.outcome : null;
    beginRelease(w, r.id, job ?? 'released');
  }
  return confirmReleased(w, hostId, token, false);
}

/**
 * The home service's model-ready health passed (service) or failed (retry, then quarantine),
 * reported with the host's current fencing token (0 before any lease).
 */
export function recordRestore(w: World, hostId: string, ok: boolean, token: number): boolean {
  const h = w.hosts.get(hostId)!;
  if (token !== (h.tokens.at(-1) ?? 0) || h.phase !== 'restoring') return false;
  if (ok) {
    h.restoreAttempts = 0;
    h.phase = 'service';
    return true;
  }
  h.restoreAttempts++;
  if (h.restoreAttempts > w.cfg.timings.restoreRetries) {
    h.phase = 'quarantined';
    // an explicit start waiting on this restore ends with it
    for (const r of w.res.values()) {
      if (r.kind === 'deckard' && r.target === hostId && r.status === 'queued') {
        r.status = 'failed';
        r.outcome = 'restore_failed';
        r.wait = null;
      }
    }
  }
  return true;
}

/** Only an operator clears quarantine; the host restores its service (or goes idle) first. */
export function clearQuarantine(w: World, hostId: string): boolean {
  const h = w.hosts.get(hostId)!;
  if (h.phase !== 'quarantined') return false;
  h.restoreAttempts = 0;
  h.phase = h.home ? 'restoring' : 'idle';
  return true;
}
