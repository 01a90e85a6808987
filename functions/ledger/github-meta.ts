import type { CiMode } from '../../core/model.ts';
import type { Tx } from './db.ts';
import { mergeReservationMeta, writeReservationMeta } from './reservations.ts';
import type { ReservationRow } from './rows.ts';

/**
 * What the GitHub front door remembers about a reservation it created, kept in
 * `reservations.meta_json` (the column the ledger reserves for this part). Webhooks keep it
 * current so the dispatch re-check can refuse stale work without another API call. It lives in
 * the ledger because ledger commands write it in the transaction of the event they record (the
 * GitHub effects, `github-effects.ts`; docs/adr/0220-one-ledger-front-door.md).
 */
export interface GitHubMeta {
  installationId: number | null;
  trigger: 'label' | 'comment' | 'push' | 'schedule';
  /** The label that asked for the work (label triggers only). */
  label?: string | null;
  deliveryId?: string | null;
  defaultBranch: string;
  workflow: string;
  /** Latest PR head seen by webhooks; differs from headSha once new commits were pushed. */
  currentHeadSha?: string | null;
  prOpen?: boolean;
  /** Labels on the PR as of the last pull_request webhook. */
  labels?: string[];
  /** Set when a workflow_job for this reservation went in_progress (the runner picked it up). */
  jobPickedUpAt?: number | null;
  jobUrl?: string | null;
  /** An audited fault shown on the check run (e.g. a workflow_job that does not match). */
  fault?: string | null;
  note?: string | null;
  /** `status|title` of the last check-run update GitHub accepted. */
  lastCheck?: string | null;
  /**
   * Random nonce of the per-reservation runner label `spark-<id>-<nonce>`.
   * Secret until dispatch: never rendered on the dashboard, the status API, metrics or checks.
   */
  nonce?: string | null;
  /**
   * Whether the dispatched workflow declares the `nonce` input, so the runners carry the nonce
   * label and a job must ask for it (docs/adr/0131-workflow-contract-and-run-identity.md); false:
   * the allocation labels only. Unset (work dispatched before this was recorded) counts as true.
   */
  nonceLabel?: boolean | null;
  /** The dispatched workflow run and its attempt (recorded by `recordDispatchedRun`, from the dispatch answer). */
  runId?: number | null;
  runAttempt?: number | null;
  /**
   * `task`: the repository runs CI as a dstack task (ADR 0110), decided at the grant
   * from its config and kept for the reservation's life: no dispatch, no JIT runner, a clone token.
   */
  ci?: CiMode | null;
}

export function readMeta(r: Pick<ReservationRow, 'metaJson'>): GitHubMeta | null {
  if (!r.metaJson) return null;
  try {
    const m = JSON.parse(r.metaJson) as Partial<GitHubMeta>;
    if (typeof m !== 'object' || m === null || !m.trigger) return null;
    return { installationId: null, defaultBranch: 'main', workflow: 'spark-pr-test.yml', ...m } as GitHubMeta;
  } catch {
    return null;
  }
}

/** Merges `patch` into a reservation's GitHub meta inside the caller's transaction. */
export async function patchMeta(
  tx: Tx,
  r: ReservationRow,
  patch: Partial<GitHubMeta>,
): Promise<GitHubMeta | null> {
  const current = readMeta(r);
  if (!current) return null;
  const next = { ...current, ...patch };
  await writeReservationMeta(tx, r, JSON.stringify(next));
  return next;
}

/**
 * Merges `patch` into a reservation's GitHub meta on the ledger's side (`json_patch`): nothing is
 * read first, so a batched admission pass can carry it, and a field another writer changed since
 * `r` was read is kept (docs/adr/0185-admission-pass-in-two-round-trips.md). With `unlessSet`, a
 * meta that already has that field is left as it is (a runner nonce is drawn once). Patch values
 * must not be null (a merge patch's null removes the field).
 */
export async function mergeMeta(
  tx: Tx,
  r: ReservationRow,
  patch: Partial<GitHubMeta>,
  unlessSet?: keyof GitHubMeta,
): Promise<void> {
  const current = readMeta(r);
  if (!current || (unlessSet && current[unlessSet] != null)) return;
  await mergeReservationMeta(tx, r.id, patch, unlessSet);
  r.metaJson = JSON.stringify({ ...current, ...patch });
}
