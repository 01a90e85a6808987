import type { Report } from '../../core/protocol/agent.ts';
import { ControllerRejected } from '../client.ts';
import type { AgentLogger } from '../log.ts';
import type { HealthResult } from '../service.ts';

/**
 * The home service's watch outside leases (ADR 0175). The heartbeat already probes the service's
 * model-ready URL each period; this decides, from those probes, when the service has stopped by
 * itself: nothing listens on its port (its process is gone: at once), or its model-ready check has
 * failed for `unhealthyAfterMs` (a hung or broken service). It then says so to the controller once
 * (`service_down`); the controller restarts it through the restore path, or quarantines the host.
 *
 * It only watches while nothing else owns the service: no lease (a lease may have lent it), no
 * restore running (the restore's own gate judges it). It arms once it has seen the service serving,
 * or when the controller's desired state says the service serves (`serve`: an agent restarted while
 * the service was down still reports it). After a report it stays quiet until the service serves
 * again, however many retries the restore takes: each state change is reported once.
 */

/** One heartbeat's look at the service: `probe` null when the agent did not probe it (a lease or restore owns it). */
export interface ServiceSample {
  at: number;
  probe: HealthResult | null;
}

type WatchState =
  | { kind: 'unarmed' }
  | { kind: 'serving' }
  | { kind: 'failing'; since: number; refused: boolean; detail: string }
  | { kind: 'reported' };

export class ServiceWatch {
  private s: WatchState = { kind: 'unarmed' };
  /** The controller's last desired state for the host was `serve`: it believes the service serves. */
  expectServing = false;

  constructor(
    readonly serviceName: string,
    readonly unhealthyAfterMs: number,
  ) {}

  /** The watch's state, for logs and tests. */
  get state(): WatchState['kind'] {
    return this.s.kind;
  }

  observe(sample: ServiceSample): void {
    const p = sample.probe;
    if (!p) {
      // a lease or a restore owns the service now; what comes after them starts from scratch
      if (this.s.kind !== 'reported') this.s = { kind: 'unarmed' };
      return;
    }
    if (p.ok) {
      this.s = { kind: 'serving' };
      return;
    }
    const refused = p.refused === true;
    switch (this.s.kind) {
      case 'reported':
        return;
      case 'unarmed':
        if (!this.expectServing) return;
        this.s = { kind: 'failing', since: sample.at, refused, detail: p.detail };
        return;
      case 'serving':
        this.s = { kind: 'failing', since: sample.at, refused, detail: p.detail };
        return;
      case 'failing':
        this.s = { ...this.s, refused: this.s.refused || refused, detail: p.detail };
        return;
    }
  }

  /** The reason of a `service_down` report due at `now`, or null. */
  due(now: number): string | null {
    if (this.s.kind !== 'failing') return null;
    if (this.s.refused)
      return `${this.serviceName} is not running: nothing answers its model-ready health check (connection refused)`;
    const forMs = now - this.s.since;
    if (forMs < this.unhealthyAfterMs) return null;
    return `${this.serviceName} model-ready health check failing for ${Math.round(forMs / 1000)} s: ${this.s.detail}`.slice(
      0,
      1000,
    );
  }

  /** The report was answered (accepted, or refused for good): quiet until the service serves again. */
  reported(): void {
    this.s = { kind: 'reported' };
  }
}

/**
 * Sends the watch's `service_down` report when one is due. A refusal (the host's fencing token
 * moved on: a grant crossed the report; or a lease holds the host) is final for this stop; an
 * unreachable controller is tried again at the next heartbeat.
 */
export async function reportServiceDown(a: {
  watch: ServiceWatch;
  now: number;
  fencingToken: number;
  send(r: Report): Promise<void>;
  log: AgentLogger;
}): Promise<void> {
  const reason = a.watch.due(a.now);
  if (!reason) return;
  try {
    await a.send({ type: 'service_down', fencingToken: a.fencingToken, reason });
    a.log.warn('home service down outside any lease; reported to the controller', {
      service: a.watch.serviceName,
      reason,
    });
    a.watch.reported();
  } catch (e) {
    if (e instanceof ControllerRejected) {
      a.log.warn('the controller refused the home service down report', {
        service: a.watch.serviceName,
        code: e.code,
        error: e.message,
      });
      a.watch.reported();
      return;
    }
    a.log.warn('home service down; report not delivered, will repeat it', {
      service: a.watch.serviceName,
      error: (e as Error).message,
    });
  }
}
