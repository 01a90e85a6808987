import type { DesiredState, PollResponse } from '../../../core/protocol/agent.ts';
import { idleFacts } from '../ledger.ts';
import { postOnce } from './http.ts';

/**
 * A minimal relay agent per host, speaking the real agent protocol over HTTP to a random
 * controller process each time (the processes share one ledger), so reservations granted under
 * webhook load move through prepare → run → release → restore and hosts are granted again.
 * It runs no processes: it reports each step as done. Not a replacement for the real agent
 * (scripts/sim/doubles + agent/): it exists to keep admission busy during the load test.
 */

export interface AgentSimOptions {
  urls: string[];
  /** host id → plaintext agent token. */
  tokens: Record<string, string>;
  /** Hosts with a home service (they report it serving while idle). */
  serviceHosts: Set<string>;
  /** Called when a runner "starts" (e.g. to send the job's workflow_job webhooks). */
  onRun?: (a: { hostId: string; reservationId: string; runnerName: string }) => Promise<void>;
  /** Pause between polls of one host. */
  pauseMs?: number;
}

export interface AgentSimStats {
  polls: number;
  reports: Record<string, number>;
  /** Reports refused with 409 (lost races between hosts of a pair, or stale state): expected. */
  conflicts: number;
  /** Any 5xx or transport error: never expected. */
  failures: string[];
  runners: number;
}

export interface AgentSim {
  stop(): Promise<AgentSimStats>;
}

export function startAgentSim(o: AgentSimOptions): AgentSim {
  const stats: AgentSimStats = { polls: 0, reports: {}, conflicts: 0, failures: [], runners: 0 };
  let stopped = false;
  let turn = 0;
  const pick = () => o.urls[turn++ % o.urls.length]!;

  const call = async (token: string, path: string, body: unknown) => {
    const res = await postOnce(
      `${pick()}/agent/v1${path}`,
      { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      JSON.stringify(body),
    );
    const text = res.text;
    return { status: res.status, json: text ? (JSON.parse(text) as unknown) : null };
  };

  const report = async (token: string, body: Record<string, unknown>) => {
    const r = await call(token, '/report', body);
    if (r.status === 200) stats.reports[String(body.type)] = (stats.reports[String(body.type)] ?? 0) + 1;
    else if (r.status === 409) stats.conflicts++;
    else if (r.status < 500)
      stats.failures.push(`report ${body.type} → ${r.status} ${JSON.stringify(r.json)}`);
    return r.status;
  };

  const loop = async (hostId: string, token: string) => {
    const exited = new Set<string>();
    let n = 0;
    while (!stopped) {
      try {
        if (n++ % 5 === 0) {
          const facts = idleFacts({ serviceState: o.serviceHosts.has(hostId) ? 'serving' : 'none' });
          await call(token, '/heartbeat', { facts });
        }
        const p = await call(token, '/poll', { maxWaitMs: 0 });
        stats.polls++;
        if (p.status === 200) await act(hostId, token, (p.json as PollResponse).desired, exited);
      } catch (e) {
        stats.failures.push(`${hostId}: ${String(e)}`);
      }
      await new Promise((r) => setTimeout(r, o.pauseMs ?? 25));
    }
  };

  const act = async (hostId: string, token: string, d: DesiredState, exited: Set<string>) => {
    switch (d.state) {
      case 'prepare':
        await report(token, {
          type: 'prepared',
          fencingToken: d.lease.fencingToken,
          serviceLent: d.lease.lend,
        });
        return;
      case 'run': {
        if (d.jitConfig) {
          stats.runners++;
          await report(token, {
            type: 'runner_started',
            fencingToken: d.lease.fencingToken,
            runnerName: d.runnerName,
          });
          await o.onRun?.({ hostId, reservationId: d.lease.reservationId, runnerName: d.runnerName });
        }
        if (exited.has(d.runnerName)) return;
        const s = await report(token, {
          type: 'runner_exited',
          fencingToken: d.lease.fencingToken,
          runnerName: d.runnerName,
          exitCode: 0,
          lastLines: ['ok'],
        });
        if (s === 200) exited.add(d.runnerName);
        return;
      }
      case 'clean':
        await report(token, { type: 'cleaned', fencingToken: d.lease.fencingToken });
        return;
      case 'restore':
        await report(token, {
          type: 'restored',
          fencingToken: d.fencingToken,
          ok: true,
          detail: 'model ready',
        });
        return;
      case 'develop':
        await report(token, { type: 'lease_active', fencingToken: d.lease.fencingToken });
        return;
      default:
        return;
    }
  };

  const loops = Object.entries(o.tokens).map(([hostId, token]) => loop(hostId, token));
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return stats;
    },
  };
}
