import { executorForRepo, type SparkConfig } from '../../core/config.ts';
import type { HostFacts } from '../../core/model.ts';
import type { ReadinessCheck } from '../../core/protocol/readiness.ts';
import type { HostRow, Ledger } from '../ledger/ledger.ts';

/**
 * The fleet side of the rollout readiness (docs/adr/0165-enable-is-a-gate.md), read from the
 * ledger only: every host adopted and heartbeating (the spec's rollout rule: no Spark workflow
 * while a host is unknown or unmanaged), dstack enrolment where a repository's CI runs on dstack
 * (docs/adr/0166-dstack-enrolment-fact.md), and a verified Deckard restore on the host that
 * serves it. Each failure names its fix.
 */

/** `42 s`, `3 min`, `5 h`, `2 d`: how long ago, for a person. */
export function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172_800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86_400)} d`;
}

const parseFacts = (h: HostRow): HostFacts | null => {
  try {
    return h.factsJson ? (JSON.parse(h.factsJson) as HostFacts) : null;
  } catch {
    return null;
  }
};

const fresh = (h: HostRow, config: SparkConfig, now: number) =>
  h.lastHeartbeatAt != null && now - h.lastHeartbeatAt <= config.timings.offlineAfterS * 1000;

/** One check from per-host findings: fail if any problem, else warn if any warning, else ok. */
function combine(
  id: ReadinessCheck['id'],
  okSummary: string,
  problems: { what: string; fix: string }[],
  warnings: { what: string; fix: string }[] = [],
): ReadinessCheck {
  const worst = problems.length ? problems : warnings;
  if (!worst.length) return { id, status: 'ok', summary: okSummary, fix: null };
  return {
    id,
    status: problems.length ? 'fail' : 'warn',
    summary: worst.map((p) => p.what).join('; '),
    fix: [...new Set(worst.map((p) => p.fix))].join('; '),
  };
}

/** Every configured host adopted with a fresh heartbeat; quarantined ones are a warning. */
export function checkHosts(rows: HostRow[], config: SparkConfig, now: number): ReadinessCheck {
  const problems: { what: string; fix: string }[] = [];
  const warnings: { what: string; fix: string }[] = [];
  const seen: string[] = [];
  for (const cfg of config.hosts) {
    const h = rows.find((r) => r.id === cfg.id);
    if (!h?.managed)
      problems.push({
        what: `${cfg.id} is not adopted`,
        fix: `adopt it once its agent heartbeats: sparkctl host adopt ${cfg.id}`,
      });
    if (!h || h.lastHeartbeatAt == null) {
      problems.push({
        what: `${cfg.id} never sent a heartbeat`,
        fix: `install and start spark-agent on ${cfg.id} with its agent token (docs/agent.md "Install")`,
      });
      continue;
    }
    if (!fresh(h, config, now)) {
      problems.push({
        what: `${cfg.id}'s last heartbeat was ${ago(now - h.lastHeartbeatAt)} ago (offline after ${config.timings.offlineAfterS} s)`,
        fix: `check spark-agent on ${cfg.id} (systemctl status spark-agent) and its path to the controller`,
      });
      continue;
    }
    if (h.phase === 'quarantined' || h.phase === 'release-required')
      warnings.push({
        what: `${cfg.id} is ${h.phase}${h.note ? ` (${h.note.slice(0, 160)})` : ''}: nothing is granted there meanwhile`,
        fix:
          h.phase === 'quarantined'
            ? `check ${cfg.id}, then sparkctl host clear-quarantine ${cfg.id}`
            : `end the processes the lease left on ${cfg.id} (sparkctl fleet shows them)`,
      });
    seen.push(`${cfg.id} ${ago(now - h.lastHeartbeatAt)} ago`);
  }
  return combine('hosts', `every host adopted and heartbeating (${seen.join(', ')})`, problems, warnings);
}

/**
 * dstack enrolment of every host that would run `repo`'s CI on dstack: the repository's executor,
 * or else the host's own as its agent reports it. Read from the heartbeat's `dstack` fact.
 */
export function checkDstack(rows: HostRow[], config: SparkConfig, repo: string, now: number): ReadinessCheck {
  const byRepo = executorForRepo(config, repo);
  const problems: { what: string; fix: string }[] = [];
  const enrolled: string[] = [];
  for (const cfg of config.hosts) {
    const h = rows.find((r) => r.id === cfg.id);
    const facts = h ? parseFacts(h) : null;
    const executor = byRepo ?? facts?.executor ?? null;
    if (executor !== 'dstack') continue;
    if (!h || !fresh(h, config, now)) {
      problems.push({
        what: `${cfg.id} has no fresh heartbeat, so its dstack enrolment is unknown`,
        fix: `start spark-agent on ${cfg.id} (docs/agent.md "Install")`,
      });
      continue;
    }
    const d = facts?.dstack;
    if (d === undefined) {
      problems.push({
        what: `${cfg.id}'s agent reports no dstack enrolment (it is older than this controller)`,
        fix: `update spark-agent on ${cfg.id} to this release`,
      });
      continue;
    }
    if (d === null) {
      problems.push({
        what: `${cfg.id}'s agent has no dstack section`,
        fix: `add "dstack" (url, project, tokenFile, fleet, image) to ${cfg.id}'s agent.json and restart spark-agent (docs/executors.md "dstack")`,
      });
      continue;
    }
    if (!d.ok) {
      problems.push({
        what: `${cfg.id}: ${d.detail}`,
        fix: `enrol ${cfg.id} in dstack: an on-prem SSH fleet "${d.fleet}" holding only ${cfg.id} (dstack apply -f fleet.dstack.yml; docs/executors.md "Operator setup"), reached with the agent's dstack url, project and token`,
      });
      continue;
    }
    enrolled.push(`${cfg.id}: ${d.detail}`);
  }
  if (!problems.length && !enrolled.length)
    return {
      id: 'dstack',
      status: 'ok',
      summary: `not used: ${repo}'s CI does not run on dstack (${byRepo ? `executor ${byRepo}` : "each host's own executor, none dstack"})`,
      fix: null,
    };
  return combine('dstack', `${repo}'s CI runs on dstack; ${enrolled.join('; ')}`, problems);
}

/**
 * Each home-service host (Deckard on spark-1) has a verified restore: its newest lend (drained,
 * stopped, GPU verified free) was followed by a restore whose model-ready check passed.
 */
export async function checkDeckard(ledger: Ledger, rows: HostRow[], now: number): Promise<ReadinessCheck> {
  const problems: { what: string; fix: string }[] = [];
  const verified: string[] = [];
  const homes = rows.filter((h) => h.homeService && ledger.config.hosts.some((c) => c.id === h.id));
  for (const h of homes) {
    const svc = h.homeService!;
    const drill = `run a restore drill: sparkctl deckard drill --host ${h.id} (lends ${svc} through a development lease, releases it and waits for the model-ready check; docs/sparkctl.md)`;
    const ev = await ledger.github.restoreEvidence(h.id);
    if (!ev.lend) {
      problems.push({
        what: `no restore of ${svc} on ${h.id} verified yet: it was never lent and restored`,
        fix: drill,
      });
      continue;
    }
    if (ev.restored) {
      verified.push(
        `${svc} on ${h.id} lent by ${ev.lend.reservationId} and restored ${ago(now - ev.restored.at)} ago (model-ready health passed)`,
      );
      continue;
    }
    if (h.phase === 'restoring')
      problems.push({
        what: `${svc} on ${h.id} is being restored after ${ev.lend.reservationId}; its model-ready check has not passed yet`,
        fix: 'wait for it (sparkctl fleet shows the host serving again), then check again',
      });
    else if (h.phase === 'quarantined')
      problems.push({
        what: `the restore of ${svc} on ${h.id} after ${ev.lend.reservationId} failed${h.note ? `: ${h.note.slice(0, 200)}` : ''}`,
        fix: `repair ${svc} on ${h.id}, sparkctl host clear-quarantine ${h.id}, then ${drill}`,
      });
    else
      problems.push({
        what: `no passing model-ready check of ${svc} on ${h.id} since ${ev.lend.reservationId} lent it`,
        fix: drill,
      });
  }
  if (!homes.length)
    return { id: 'deckard', status: 'ok', summary: 'no host serves a home service', fix: null };
  return combine('deckard', verified.join('; '), problems);
}

/** The fleet-wide checks, in report order. */
export async function checkFleet(ledger: Ledger): Promise<{ checks: ReadinessCheck[]; rows: HostRow[] }> {
  const rows = await ledger.github.hostRows();
  const now = ledger.clock();
  return { rows, checks: [checkHosts(rows, ledger.config, now), await checkDeckard(ledger, rows, now)] };
}
