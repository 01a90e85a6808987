import type { ReservationRow } from '../ledger/ledger.ts';
import type { GitHubMeta } from './meta.ts';
import type { GitHubService } from './service.ts';

/**
 * Run identity (issue 12 items 1–3; ADR 0040). A job lands on a JIT runner by labels alone, so
 * each reservation's runners carry a label with a random nonce that only the dispatch knows, and
 * the dispatched run is recorded so a `workflow_job` is matched by its run and its runner, never
 * by `head_sha` (a `workflow_dispatch` run's `head_sha` is the default branch tip).
 */

/** Bytes of randomness in a runner nonce: 128 bits, written as 32 hex digits. */
const NONCE_BYTES = 16;

/** A fresh runner-label nonce from Web Crypto (Node and Workers alike). */
export function newRunnerNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

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

/** The templates' `run-name: spark ${{ inputs.reservation_id }} ${{ inputs.nonce }}`. */
export function runNameOf(reservationId: string, nonce: string): string {
  return `spark ${reservationId} ${nonce}`;
}

/** The run a dispatch created, as the list and dispatch endpoints describe it. */
export interface DispatchedRun {
  runId: number;
  runAttempt: number;
}

interface RunListItem {
  id: number;
  display_title?: string;
  event?: string;
  run_attempt?: number;
  created_at?: string;
}

/** Pages read at most per lookup (100 runs each); the run is among the newest, so 3 is plenty. */
const MAX_PAGES = 3;
/** Runs created up to this long before the grant still count (GitHub's clock may differ from ours). */
const SKEW_MS = 5 * 60_000;

/**
 * Finds the run a dispatch created by its run-name (`spark <id> <nonce>`): lists the workflow's
 * `workflow_dispatch` runs created since the grant (dispatch comes after it) (GitHub REST "List workflow runs for a
 * workflow": `event`, `created` filters; newest first, paginated) and takes the earliest run
 * with that exact name — a later one with the same name was made by someone who read ours.
 * Null when GitHub does not list it yet.
 */
export async function findDispatchedRun(
  svc: GitHubService,
  r: ReservationRow,
  meta: GitHubMeta,
): Promise<DispatchedRun | null> {
  if (!r.repo || !meta.nonce) return null;
  const name = runNameOf(r.id, meta.nonce);
  const since = new Date((r.grantedAt ?? r.createdAt) - SKEW_MS).toISOString();
  const base = `/repos/${r.repo}/actions/workflows/${encodeURIComponent(meta.workflow)}/runs`;
  let found: RunListItem | null = null;
  for (let page = 1; page <= MAX_PAGES; page++) {
    const q = new URLSearchParams({
      event: 'workflow_dispatch',
      created: `>=${since}`,
      per_page: '100',
      page: String(page),
    });
    const res = await svc.client.request<{ workflow_runs: RunListItem[] }>('GET', `${base}?${q}`, {
      installationId: meta.installationId,
    });
    const runs = res.data.workflow_runs ?? [];
    for (const run of runs) {
      if (run.display_title !== name) continue;
      if (run.event && run.event !== 'workflow_dispatch') continue;
      if (!found || run.id < found.id) found = run;
    }
    if (runs.length < 100 || !/rel="next"/.test(res.headers.get('link') ?? '')) break;
  }
  return found ? { runId: found.id, runAttempt: found.run_attempt ?? 1 } : null;
}
