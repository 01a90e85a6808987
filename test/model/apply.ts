import type { AdmissionPlan } from '../../core/admission.ts';
import type { Prediction, WaitCode } from './reference.ts';
import { beginRelease, type World } from './world.ts';

/** The system's plan in the reference model's terms (ids and codes only; reasons are words). */
export function fromPlan(plan: AdmissionPlan): Prediction {
  return {
    grants: plan.grants.map((g) => ({ id: g.reservationId, hosts: g.hostIds, lend: g.lend, gpus: g.gpus })),
    waits: plan.waits.map((x) => ({ id: x.reservationId, position: x.position, code: x.code as WaitCode })),
    holds: plan.holds.map((h) => ({ host: h.hostId, id: h.reservationId })),
    draining: plan.draining.map((d) => ({ host: d.hostId, id: d.reservationId })),
    expiries: plan.expiries.map((e) => ({ leaseId: e.leaseId, outcome: e.outcome })),
    timeouts: plan.queueTimeouts,
    satisfied: plan.satisfied,
    restores: plan.restores.map((x) => ({ host: x.hostId, id: x.reservationId })),
    pairLosses: plan.pairLosses.map((x) => ({
      id: x.reservationId,
      lost: x.lostHosts,
      healthy: x.healthyHosts,
    })),
    hostStates: plan.hostStates,
    noted: Object.keys(plan.hostNotes),
  };
}

/** Sort order-free parts so two plans compare as sets where the design sets no order. */
export function canonical(p: Prediction): Prediction {
  const by = <T>(xs: T[], key: (x: T) => string) => [...xs].sort((a, b) => key(a).localeCompare(key(b)));
  return {
    ...p,
    holds: by(p.holds, (h) => h.host),
    draining: by(p.draining, (d) => d.host),
    expiries: by(p.expiries, (e) => e.leaseId),
    timeouts: [...p.timeouts].sort(),
    satisfied: [...p.satisfied].sort(),
    restores: by(p.restores, (x) => x.host),
    pairLosses: by(p.pairLosses, (x) => x.id),
    noted: [...p.noted].sort(),
  };
}

/** How many queued reservations get their wait written per pass (the ledger's documented cap). */
export const WAITS_WRITTEN = 200;

/**
 * What the ledger must hold after applying a pass (ADR 0002: one write transaction): timeouts
 * fail with their reason, met Deckard starts end done, expired leases stay bound (rule 7), grants
 * get leases with the fencing token `tokenFor` names, waits are recorded.
 */
export function applyPlan(w: World, p: Prediction, tokenFor: (resId: string, hostId: string) => number) {
  for (const id of p.timeouts) {
    const r = w.res.get(id)!;
    r.status = 'failed';
    r.outcome = 'queue_timeout';
    r.wait = null;
  }
  for (const id of p.satisfied) {
    const r = w.res.get(id)!;
    r.status = 'done';
    r.outcome = r.wait === 'restoring' ? 'restored' : 'already_serving';
    r.wait = null;
  }
  for (const x of p.restores) {
    const h = w.hosts.get(x.host)!;
    h.phase = 'restoring';
    h.restoreAttempts = 0;
  }
  for (const x of p.pairLosses) {
    // the pair fails as a unit; the dark node needs release until its agent confirms cleanup
    beginRelease(w, x.id, 'pair_node_lost');
    for (const id of x.lost) {
      const h = w.hosts.get(id)!;
      if (h.phase === 'cleaning') h.phase = 'release-required';
    }
  }
  // the pass reads each reservation once, before it writes (one transaction)
  const before = new Map([...w.res.values()].map((r) => [r.id, r.status]));
  for (const e of p.expiries) {
    const l = w.leases.find((x) => x.id === e.leaseId)!;
    if (l.status === 'active') l.status = 'expired';
    const h = w.hosts.get(l.hostId)!;
    const r = w.res.get(l.resId)!;
    if (r.kind !== 'development' && ['allocated', 'preparing'].includes(before.get(r.id)!)) {
      // CI whose lease was lost before its work started ends at once, not run (ADR 0177); a host
      // whose processes are unknown still needs its agent's word before it is freed
      if (e.outcome === 'release-required' && (h.phase === 'allocated' || h.phase === 'cleaning'))
        h.phase = 'release-required';
      beginRelease(w, r.id, 'lease_lost');
      continue;
    }
    if (e.outcome === 'release-required') {
      // processes outlived the lease: release-required, even when the other node of its pair
      // expired clean in this same pass and started the release (whichever lease comes first)
      if (h.phase === 'allocated' || h.phase === 'cleaning') h.phase = 'release-required';
    } else {
      if (['allocated', 'preparing', 'running'].includes(r.status)) beginRelease(w, r.id, 'expired');
    }
  }
  for (const g of p.grants) {
    const r = w.res.get(g.id)!;
    const ttlS =
      r.ttlS ?? (r.kind === 'development' ? w.cfg.timings.devLeaseDefaultTtlS : w.cfg.timings.ciLeaseTtlS);
    r.status = 'allocated';
    r.outcome = null;
    r.wait = null;
    for (const hostId of g.hosts) {
      const h = w.hosts.get(hostId)!;
      const token = tokenFor(r.id, hostId);
      h.tokens.push(token);
      h.phase = 'allocated';
      w.leases.push({
        id: `l-${hostId}-${token}`,
        resId: r.id,
        hostId,
        token,
        status: 'active',
        grantedAt: w.now,
        expiresAt: w.now + ttlS * 1000,
      });
    }
  }
  for (const x of p.waits.slice(0, WAITS_WRITTEN)) w.res.get(x.id)!.wait = x.code;
}
