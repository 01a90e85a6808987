import type { ReservationRow } from '../ledger/ledger.ts';
import type { GitHubMeta } from './meta.ts';
import type { GitHubService } from './service.ts';

/**
 * Run identity (ADR 0040). A job lands on a JIT runner by labels alone, so
 * each reservation's runners carry a label with a random nonce that only the dispatch knows, and
 * the dispatched run is recorded so a `workflow_job` is matched by its run and its runner, never
 * by `head_sha` (a `workflow_dispatch` run's `head_sha` is the default branch tip).
 */

/** `spark-r-12-<nonce>`: the label only this reservation's runners carry (the templates' runs-on). */
export function reservationLabel(reservationId: string, nonce: string): string {
  return `spark-${reservationId}-${nonce}`;
}

const RESERVATION_LABEL = /^spark-(r-[0-9]{1,15})-([0-9a-f]{16,64})$/i;

/** The reservation id and nonce a job's label names, or null for any other label. */
export function parseReservationLabel(label: string): { reservationId: string; nonce: string } | null {
  const m = RESERVATION_LABEL.exec(label);
  return m ? { reservationId: m[1]!.toLowerCase(), nonce: m[2]!.toLowerCase() } : null;
}

/** The run a dispatch created, as the list and dispatch endpoints describe it. */
export interface DispatchedRun {
  runId: number;
  runAttempt: number;
}

interface RunListItem {
  id: number;
  event?: string;
  run_attempt?: number;
}

/** Runs looked at per lookup, newest first (one page of 100); a dispatch is among the newest. */
const MAX_RUNS = 30;
/** Runs created up to this long before the grant still count (GitHub's clock may differ from ours). */
const SKEW_MS = 5 * 60_000;

/**
 * Finds the run a dispatch created when its answer carried no run id (a lost response, or a GitHub
 * that answers 204 without `return_run_details`): among the workflow's `workflow_dispatch` runs
 * created since the grant (REST "List workflow runs for a workflow", newest first), the earliest
 * whose jobs ask for this reservation's nonce label (REST "List jobs for a workflow run",
 * `labels`) — the nonce is drawn at the grant and only our dispatch hands it out, so a later run
 * with it was made by someone who read ours. Never by run-name or `head_sha`. Null when no such
 * run is listed yet, or when the workflow takes no nonce: such a run cannot be told apart from any
 * other dispatch of the workflow (docs/adr/0131-workflow-contract-and-run-identity.md).
 */
export async function findDispatchedRun(
  svc: GitHubService,
  r: ReservationRow,
  meta: GitHubMeta,
): Promise<DispatchedRun | null> {
  if (!r.repo || !meta.nonce || meta.nonceLabel === false) return null;
  const label = reservationLabel(r.id, meta.nonce).toLowerCase();
  const since = new Date((r.grantedAt ?? r.createdAt) - SKEW_MS).toISOString();
  const q = new URLSearchParams({ event: 'workflow_dispatch', created: `>=${since}`, per_page: '100' });
  const res = await svc.client.request<{ workflow_runs: RunListItem[] }>(
    'GET',
    `/repos/${r.repo}/actions/workflows/${encodeURIComponent(meta.workflow)}/runs?${q}`,
    { installationId: meta.installationId },
  );
  const runs = (res.data.workflow_runs ?? [])
    .filter((run) => !run.event || run.event === 'workflow_dispatch')
    .slice(0, MAX_RUNS)
    .sort((a, b) => a.id - b.id);
  for (const run of runs) {
    const jobs = await svc.client.request<{ jobs: { labels?: string[] }[] }>(
      'GET',
      `/repos/${r.repo}/actions/runs/${run.id}/jobs?per_page=100`,
      { installationId: meta.installationId },
    );
    if ((jobs.data.jobs ?? []).some((j) => (j.labels ?? []).some((l) => l.toLowerCase() === label)))
      return { runId: run.id, runAttempt: run.run_attempt ?? 1 };
  }
  return null;
}
